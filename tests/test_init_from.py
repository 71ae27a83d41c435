"""`vat train --init-from MODEL` (vat/train/init_from.py): a fresh run that starts from a trained
model, from every form a model argument takes.

The measure of a faithful start: the continued run's first validation (logged at step 0,
before any update) equals the source model's own validation on the same data, which `vat
train validate --ckpt_path SOURCE` computes without --init-from's code path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from helpers import TINY, export_folder, fit_args, scalars, train_captured

from vat.share.checkpoint import read_checkpoint

# Same float32 weights, data and seeded validation: the numbers agree to float rounding
# (measured: identical on this CPU); 1e-5 relative leaves room for another BLAS kernel.
SAME = dict(rel=1e-5)


def _val(run: Path, tag: str = "val/nll") -> list[tuple[int, float]]:
    return scalars(run)[tag]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, Path, float]:
    """A tiny run trained 4 steps (the model to continue), its cache, and its own val NLL as
    `vat train validate --ckpt_path` measures it."""
    tmp = tmp_path_factory.mktemp("init_from")
    cache = tmp / "cache"
    code, err = train_captured(fit_args(tmp / "src", cache, "--trainer.max_steps", "4"))
    assert code == 0, err
    ckpt = tmp / "src" / "checkpoints" / "last.ckpt"
    return ckpt, cache, _own_nll(ckpt, cache, tmp / "val")


def _own_nll(ckpt: Path, cache: Path, run: Path) -> float:
    """The val NLL of `ckpt` on the tiny config's data, as `vat train validate` measures it."""
    code, err = train_captured(
        ["validate", "-c", TINY, "--run_dir", str(run), "--data.cache_dir", str(cache)]
        + ["--ckpt_path", str(ckpt)]
    )
    assert code == 0, err
    ((_, nll),) = _val(run)
    return nll


@pytest.mark.parametrize("form", ["checkpoint", "run folder", "exported folder"])
def test_the_first_validation_is_the_models_own(source, tmp_path, form):
    from vat.share.resolve import run_checkpoint

    ckpt, cache, own_nll = source
    if form == "run folder":  # it stands for its best checkpoint, not for last.ckpt
        ckpt = run_checkpoint(ckpt.parent.parent)
        assert ckpt.name.startswith("best-")
        own_nll = _own_nll(ckpt, cache, tmp_path / "val")
    model = {
        "checkpoint": ckpt,
        "run folder": ckpt.parent.parent,
        "exported folder": tmp_path / "exported",
    }[form]
    if form == "exported folder":
        export_folder(ckpt, model)
    run = tmp_path / "run"
    code, err = train_captured(
        fit_args(run, cache, "--trainer.max_steps", "2", "--init-from", str(model))
    )
    assert code == 0, err
    said = [ln for ln in err if "--init-from" in ln]
    assert len(said) == 1 and "start fresh" in said[0], err
    step, nll = _val(run)[0]
    assert step == 0 and nll == pytest.approx(own_nll, **SAME)
    # the weights themselves came across: a continued run's first update starts from them
    record = read_checkpoint(run / "checkpoints" / "last.ckpt")["vat"]["training"]
    assert record["init_from"]["global_step"] == read_checkpoint(ckpt)["global_step"]
    assert not os.path.isabs(record["init_from"]["model"])  # a card never names a machine's path
    assert record["tokens_total"] == record["tokens_seen"] + record["init_from"]["tokens_total"]


def test_a_continued_run_learns_and_its_resume_keeps_the_record(source, tmp_path):
    ckpt, cache, own_nll = source
    run = tmp_path / "run"
    # the source trained 4 steps from nothing: 16 more on the same lines must lower its NLL
    common = ["--init-from", str(ckpt)]
    code, err = train_captured(fit_args(run, cache, "--trainer.max_steps", "8", *common))
    assert code == 0, err
    first = read_checkpoint(run / "checkpoints" / "last.ckpt")["vat"]["training"]
    code, err = train_captured(
        fit_args(run, cache, "--trainer.max_steps", "16", *common, "--ckpt_path", "last")
    )
    assert code == 0, err
    assert not any("start fresh" in ln for ln in err), err  # a resume continues its own state
    curve = _val(run)
    assert curve[0][0] == 0 and curve[-1][0] > 8
    assert curve[-1][1] < curve[0][1] - 0.05, curve
    after = read_checkpoint(run / "checkpoints" / "last.ckpt")["vat"]["training"]
    assert after["init_from"] == first["init_from"]
    assert after["tokens_seen"] > first["tokens_seen"]
    assert after["tokens_total"] == after["tokens_seen"] + first["init_from"]["tokens_total"]


def test_a_checkpoint_of_this_run_is_resumed_not_continued(source, tmp_path):
    ckpt, cache, _ = source
    run = tmp_path / "src"
    shutil.copytree(ckpt.parent.parent, run)
    code, err = train_captured(
        fit_args(run, cache, "--trainer.max_steps", "6")
        + ["--init-from", str(run / "checkpoints" / "last.ckpt")]
    )
    assert code == 0, err
    assert any("is a checkpoint of this run" in ln and "resuming" in ln for ln in err), err
    done = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert done["global_step"] == 6 and "init_from" not in done["vat"]["training"]
    assert (run / "config-resume-1.yaml").is_file()


