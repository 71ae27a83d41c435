"""One model option everywhere (`--model`, alias `--ckpt`; vat.share.resolve), the errors in
the caller's language, no abbreviated options, and sentence-transformers' encode."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import export_folder

import vat
from vat.errors import OptionError, VatError
from vat.model import VAT
from vat.share.checkpoint import save_vat
from vat.share.hub import looks_like_repo_id
from vat.share.resolve import resolve_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_dir(tiny_ckpt, tiny_tokenizer, tmp_path_factory) -> Path:
    """A run folder as `vat train` leaves it: checkpoints/last.ckpt and a different best."""
    from conftest import tiny_config

    run = tmp_path_factory.mktemp("run") / "demo"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_ckpt, run / "checkpoints" / "last.ckpt")
    torch.manual_seed(1)
    other = VAT(tiny_config(tiny_tokenizer.vocab_size))
    save_vat(run / "checkpoints" / "best-step0000002.ckpt", other, tiny_tokenizer, 0.4)
    return run


@pytest.fixture(scope="module")
def exported(tiny_ckpt, tmp_path_factory) -> Path:
    return export_folder(tiny_ckpt, tmp_path_factory.mktemp("opt") / "model")


def test_resolve_model_kinds(tiny_ckpt, exported, run_dir, tmp_path):
    assert resolve_model(tiny_ckpt).kind == "checkpoint"
    assert resolve_model(exported).kind == "folder"
    src = resolve_model(run_dir)  # a run folder means its best checkpoint ...
    assert (src.kind, Path(src.location).name) == ("checkpoint", "best-step0000002.ckpt")
    assert src.run_dir == str(run_dir)
    only_last = tmp_path / "run"
    shutil.copytree(run_dir, only_last)
    (only_last / "checkpoints" / "best-step0000002.ckpt").unlink()
    assert Path(resolve_model(only_last).location).name == "last.ckpt"  # ... else last.ckpt
    assert looks_like_repo_id("user/my-vat") and not looks_like_repo_id("./user/my-vat")
    (only_last / "checkpoints" / "last.ckpt").unlink()
    with pytest.raises(OptionError, match="run folder without checkpoints/best-"):
        resolve_model(only_last)
    with pytest.raises(OptionError, match=r"^model: .*nope.ckpt does not exist"):
        resolve_model(tmp_path / "nope.ckpt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OptionError, match="neither an exported vat folder"):
        resolve_model(tmp_path / "empty")


def test_load_takes_a_run_folder(run_dir, tiny_sentences):
    best = run_dir / "checkpoints" / "best-step0000002.ckpt"
    got = vat.load(run_dir, device="cpu").encode(tiny_sentences[:4])
    assert (got == vat.load(best, device="cpu").encode(tiny_sentences[:4])).all()
    last = vat.load(run_dir / "checkpoints" / "last.ckpt", device="cpu")
    assert not np.allclose(got, last.encode(tiny_sentences[:4]))  # really the best one


def test_generate_model_option_and_its_alias(run_dir, capsys):
    from vat.cli.generate import main

    best = run_dir / "checkpoints" / "best-step0000002.ckpt"
    outs = []
    for argv in (
        ["--model", str(run_dir)],
        ["--ckpt", str(best)],
        ["--model", str(best)],
    ):
        assert main(["reconstruct", *argv, "--max-len", "5", "A cat."]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] == outs[2] and outs[0].strip()


@pytest.mark.parametrize(
    "argv,message",
    [
        # counts are refused as argparse reads them, before the model loads
        (["sample", "--num-samples", "0", "A cat."], "error: argument -n/--num-samples: must be"),
        (["reconstruct", "--max-len", "0", "A."], "error: argument --max-len: must be at least"),
        # library errors name the Python argument; the command shows its flag
        (["reconstruct", "--sampling", "--top-p", "1.5", "A cat."], "error: --top-p: must be"),
        (["reconstruct", "--sampling", "--temperature", "0", "A."], "error: --temperature: must"),
        # no prefix matching: --num-sample is not --num-samples
        (["sample", "--num-sample", "2", "A cat."], "error: unrecognized arguments: --num-sample "),
    ],
)
def test_cli_errors_name_flags(tiny_ckpt, capsys, argv, message):
    from vat.cli.generate import main

    assert main([argv[0], "--model", str(tiny_ckpt), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_cli_model_that_names_nothing(tmp_path, capsys):
    from vat.cli.generate import main

    assert main(["reconstruct", "--model", str(tmp_path / "x.ckpt"), "A cat."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --model: ") and "x.ckpt does not exist" in err


def test_train_parser_refuses_abbreviated_options(capsys):
    """LightningCLI builds every parser and subcommand parser of `vat train` from this class
    (VATCLI's parser_class); jsonargparse matched prefixes before."""
    from vat.cli.train import _OneLineErrorParser

    p = _OneLineErrorParser()
    p.add_argument("--trainer.max_steps", type=int, default=-1)
    assert p.parse_args(["--trainer.max_steps", "5"])["trainer.max_steps"] == 5
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--trainer.max_step", "5"])
    assert e.value.code == 2 and "--trainer.max_step" in capsys.readouterr().err


def test_geometry_prints_the_table_without_output(
    run_dir, probe_file, tmp_path, capsys, monkeypatch
):
    from vat.cli.geometry import main

    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert main(["--model", str(run_dir), "--probe", str(probe_file), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "geometry of best-step0000002.ckpt" in out and "wrote" not in out
    assert list((tmp_path / "cwd").iterdir()) == []  # nothing written


def test_export_takes_any_model_and_push_failure_is_one_line(
    run_dir, exported, tmp_path, capsys, monkeypatch
):
    from vat.cli.export import main

    assert main([str(run_dir), str(tmp_path / "a")]) == 0  # a run folder: its best checkpoint
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["training"]["source_checkpoint"] == "best-step0000002.ckpt"
    assert main(["--model", str(tmp_path / "a"), str(tmp_path / "b")]) == 0  # an exported one
    assert json.loads((tmp_path / "b" / "config.json").read_text())["training"] == cfg["training"]
    for folder in (tmp_path / "a", tmp_path / "b"):  # weights readable like the other files
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
        assert len(set(modes.values())) == 1, modes
    capsys.readouterr()
    # The push fails for real (nothing listens on the endpoint): one line, the folder kept,
    # and the command that retries the upload.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    # (--features mu/mean/none: this synthetic checkpoint has no token counts for the default
    # spec's SIF weights, which would add a warning line; test_feature_spec.py covers that)
    c_args = [str(run_dir), str(tmp_path / "c"), "--features", "mu/mean/none"]
    assert main([*c_args, "--push-to-hub", "me/tiny"]) == 2
    out, err = capsys.readouterr()
    assert f"wrote {tmp_path / 'c'}" in out and err.count("\n") == 1
    assert err.startswith("error: cannot push to the Hugging Face Hub repo me/tiny")
    assert f"retry the upload with `vat export {tmp_path / 'c'} --push-to-hub me/tiny`" in err
    assert (tmp_path / "c" / "model.safetensors").is_file()
    assert main(["--push-to-hub", "me/tiny", str(tmp_path / "c")]) == 2  # the retry: push only
    assert "retry the upload" in capsys.readouterr().err
    assert main([str(tmp_path / "c")]) == 2  # no DIR and nothing to push
    assert "DIR (the folder to write) is required" in capsys.readouterr().err


def test_save_pretrained_weights_mode(tiny_ckpt, tmp_path):
    out = vat.load(tiny_ckpt, device="cpu").save_pretrained(tmp_path / "m")
    mode = stat.S_IMODE((out / "model.safetensors").stat().st_mode)
    assert mode == stat.S_IMODE((out / "config.json").stat().st_mode)
    assert mode & stat.S_IRGRP  # readable by the group (0644 under a 022 umask)


def test_encode_follows_sentence_transformers(exported, tiny_sentences, capsys):
    from sentence_transformers import SentenceTransformer, util

    model = vat.load(exported, device="cpu")
    batch = model.encode(tiny_sentences)
    one = model.encode(tiny_sentences[0])
    assert one.shape == (model.dim,)  # a single string gives one vector
    np.testing.assert_allclose(one, batch[0], rtol=1e-5, atol=1e-6)
    t = model.encode(tiny_sentences, convert_to_tensor=True)
    assert torch.is_tensor(t) and torch.equal(t, torch.from_numpy(batch))
    rows = model.encode(tiny_sentences[:3], convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == 3 and rows[0].shape == (model.dim,)
    unit = model.encode(tiny_sentences, normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)

    st = SentenceTransformer(str(exported), trust_remote_code=True, device="cpu")
    st_emb = st.encode(tiny_sentences)
    np.testing.assert_allclose(st_emb, batch, rtol=1e-5, atol=1e-5)
    sim = model.similarity(batch, batch[:3])
    assert sim.shape == (len(tiny_sentences), 3)
    np.testing.assert_allclose(sim.numpy(), st.similarity(st_emb, st_emb[:3]).numpy(), atol=1e-5)
    np.testing.assert_allclose(sim.numpy(), util.cos_sim(batch, batch[:3]).numpy(), atol=1e-6)

    capsys.readouterr()
    model.encode(tiny_sentences, show_progress_bar=True)
    assert "encoding" in capsys.readouterr().err  # the bar, on stderr
    model.encode(tiny_sentences)  # short input: no bar by default
    assert capsys.readouterr().err == ""
    with pytest.raises(VatError, match="batch_size: must be at least 1"):
        model.encode(["a"], batch_size=0)


def test_plot_is_a_png_and_plot_dir_a_folder_in_evaluate_and_geometry():
    """docs/cli.md: --plot FILE is a PNG, --plot-dir DIR a folder; --plots is the older
    spelling of each command's option (with a warning, tests/test_cli_vocabulary.py)."""
    from vat.cli.evaluate import build_parser as evaluate_parser
    from vat.cli.geometry import build_parser as geometry_parser

    for flag in ("--plot", "--plots"):
        assert evaluate_parser().parse_args(["--model", "m", flag, "a.png"]).plot == "a.png"
    for flag in ("--plot-dir", "--plots"):
        assert geometry_parser().parse_args(["--model", "m", flag, "dir"]).plot_dir == "dir"
