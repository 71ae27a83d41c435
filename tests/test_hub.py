"""vat.share.folder, vat.share.hub and vat.share.export: exported folders (safetensors +
config + tokenizer + card), reading them back, the Hub path."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from helpers import export_folder
from huggingface_hub import HfApi
from safetensors import safe_open

from vat.errors import VatError, run_cli
from vat.feature_spec import DEFAULT_EXPORT_SPEC
from vat.features import sentence_features
from vat.share import folder as fmt
from vat.share.checkpoint import CheckpointError, read_checkpoint
from vat.share.loaded import LoadedVAT, ModelSource
from vat.share.resolve import load_model

ROOT = Path(__file__).resolve().parents[1]
FOLDER_FILES = sorted(fmt.FILES)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A real 2-step training run (tests/assets/tiny.yaml), in-process: RUN/checkpoints/*.ckpt."""
    from vat.cli.train import main

    run = tmp_path_factory.mktemp("train") / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(
            [
                "fit",
                "-c",
                str(ROOT / "tests/assets/tiny.yaml"),
                "--run_dir",
                str(run),
                "--data.cache_dir",
                str(run.parent / "cache"),
                "--data.train_files",
                json.dumps([str(ROOT / "tests/assets/sentences.txt")]),
            ]
        )
    assert code == 0
    return run


def _best(run: Path) -> Path:
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    return best


def test_export_of_a_training_checkpoint(trained, tmp_path, tiny_sentences):
    ckpt = _best(trained)
    out = export_folder(ckpt, tmp_path / "exported")
    # vat train stores token counts, so the default spec's SIF weights come along
    assert sorted(p.name for p in out.iterdir()) == sorted([*FOLDER_FILES, fmt.FEATURES_NAME])

    raw = read_checkpoint(ckpt)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "vat" and config["format_version"] == fmt.HUB_FORMAT_VERSION
    assert config["model_config"] == raw["vat"]["model_config"]
    assert (
        config["prior_std"] == raw["vat"]["prior_std"]
        and config["length_histogram"] == raw["vat"]["length_histogram"]
    )
    training = config["training"]
    assert training["global_step"] == raw["global_step"] == 2
    monitor = next(s for s in raw["callbacks"].values() if s.get("monitor"))
    assert training["metrics"]["val/loss"] == pytest.approx(float(monitor["current_score"]))
    # absolute, so a fit finds it from any folder; the card names only the file
    assert training["data"]["train_files"] == [str(ROOT / "tests/assets/sentences.txt")]
    assert training["optim"]["lr"] == 0.001  # hyperparameters kept; optimizer *state* dropped
    assert "optimizer_states" not in json.dumps(config)

    # Weights: safetensors with the tied embedding / lm_head stored once, and nothing else.
    state = {k[len("model.") :]: v for k, v in raw["state_dict"].items() if k.startswith("model.")}
    with safe_open(out / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert keys == set(state) - {"lm_head.weight"}

    loaded, original = load_model(out), load_model(ckpt)
    assert loaded.model.lm_head.weight is loaded.model.embed.weight  # re-tied
    for k, v in original.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v), k
    assert loaded.tokenizer.to_str() == original.tokenizer.to_str()
    a = sentence_features(loaded.model, loaded.tokenizer, tiny_sentences)
    b = sentence_features(original.model, original.tokenizer, tiny_sentences)
    assert (a == b).all()

    card = (out / "README.md").read_text()
    for text in (
        "library_name: vat",
        "| d_model | 32 |",
        "s = 0.4",
        "optimizer steps: 2",
        "sentences.txt",
        f"val/loss: {monitor['current_score']:.4f}",
        'vat.load("',
    ):
        assert text in card, text