@pytest.mark.parametrize(
    "option, message",
    [
        (["--model.arch.d_model", "48"], "--model.arch.d_model is 48 here but 32 in"),
        (["--data.vocab_size", "500"], "--data.vocab_size is 500 here but"),
        (["--data.max_len", "64"], "has positions for 40 tokens"),
        (["--model.loss.prior_std", "1.0"], "--model.loss.prior_std is 1.0 here but 0.4 in"),
    ],
)
def test_a_setting_against_the_model_is_one_line(source, tmp_path, option, message):
    ckpt, cache, _ = source
    code, err = train_captured(fit_args(tmp_path / "run", cache, "--init-from", str(ckpt), *option))
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_keys_left_at_their_defaults_take_the_models_values(source, tmp_path):
    """A config that says nothing of the shape continues any model: here the source's d 32,
    vocabulary 400 and 40 positions replace the defaults (128, 32768, 128)."""
    ckpt, cache, own_nll = source
    cfg = yaml.safe_load(Path(TINY).read_text())
    del cfg["model"]["arch"], cfg["data"]["vocab_size"], cfg["data"]["max_len"]
    cfg["data"]["train_files"] = [str(ROOT / f) for f in cfg["data"]["train_files"]]
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    args = ["fit", "-c", str(tmp_path / "plain.yaml"), "--run_dir", str(run)]
    code, err = train_captured([*args, "--data.cache_dir", str(cache), "--init-from", str(ckpt)])
    assert code == 0, err
    assert _val(run)[0][1] == pytest.approx(own_nll, **SAME)
    arch = read_checkpoint(run / "checkpoints" / "last.ckpt")["hyper_parameters"]["arch"]
    assert (arch["d_model"], arch["vocab_size"], arch["max_len"]) == (32, 400, 40)


def test_a_shipped_model_continues_without_writing_into_the_registry(tmp_path):
    """The packaged continue_cpu config (no shape of its own) continues the shipped demo model
    on the bundled sentences, with the model's tokenizer, and nothing in the package
    changes."""
    from vat.share.pretrained import named_shipped
    from vat.tokenizer import VATTokenizer

    entry = named_shipped("demo-wordnet-d64")
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in entry.folder.iterdir()}
    run = tmp_path / "run"
    code, err = train_captured(
        ["fit", "-c", str(ROOT / "vat" / "configs" / "continue_cpu.yaml"), "--run_dir", str(run)]
        + ["--data.cache_dir", str(tmp_path / "cache"), "--init-from", "demo-wordnet-d64"]
        + ["--trainer.max_steps", "2", "--trainer.limit_val_batches", "1"]
        + ["--data.train_files", f"[{ROOT / 'data' / 'demo_val.txt'}]"]
    )
    assert code == 0, err
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in entry.folder.iterdir()}
    assert after == before
    entry.verify()
    ckpt = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert ckpt["vat"]["training"]["init_from"]["model"] == "demo-wordnet-d64"
    assert ckpt["vat"]["training"]["init_from"]["kind"] == "shipped"
    shipped_tok = VATTokenizer.from_file(entry.folder / "tokenizer.json").to_str()
    assert ckpt["vat"]["tokenizer"] == shipped_tok  # no BPE was trained on the new lines
    # the demo model reconstructs its own validation lines: BLEU from the first validation
    assert scalars(run)["val/recon_bleu"][0][0] == 0


def test_a_hub_id_continues_from_the_hub_cache(source, tmp_path, monkeypatch):
    """A repo id goes through huggingface_hub's snapshot_download (offline here: the cache
    holds the repo in the Hub's own layout)."""
    import huggingface_hub

    ckpt, cache, own_nll = source
    hub = tmp_path / "hub"
    snapshot = hub / "models--someone--vat-tiny" / "snapshots" / ("0" * 40)
    export_folder(ckpt, snapshot)
    (hub / "models--someone--vat-tiny" / "refs").mkdir()
    (hub / "models--someone--vat-tiny" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    assert not (ROOT / "someone").exists()  # else the id would be read as a mistyped path
    run = tmp_path / "run"
    code, err = train_captured(
        fit_args(run, cache, "--trainer.max_steps", "2", "--init-from", "someone/vat-tiny")
    )
    assert code == 0, err
    assert _val(run)[0][1] == pytest.approx(own_nll, **SAME)
    record = read_checkpoint(run / "checkpoints" / "last.ckpt")["vat"]["training"]["init_from"]
    assert record["model"] == "someone/vat-tiny" and record["kind"] == "hub"


def test_init_from_is_for_training_only(source, tmp_path):
    ckpt, cache, _ = source
    code, err = train_captured(
        ["validate", "-c", TINY, "--run_dir", str(tmp_path / "v"), "--init-from", str(ckpt)]
    )
    assert code == 2 and len(err) == 1 and "starts a training run" in err[0], err


def test_an_empty_init_from_is_one_line_not_ignored(tmp_path):
    code, err = train_captured(fit_args(tmp_path / "run", None, "--init-from", ""))
    assert code == 2 and len(err) == 1 and "--init-from: is empty" in err[0], err
    assert not (tmp_path / "run").exists()
