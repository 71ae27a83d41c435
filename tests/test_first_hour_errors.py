"""Errors that point the right way, and the plain install that says what it skips. A mistyped
local path names the nearest run (never the Hub), a typo in `train -c` lists the shipped
configs, a text file given as a model says what it is, `vat mteb` without the Hub fails at
once; geometry images without matplotlib are one warning, every sentence file may be .gz, and
the tokenizer is callable as a transformers one is."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import ASSETS

from vat.errors import OptionError
from vat.share.resolve import load_model
from vat.tokenizer import EOS_ID, PAD_ID, make_batch


def _run(name: str, argv: list[str], capsys) -> tuple[int, list[str], str]:
    """A vat command in-process: its exit code, its stderr lines, its stdout."""
    from vat.cli import command

    try:
        code = command(name)(argv)
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, [ln for ln in cap.err.strip().splitlines() if ln.strip()], cap.out


@pytest.fixture
def runs(tmp_path, tiny_ckpt, monkeypatch) -> Path:
    """tmp_path/runs/demo, a run folder with its checkpoint, as the current folder's runs/.
    The Hub must not be asked: snapshot_download fails the test if it is called."""
    ckpts = tmp_path / "runs" / "demo" / "checkpoints"
    ckpts.mkdir(parents=True)
    shutil.copy(tiny_ckpt, ckpts / "last.ckpt")
    (tmp_path / "runs" / "notes.txt").write_text("not a run\n")
    monkeypatch.chdir(tmp_path)

    def no_hub(*args, **kwargs):
        raise AssertionError(f"the Hub was asked for {args}")

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_hub)
    return tmp_path / "runs"


# -- point 7: a mistyped path is a missing folder, with the nearest run --------------------
@pytest.mark.parametrize(
    "typed,nearest",
    [
        ("runs/dmeo", "runs/demo"),
        ("./runs/dmeo", "./runs/demo"),
        ("runs/demo/checkpoints/lsat.ckpt", "runs/demo/checkpoints/last.ckpt"),
    ],
)
def test_mistyped_local_path_names_the_nearest_run_not_the_hub(runs, typed, nearest, capsys):
    code, err, _ = _run("generate", ["reconstruct", "--model", typed, "a b"], capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: --model: {typed} does not exist (did you mean {nearest}?)")
    assert "Hugging Face" not in err[0]
    with pytest.raises(OptionError) as e:  # the library names its argument, not the flag
        load_model(typed)
    assert e.value.name == "model" and "--model" not in str(e.value)
    assert load_model(nearest).source.kind == "checkpoint"  # the suggestion is a model


def test_nothing_close_is_no_suggestion(runs, capsys):
    code, err, _ = _run("generate", ["reconstruct", "--model", "runs/zzzzzz", "a"], capsys)
    assert code == 2 and err == [
        "error: --model: runs/zzzzzz does not exist; expected a run folder, a .ckpt checkpoint, "
        "an exported folder, a shipped model's name (vat pretrained) or a Hub repo id user/name"
    ]


def test_hub_id_still_goes_to_the_hub_and_says_no_folder_first(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OptionError) as e:
        load_model("someone/vat-tiny", cache_dir=tmp_path / "hub")
    assert str(e.value) == (
        "model: someone/vat-tiny does not exist here, and cannot download someone/vat-tiny "
        "from the Hugging Face Hub (offline (HF_HUB_OFFLINE is set) and not in the Hub cache)"
    )


def test_hub_id_in_the_hub_cache_loads_offline(tiny_export, tmp_path, monkeypatch):
    """The real snapshot_download, offline, finds a cached repo: a user/name that is no
    local path is still a Hub id."""
    import huggingface_hub

    repo = tmp_path / "hub" / "models--someone--vat-tiny"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(tiny_export, repo / "snapshots" / commit)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    loaded = load_model("someone/vat-tiny", cache_dir=tmp_path / "hub")
    assert loaded.source.kind == "hub" and loaded.source.location == "someone/vat-tiny"
    assert Path(loaded.source.folder) == repo / "snapshots" / commit


@pytest.mark.parametrize(
    "name,content,what",
    [
        ("results.json", '{"STS12": {"all": 0.5}}', "a JSON file"),
        ("model.ckpt", '{"not": "a checkpoint"}', "a JSON file"),
        ("train.yaml", "model:\n  lr: 0.1\n", "a YAML file"),
        ("notes.txt", "some words\n", "a text file"),
        ("big.ckpt", "version https://git-lfs.github.com/spec/v1\noid sha256:ab\n", "a Git LFS"),
    ],
)
def test_a_text_file_as_model_says_what_it_is(tmp_path, name, content, what, capsys):
    path = tmp_path / name
    path.write_text(content)
    code, err, _ = _run("generate", ["reconstruct", "--model", str(path), "a"], capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: --model: {path} is {what}"), err[0]
    assert "a run folder, a .ckpt checkpoint, an exported folder" in err[0]
    assert "Unsupported operand" not in err[0] and "corrupt" not in err[0]


def test_the_config_json_of_a_folder_names_the_folder(tiny_export, tmp_path):
    folder = Path(shutil.copytree(tiny_export, tmp_path / "my-vat"))
    with pytest.raises(OptionError, match=r"is a JSON file, not a model \(did you mean the folder"):
        load_model(folder / "config.json")


def test_train_config_typo_lists_the_shipped_configs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no file named demoo here
    code, err, _ = _run("train", ["-c", "demoo"], capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(
        "error: -c: demoo is no file and no packaged config (did you mean demo?)"
    )
    assert "corpus_cpu, corpus_gpu" in err[0] and "sweeps/" not in err[0]  # vat config's names
    code, err, _ = _run("sweep", ["-c", "swep"], capsys)
    assert code == 2 and len(err) == 1, err
    assert "(did you mean sweeps/sweep?)" in err[0] and "sweeps/frontier_cpu" in err[0]


def test_mteb_without_the_hub_fails_at_once(tiny_export, tmp_path, monkeypatch, capsys):
    """An unreachable Hub (a local port nothing listens on) and no cached task data: one
    error line at once, not datasets' ~20 s of retried requests first."""
    import datasets.config
    import huggingface_hub

    dead = "http://127.0.0.1:9"  # the discard port: refused at once, no network involved
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", dead)
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", dead)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    start = time.perf_counter()
    code, err, _ = _run(
        "mteb", ["--model", str(tiny_export), "--tasks", "STSBenchmark", "--device", "cpu"], capsys
    )
    seconds = time.perf_counter() - start
    assert code == 2 and err[-1].startswith("error: cannot fetch MTEB task data: the Hugging ")
    assert "cannot be reached" in err[-1] and "mteb/stsbenchmark-sts" in err[-1], err[-1]
    assert not any("Retrying" in line for line in err) and seconds < 15, seconds
    assert datasets.config.HF_HUB_OFFLINE is False  # offline only for the evaluation
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False