def test_export_is_atomic_and_never_overwrites_by_accident(tiny_ckpt, tmp_path, monkeypatch):
    out = tmp_path / "model"
    export_folder(tiny_ckpt, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(VatError, match="^overwrite: output .* exists and is not empty; set it"):
        export_folder(tiny_ckpt, out)

    def broken_card(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(fmt, "model_card", broken_card)
    with pytest.raises(RuntimeError, match="disk full"):
        export_folder(tiny_ckpt, out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old folder is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temp folder left behind
    monkeypatch.undo()

    (out / "stale.txt").write_text("not written by vat export")  # refused, even with overwrite
    with pytest.raises(VatError, match="not an earlier vat export .stale.txt"):
        export_folder(tiny_ckpt, out, overwrite=True)
    assert (out / "stale.txt").read_text() == "not written by vat export"
    (out / "stale.txt").unlink()
    export_folder(tiny_ckpt, out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == FOLDER_FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]

    empty = tmp_path / "empty"
    empty.mkdir()
    export_folder(tiny_ckpt, empty)  # an existing empty folder is fine
    (tmp_path / "notes").mkdir()
    with pytest.raises(VatError, match="neither an exported vat folder .* nor a run folder"):
        export_folder(tmp_path / "notes", tmp_path / "x")


def test_untied_model_roundtrip(tiny_tokenizer, tmp_path):
    from conftest import tiny_config

    from vat.model import VAT

    torch.manual_seed(1)
    model = VAT(tiny_config(tiny_tokenizer.vocab_size, tie_embeddings=False))
    made = LoadedVAT(model, tiny_tokenizer, 1.0, [], ModelSource("checkpoint", "made-here"))
    fmt.save_folder(tmp_path / "m", made)
    loaded = load_model(tmp_path / "m")
    assert loaded.model.lm_head.weight is not loaded.model.embed.weight
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v), k


def test_every_ckpt_option_accepts_an_exported_folder(tiny_ckpt, tmp_path, tiny_sentences, capsys):
    from vat.cli.generate import main as generate_main
    from vat.cli.geometry import _main as geometry_main
    from vat.generate.generator import VATGenerator

    out = export_folder(tiny_ckpt, tmp_path / "m")
    probe = tmp_path / "probe.txt"
    probe.write_text("\n".join(tiny_sentences) + "\n")
    rc = run_cli(
        geometry_main,
        [
            "--ckpt",
            str(out),
            "--probe",
            str(probe),
            "--min-count",
            "2",
            "--output",
            str(tmp_path / "g.json"),
        ],
    )
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    assert json.loads((tmp_path / "g.json").read_text())["model"]["prior_std"] == 0.4

    rc = generate_main(["reconstruct", "--ckpt", str(out), "--input", str(probe), "--max-len", "5"])
    from_folder = capsys.readouterr().out
    assert rc == 0 and len(from_folder.splitlines()) == len(tiny_sentences)
    generate_main(
        ["reconstruct", "--ckpt", str(tiny_ckpt), "--input", str(probe), "--max-len", "5"]
    )
    assert capsys.readouterr().out == from_folder
    assert VATGenerator.from_loaded(load_model(out)).prior_std == 0.4


def test_evaluate_accepts_an_exported_folder(tiny_ckpt, tmp_path, senteval_dir, capsys):
    """`vat evaluate --ckpt FOLDER` scores exactly what `--ckpt CKPT` does."""
    from helpers import evaluate_args

    from vat.cli.evaluate import main as evaluate_main

    out = export_folder(tiny_ckpt, tmp_path / "m")
    scores = []
    for ckpt, name in ((out, "folder.json"), (tiny_ckpt, "ckpt.json")):
        assert evaluate_main(evaluate_args(ckpt, senteval_dir, tmp_path / name)) == 0
        scores.append(json.loads((tmp_path / name).read_text())["STS12"])
    capsys.readouterr()
    assert scores[0] == scores[1] and scores[0]["all"]["spearman"]["mean"] is not None


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "model.safetensors").unlink(), "needs model.safetensors"),
        (lambda d: (d / "model.safetensors").write_bytes(b"not safetensors"), "corrupt"),
        (lambda d: (d / "config.json").write_text("{"), "not valid JSON"),
        (lambda d: (d / "config.json").write_text('{"model_type": "bert"}'), "not a vat config"),
        (lambda d: _edit_config(d, d_model=64, n_heads=4), "has shape .*, its config implies"),
        (lambda d: _edit_config(d, format_version=99), "unsupported vat folder format"),
    ],
)
def test_damaged_folder_is_a_one_line_error(tiny_ckpt, tmp_path, damage, message):
    out = export_folder(tiny_ckpt, tmp_path / "m")
    damage(out)
    with pytest.raises(CheckpointError, match=message) as e:
        load_model(out)
    assert "\n" not in str(e.value)


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        (config if k == "format_version" else config["model_config"])[k] = v
    (folder / "config.json").write_text(json.dumps(config))


