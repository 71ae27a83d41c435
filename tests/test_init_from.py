"""`vat train --init-from MODEL` (vat/train/init_from.py): a fresh run that starts from a trained
model, from every form a model argument takes.

The measure of a faithful start: the continued run's first validation (logged at step 0,
before any update) equals the source model's own validation on the same data, which `vat
train validate --ckpt_path SOURCE` computes without --init-from's code path."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT
from helpers import (
    TINY,
    copy_folder,
    export_folder,
    fit_args,
    scalars,
    train_captured,
)
from train_fixtures import one_torch_thread

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
    with one_torch_thread():  # as in the tests (a module fixture runs before conftest's)
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


def _hold_lock(run: Path) -> int:
    """Another process holding RUN/.lock, as a run training there does, until it is killed:
    a fork of this one (helpers.hold_lock's fresh interpreter imports Lightning first, seconds
    of start-up for one flock). Returns its process id."""
    from vat.runs.run_dir import lock_folder

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: take the lock, say so, hold it; never back into pytest
        try:
            os.close(read)
            lock_folder(run, "--run_dir")
            os.write(write, b"locked")
            time.sleep(120)
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 6) == b"locked"
    finally:
        os.close(read)
    return pid


def test_a_run_folder_still_training_is_refused_in_one_line(source, tmp_path):
    """Another process holds the source run's lock: the checkpoint its folder stands for
    changes as it trains, so which weights a start would take depends on the moment. The
    line names the way out: wait, or give the file to start from."""
    import signal

    from vat.share.resolve import run_checkpoint

    ckpt, cache, _ = source
    src = ckpt.parent.parent
    holder = _hold_lock(src)
    try:
        run = tmp_path / "run"
        code, err = train_captured(fit_args(run, cache, "--init-from", str(src)))
    finally:
        os.kill(holder, signal.SIGKILL)
        os.waitpid(holder, 0)
    assert code == 2 and err == [
        f"error: --init-from {src}: that run is training now (pid {holder} holds "
        f"{src / '.lock'}), and the checkpoint its folder stands for changes as it trains; "
        f"wait for it to finish, or give the checkpoint file to start from, such as "
        f"{run_checkpoint(src)}"
    ]
    assert not run.exists()


def test_a_resume_refuses_another_init_from_than_the_one_it_started_from(source, tmp_path):
    """A resume continues its checkpoint: an --init-from naming another model than the one
    the run records starting from was ignored without a word. The model as recorded (any
    spelling of its path), and a checkpoint of the run itself (vat's GPU suite resumes so),
    are the same start."""
    ckpt, cache, _ = source
    run = tmp_path / "run"
    code, err = train_captured(
        fit_args(run, cache, "--trainer.max_steps", "2", "--init-from", str(ckpt))
    )
    assert code == 0, err
    last = run / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    resume = fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps")
    code, err = train_captured([*resume, "3", "--init-from", "demo-wordnet-d64"])
    assert code == 2 and err == [
        f"error: --init-from demo-wordnet-d64: this run started from src/checkpoints/last.ckpt, "
        f"as {last} records, and a resume continues that checkpoint; give that model (or no "
        f"--init-from) to resume, or a fresh --run_dir to start from demo-wordnet-d64"
    ], err
    assert last.read_bytes() == before
    for steps, same in (("3", os.path.relpath(ckpt)), ("4", str(last))):
        code, err = train_captured([*resume, steps, "--init-from", same])
        assert code == 0, err


def test_a_resume_of_a_run_not_started_from_a_model_refuses_init_from(source, tmp_path):
    ckpt, cache, _ = source
    run = tmp_path / "src"
    shutil.copytree(ckpt.parent.parent, run)
    last = run / "checkpoints" / "last.ckpt"
    code, err = train_captured(
        fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps", "5")
        + ["--init-from", str(ckpt)]
    )
    assert code == 2 and err == [
        f"error: --init-from {ckpt}: this run started from nothing, as {last} records, and a "
        f"resume continues that checkpoint; give no --init-from to resume, or a fresh "
        f"--run_dir to start from {ckpt}"
    ], err


@pytest.fixture(scope="module")
def exported(source, tmp_path_factory) -> Path:
    """The source exported as a folder (config.json records its training)."""
    return export_folder(source[0], tmp_path_factory.mktemp("exported") / "model")


@pytest.mark.parametrize(
    "key, value",
    [
        ("global_step", "x"),
        ("tokens_seen", float("inf")),  # JSON's Infinity
        ("tokens_seen", [1]),
        ("tokens_seen", "nan"),
        ("tokens_seen", -5),
        ("tokens_total", 2.5),
        ("tokens_total", True),
    ],
)
def test_a_recorded_count_that_is_no_count_is_one_line(source, exported, tmp_path, key, value):
    """A ValueError, OverflowError or TypeError from int(), or "-5 tokens" said: refused where
    --init-from reads it, naming the file and the key, on the command line and in Python."""
    from vat.errors import VatError
    from vat.share.resolve import load_model
    from vat.train.init_from import from_loaded

    folder = copy_folder(exported, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["training"][key] = value
    (folder / "config.json").write_text(json.dumps(config))
    line = (
        f"--init-from {folder}: training.{key} in {folder / 'config.json'} is {value!r}, "
        f"not a count (a whole number >= 0)"
    )
    run = tmp_path / "run"
    code, err = train_captured(fit_args(run, source[1], "--init-from", str(folder)))
    assert code == 2 and err == [f"error: {line}"] and not run.exists()
    with pytest.raises(VatError) as e:
        from_loaded(load_model(folder), str(folder))
    assert str(e.value) == line


def test_a_checkpoints_count_is_checked_as_its_folders_are(source, tmp_path):
    from vat.errors import VatError
    from vat.share.resolve import load_model
    from vat.train.init_from import from_loaded

    ckpt = torch.load(source[0], weights_only=True)
    ckpt["vat"]["training"]["tokens_seen"] = -5
    torch.save(ckpt, tmp_path / "bad.ckpt")
    with pytest.raises(VatError, match=r"vat\.training\.tokens_seen in .*bad\.ckpt is -5, not a"):
        from_loaded(load_model(tmp_path / "bad.ckpt"), "bad.ckpt")


def test_large_token_counts_read_as_people_read_them(exported):
    """A whole number of tokens, however large (1e308 said "1e+302M"), in the start's line."""
    from vat.share.resolve import load_model
    from vat.train.init_from import count, from_loaded, start_line

    said = [count(n) for n in (0, 323, 1_650_000, 238_400_000, 999_999_999, 12_500_000_000)]
    assert said == ["0", "323", "1.65M", "238.4M", "1B", "12.5B"]
    assert count(int(3.2e12)) == "3.2T" and count(int(1e308)) == "1.00e+308"
    loaded = load_model(exported)
    loaded.training.update(tokens_seen=1e308, tokens_total=None)  # JSON's 1e308: a float
    line = start_line(from_loaded(loaded, "m"))
    assert ", 1.00e+308 tokens behind it);" in line


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