# -- point 9: the plain install says what it skips, reads .gz, tokenizes the HF way ---------
def test_geometry_images_without_matplotlib_warn_once(monkeypatch):
    from vat.callbacks import GeometryMetrics

    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)  # import matplotlib: ImportError
    images = []
    writer = SimpleNamespace(add_image=lambda *args, **kwargs: images.append(args))
    report = SimpleNamespace(kl_per_dim=np.ones(4), active_unit_variances=np.ones(4))
    callback = GeometryMetrics(probe_file="unused.txt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):  # three validation runs, one warning
            callback._log_figures(writer, torch.randn(20, 4), report, step)
    said = [str(w.message) for w in caught]
    assert images == [] and len(said) == 1, said
    assert "geometry/plots/{spectrum,kl_per_dim,active_units} are skipped" in said[0]
    assert "pip install 'variational-auto-transformer[plots]'" in said[0]


def _gz(path: Path, text: str) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


def test_generate_reads_gz_input_as_train_does(tiny_ckpt, tmp_path, capsys):
    text = "The cat sat on the mat.\n\nTwo dogs run.\n"
    plain, packed = tmp_path / "in.txt", _gz(tmp_path / "in.txt.gz", text)
    plain.write_text(text)
    argv = ["reconstruct", "--model", str(tiny_ckpt), "--json", "--max-len", "6", "--input"]
    outputs = []
    for path in (plain, packed):
        code, err, out = _run("generate", [*argv, str(path)], capsys)
        assert code == 0, err
        outputs.append([json.loads(line) for line in out.splitlines()])
    assert outputs[1] == outputs[0] and len(outputs[1]) == 3  # one line per input line
    assert [r["input"] for r in outputs[1]] == ["The cat sat on the mat.", "", "Two dogs run."]
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(packed.read_bytes()[:-8])  # the gzip trailer cut off
    code, err, _ = _run("generate", [*argv, str(broken)], capsys)
    assert code == 2 and len(err) == 1, err
    said = f"error: --input {broken} is a truncated or corrupt gzip file ("
    assert err[0].startswith(said), err[0]


def test_every_sentence_file_reader_takes_gz(tmp_path, tiny_sentences):
    from vat.geometry.probes import load_probe_sentences

    plain = ASSETS / "sentences.txt"
    packed = _gz(tmp_path / "probe.txt.gz", plain.read_text())
    assert load_probe_sentences(packed) == load_probe_sentences(plain)
    assert load_probe_sentences(packed)[:3] == tiny_sentences[:3]


def test_tokenizer_is_callable_the_hugging_face_way(tiny_tokenizer):
    tok = tiny_tokenizer
    texts = ["the cat sat on the mat", "a dog"]
    ids = tok.encode_batch(texts)
    one = tok(texts[0])
    assert one == {"input_ids": [*ids[0], EOS_ID], "attention_mask": [1] * (len(ids[0]) + 1)}
    assert one.input_ids == one["input_ids"]  # keys are attributes, as in BatchEncoding
    assert tok(texts)["input_ids"] == [[*x, EOS_ID] for x in ids]  # no padding by default

    batch = tok(texts, padding=True, return_tensors="pt")
    src = make_batch(ids)["src"]  # what the encoder reads in training
    assert torch.equal(batch["input_ids"], src)
    assert torch.equal(batch["attention_mask"], (src != PAD_ID).long())
    assert tok(texts[1], return_tensors="pt")["input_ids"].shape == (1, len(ids[1]) + 1)

    cut = tok(texts, truncation=True, max_length=4, padding="max_length", return_tensors="np")
    assert np.array_equal(cut["input_ids"], make_batch(ids, max_len=4)["src"][:, :4].numpy())
    assert cut["input_ids"].shape == (2, 4) and cut["attention_mask"][1].tolist() == [
        1 if i <= len(ids[1]) else 0 for i in range(4)
    ]
    bare = tok(texts[0], add_special_tokens=False, return_attention_mask=False)
    assert bare == {"input_ids": ids[0]}

    for kwargs, name in [
        ({"return_tensors": "pt"}, "padding"),  # ragged texts need padding, as in transformers
        ({"padding": "max_length"}, "max_length"),
        ({"padding": "most"}, "padding"),
        ({"truncation": True, "max_length": 1}, "max_length"),
        ({"return_tensors": "tf"}, "return_tensors"),
    ]:
        with pytest.raises(OptionError) as e:
            tok(texts, **kwargs)
        assert e.value.name == name, (kwargs, str(e.value))