def test_hub_id_goes_through_snapshot_download(monkeypatch, tmp_path):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        VatError, match=r"cannot download someone/vat-tiny from the Hugging Face Hub"
    ) as e:
        load_model("someone/vat-tiny", cache_dir=tmp_path)
    assert "\n" not in str(e.value)
    with pytest.raises(VatError, match="does not exist"):
        load_model(tmp_path / "missing" / "model")


class RecordingHfApi(HfApi):
    """huggingface_hub's real HfApi with the two network calls recorded instead of sent."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[str, tuple, dict]] = []

    def create_repo(self, *args, **kwargs):
        self.calls.append(("create_repo", args, kwargs))

    def upload_folder(self, *args, **kwargs):
        folder = Path(kwargs["folder_path"])
        self.uploaded = {p.name: p.read_bytes() for p in folder.iterdir()}  # gone after the call
        self.reloaded = load_model(folder)
        self.calls.append(("upload_folder", args, kwargs))
        return "commit-info"


def test_push_to_hub_uploads_the_exported_folder(tiny_ckpt, tmp_path, monkeypatch):
    import vat
    from vat.share import hub

    api = RecordingHfApi()
    model = vat.load(tiny_ckpt, device="cpu")
    assert (
        model.push_to_hub("me/vat-tiny", private=True, api=api, commit_message="first")
        == "commit-info"
    )
    (create, args, kwargs), (upload, _, up) = api.calls
    assert create == "create_repo" and args == ("me/vat-tiny",)
    assert kwargs == {"repo_type": "model", "private": True, "exist_ok": True}
    assert (
        upload == "upload_folder" and up["repo_id"] == "me/vat-tiny" and up["repo_type"] == "model"
    )
    assert up["commit_message"] == "first"
    assert sorted(up["allow_patterns"]) == sorted(fmt.ALL_FILES)
    assert sorted(api.uploaded) == FOLDER_FILES
    original = load_model(tiny_ckpt)
    for k, v in original.model.state_dict().items():
        assert torch.equal(api.reloaded.model.state_dict()[k], v), k
    assert not Path(up["folder_path"]).exists()  # the scratch export is cleaned up

    exported = export_folder(tiny_ckpt, tmp_path / "m")
    api = RecordingHfApi()
    hub.upload(exported, "me/vat-tiny", api=api)
    assert api.calls[1][2]["folder_path"] == str(exported)  # a folder is uploaded as it is

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(VatError, match="cannot push to the Hugging Face Hub repo me/vat-tiny"):
        hub.upload(exported, "me/vat-tiny", token="hf_not_a_real_token")


def test_export_command(tiny_ckpt, tmp_path, capsys):
    from vat.cli.export import main

    out = tmp_path / "m"
    assert main([str(tiny_ckpt), str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == FOLDER_FILES
    assert main([str(tiny_ckpt), str(out)]) == 2  # exists: one line, exit 2, nothing replaced
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --overwrite: output") and "\n" not in err
    assert main([str(tiny_ckpt), str(out), "--overwrite"]) == 0
    assert main([str(tmp_path / "missing.ckpt"), str(tmp_path / "n")]) == 2
    assert "missing.ckpt does not exist" in capsys.readouterr().err
    assert not (tmp_path / "n").exists()


# -- the model card ----------------------------------------------------------------------------
def test_card_comes_from_the_checkpoint_itself(trained, tmp_path):
    """The checkpoint records its training at save time (vat.share.training_record), so a .ckpt
    copied out of its run folder gives the same card; huggingface_hub parses the card."""
    from huggingface_hub import ModelCard

    from vat.share.model_card import DEFAULT_LICENSE, DISTRIBUTION

    best = _best(trained)
    record = read_checkpoint(best)["vat"]["training"]
    assert record["data"]["train_files"] == [str(ROOT / "tests/assets/sentences.txt")]
    assert record["tokens_seen"] > 0 and record["global_step"] == 2
    assert set(record["metrics"]) >= {"val/nll", "val/kl", "val/loss"}
    copied = tmp_path / "elsewhere" / best.name
    copied.parent.mkdir()
    copied.write_bytes(best.read_bytes())
    a = export_folder(best, tmp_path / "a" / "m")  # the same folder name: the card names it
    b = export_folder(copied, tmp_path / "b" / "m")
    text = (a / "README.md").read_text()
    assert text == (b / "README.md").read_text()
    card = ModelCard.load(a / "README.md")
    assert card.data.license == DEFAULT_LICENSE and card.data.language == "en"
    assert card.data.pipeline_tag == "sentence-similarity" and card.data.datasets is None
    assert "- data: sentences.txt" in text
    assert f"- training tokens: {record['tokens_seen']:,}" in text
    assert f"rate (validation): {record['metrics']['val/kl']:.3f} nats per token" in text
    assert "s = 0.4" in text and f'pip install "{DISTRIBUTION}[integrations]"' in text


def test_export_evaluate_license_and_repo_id_make_the_model_index(
    trained, tmp_path, capsys, monkeypatch
):
    from eval_helpers import write_mini_senteval
    from huggingface_hub import ModelCard

    from vat.cli.evaluate import main as evaluate_main
    from vat.cli.export import main as export_main

    mini = write_mini_senteval(tmp_path / "senteval")
    out = tmp_path / "m"
    argv = [str(trained), str(out), "--license", "mit", "--language", "en", "--device", "cpu"]
    assert export_main([*argv, "--evaluate", "NOPE", "--data-dir", str(mini)]) == 2
    assert capsys.readouterr().err.startswith("error: --evaluate: ") and not out.exists()
    assert export_main([*argv, "--evaluate", "STS12,STSBenchmark", "--data-dir", str(mini)]) == 0
    card = ModelCard.load(out / "README.md")
    assert card.data.license == "mit" and card.data.model_name == "m"  # the folder's name
    index = {r.dataset_name: r for r in card.data.eval_results}
    assert set(index) == {"SentEval STS12", "SentEval STSBenchmark"}
    sts_b = index["SentEval STSBenchmark"]
    assert (sts_b.task_type, sts_b.dataset_split, sts_b.metric_type) == (
        "sentence-similarity",
        "test",
        "spearman",
    )
    # the same numbers as `vat evaluate` on the exported folder (its `_scores`, in percent)
    res = tmp_path / "res.json"
    assert (
        evaluate_main(
            [
                "--model",
                str(out),
                "--tasks",
                "STS12,STSBenchmark",
                "--data-dir",
                str(mini),
                "--output",
                str(res),
                "--no-progress",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    scores = json.loads(res.read_text())["_scores"]
    # the folder's own feature spec (vat export's default) is what both scored
    st_cfg = json.loads((out / "sentence_vat_config.json").read_text())
    assert st_cfg["features"] == DEFAULT_EXPORT_SPEC
    assert sts_b.metric_value == scores["STSBenchmark"]["value"]
    assert index["SentEval STS12"].metric_value == scores["STS12"]["value"]
    # re-exporting the folder keeps card and evaluation; --push-to-hub names the repo
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the push fails
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    assert export_main([str(out), str(tmp_path / "m2"), "--push-to-hub", "me/vat-demo"]) == 2
    text = (tmp_path / "m2" / "README.md").read_text()
    assert 'vat.load("me/vat-demo")' in text and "PATH_OR_REPO_ID" not in text
    again = ModelCard.load(tmp_path / "m2" / "README.md")
    assert again.data.license == "mit" and len(again.data.eval_results) == 2
    assert again.data.model_name == "me/vat-demo"
