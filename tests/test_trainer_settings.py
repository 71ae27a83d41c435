"""Trainer settings that Lightning checks only once training has started (or never) are
refused before anything is written, in vat's option names; a start that fails before its first
step is not a run; Lightning's own files are never written through a link; folder arguments
either work or are one line, and a refused start leaves no folder behind.

The tiny data: 16 sentences, a quarter held out, batches of 4: 3 training batches and 1
validation batch an epoch."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import ASSETS
from helpers import fit_args, train_main
from train_fixtures import train_once

from vat.runs.run_dir import MANIFEST_NAME
from vat.share.checkpoint import read_checkpoint

SENTENCES = str(ASSETS / "sentences.txt")


def _step(path) -> int:
    return int(read_checkpoint(path)["global_step"])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("settings_cache")


@pytest.fixture(scope="module")
def one_step(tmp_path_factory, cache):
    """A finished 1-step run without validation (tests work on copies)."""
    run = tmp_path_factory.mktemp("settings") / "run"
    args = fit_args(run, cache, "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0")
    code, err = train_once(args)
    assert code == 0, err
    return run, err


@pytest.mark.parametrize(
    "extra, message",
    [
        # ZeroDivisionError at the first batch
        (["--trainer.val_check_interval", "0"], "--trainer.val_check_interval 0: must be"),
        (["--trainer.check_val_every_n_epoch", "0"], "--trainer.check_val_every_n_epoch 0:"),
        (["--trainer.accumulate_grad_batches", "0"], "--trainer.accumulate_grad_batches 0:"),
        # accepted without a word: validation at every batch, or every epoch, or no step
        (["--trainer.val_check_interval", "0.0"], "--trainer.val_check_interval 0.0: must be"),
        (["--trainer.check_val_every_n_epoch", "-1"], "--trainer.check_val_every_n_epoch -1:"),
        (["--trainer.limit_train_batches", "0"], "--trainer.limit_train_batches 0 trains nothing"),
        (["--trainer.max_steps", "0"], "--trainer.max_steps 0 trains nothing"),
        # refused by Lightning itself, in one line, when the Trainer is built
        (["--trainer.limit_val_batches", "2.5"], "You have passed invalid value 2.5 for limit_val"),
    ],
)
def test_settings_wrong_whatever_the_data_are_one_line_before_any_file(
    tmp_path, cache, extra, message, capsys
):
    run = tmp_path / "run"
    code, err = train_main(fit_args(run, cache, *extra), capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {message}"), err
    assert not run.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        # Lightning: ValueError with a traceback, after config.yaml, events and hparams.yaml
        (
            ["--trainer.val_check_interval", "5"],
            "--trainer.val_check_interval 5 is longer than an epoch (3 training batches): "
            "give at most 3, or add --trainer.check_val_every_n_epoch null",
        ),
        (
            ["--trainer.limit_train_batches", "1", "--trainer.val_check_interval", "2"],
            "--trainer.val_check_interval 2 is longer than an epoch (1 training batch)",
        ),
        (
            ["--trainer.limit_train_batches", "0.1"],
            "--trainer.limit_train_batches 0.1 keeps less than one of the 3 training batches "
            "of an epoch: give at least 0.3333",
        ),
        (
            ["--trainer.limit_val_batches", "0.5"],
            "--trainer.limit_val_batches 0.5 keeps less than one of the 1 validation batch",
        ),
        # Lightning: each optimiser step silently averaged 3 batches, not 5
        (
            ["--trainer.accumulate_grad_batches", "5"],
            "--trainer.accumulate_grad_batches 5 is more than the 3 training batches",
        ),
    ],
)
def test_settings_that_do_not_fit_the_data_are_one_line_before_any_file(
    tmp_path, cache, extra, message, capsys
):
    run = tmp_path / "run"
    code, err = train_main(fit_args(run, cache, *extra), capsys)
    assert code == 2 and err[-1].startswith(f"error: {message}"), err
    assert not [line for line in err if "Traceback" in line]
    assert not run.exists()


def test_a_refused_overwrite_leaves_the_old_run_whole(one_step, tmp_path, cache, capsys):
    run = tmp_path / "run"
    shutil.copytree(one_step[0], run)
    before = sorted(p.name for p in run.rglob("*"))
    extra = ["--overwrite", "--trainer.val_check_interval", "5"]
    code, err = train_main(fit_args(run, cache, *extra), capsys)
    assert code == 2 and "--trainer.val_check_interval 5" in err[-1], err
    assert sorted(p.name for p in run.rglob("*")) == before
    assert _step(run / "checkpoints" / "last.ckpt") == 1


def test_no_validation_keeps_no_best_checkpoint_and_says_so(one_step):
    run, err = one_step
    assert (
        "vat: --trainer.limit_val_batches 0 turns validation off: no best checkpoint on "
        "val/loss is kept" in err
    )
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["last.ckpt"]


def test_a_start_that_failed_before_its_first_step_is_not_a_run(tmp_path, cache, capsys):
    """Checkpoints written straight into the run folder (--checkpoint.dirpath = --run_dir):
    an --overwrite whose first step is NaN has moved the old last.ckpt away (no mix of two
    runs), and the rerun starts without --overwrite."""
    run = tmp_path / "run"
    base = fit_args(run, cache, "--checkpoint.dirpath", str(run), "--trainer.max_steps", "1")
    code, err = train_main(base, capsys)
    assert code == 0 and _step(run / "last.ckpt") == 1, err
    nan = ["--trainer.callbacks+=crash_callbacks.PoisonAtStep", "--trainer.callbacks.step=0"]
    code, err = train_main([*base, "--overwrite", *nan], capsys)
    assert code == 2 and err[-1].startswith("error: non-finite loss at step 0"), err
    assert err[-1].endswith("last good checkpoint: none saved yet")  # not a file that is not
    assert not (run / "last.ckpt").exists()
    assert (run / "config.yaml").is_file()  # the failed start's
    code, err = train_main(base, capsys)
    assert code == 0, err
    assert any("vat: replacing a start that failed before its step 1 (" in e for e in err)
    assert _step(run / "last.ckpt") == 1
    code, err = train_main(base, capsys)  # a start that trained is a run
    assert code == 2 and "already holds a run" in err[-1]


def test_lightning_never_writes_through_a_link_in_the_run(one_step, tmp_path, cache, capsys):
    """Lightning's logger wrote hparams.yaml through a dangling link (creating its target),
    and `vat train validate` wrote config-validate.yaml through a link."""
    run = tmp_path / "run"
    shutil.copytree(one_step[0], run)
    target = tmp_path / "elsewhere.yaml"
    (run / "hparams.yaml").unlink()
    os.symlink(target, run / "hparams.yaml")
    args = fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps", "2")
    code, err = train_main(args, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: --run_dir {run}: hparams.yaml is a symbolic link")
    assert not target.exists() and _step(run / "checkpoints" / "last.ckpt") == 1
    (run / "hparams.yaml").unlink()
    os.symlink(target, run / "config-validate.yaml")
    validate = ["validate", *fit_args(run, cache)[1:], "--ckpt_path", "last"]
    code, err = train_main(validate, capsys)
    assert code == 2 and "config-validate.yaml is a symbolic link" in err[-1], err
    assert not target.exists()


def test_a_deeply_nested_manifest_is_one_line(tmp_path, cache, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / MANIFEST_NAME).write_text("[" * 100_000 + "]" * 100_000)
    code, err = train_main(fit_args(run, cache), capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {run / MANIFEST_NAME} is damaged (not the small JSON")


def test_folder_arguments(one_step, tmp_path, cache, monkeypatch, capsys):
    """`.`, `..` and the absolute path name one folder; a folder inside another run's
    checkpoints (or that folder itself) is one line and leaves nothing behind."""
    other = tmp_path / "other"
    shutil.copytree(one_step[0], other)
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    data = ["--data.train_files", f"[{SENTENCES}]", "--trainer.max_steps", "1"]
    monkeypatch.chdir(work)
    code, err = train_main(fit_args(".", cache, *data), capsys)
    assert code == 0 and (work / "checkpoints" / "last.ckpt").is_file(), err
    monkeypatch.chdir(work / "sub")
    for same in ("..", str(work)):
        code, err = train_main(fit_args(same, cache, *data), capsys)
        assert code == 2 and err[-1].startswith(f"error: --run_dir {same} already holds a run")
    inside = other / "checkpoints" / "mine"
    for option, folder in [
        ("--run_dir", inside),
        ("--run_dir", other / "checkpoints"),
        ("--checkpoint.dirpath", inside),
    ]:
        if option == "--run_dir":
            args = fit_args(folder, cache, *data)
        else:
            args = fit_args(tmp_path / "new", cache, *data, option, str(folder))
        code, err = train_main(args, capsys)
        assert code == 2 and len(err) == 1, err
        assert err[0].startswith(f"error: {option} {folder} ") and f"run in {other}" in err[0]
    assert sorted(p.name for p in (other / "checkpoints").iterdir()) == ["last.ckpt"]
    assert not (tmp_path / "new").exists()
    code, err = train_main(fit_args("", cache), capsys)
    assert code == 2 and err[-1].startswith("error: --run_dir is empty: name a folder")
