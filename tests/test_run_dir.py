"""Run directories: no silent resume, --overwrite, what a resume may change, one run per
directory, temp files of killed writes, faults as one line, the best-checkpoint monitor."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import time
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT
from helpers import (
    fit_args,
    hold_lock,
    made_once,
    run_python,
    scalars,
    train_env,
    train_main,
    train_subprocess,
)

from vat.share.checkpoint import read_checkpoint

pytest_plugins = ["compile_fixtures"]  # compiled_resume


def _step(path) -> int:
    return int(read_checkpoint(path)["global_step"])


def _train(base: Path) -> None:
    env = train_env()
    env.pop("PYTHONWARNINGS", None)
    r = run_python(["-m", "vat", "train", *fit_args(base / "run", base / "cache")], env)
    assert r.returncode == 0, r.stderr[-3000:]
    (base / "stderr.txt").write_text(r.stderr)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A fresh 2-step run, trained in a subprocess with warnings on, once per session (the
    workers share it: a worker that steals this module's tests sets the fixture up again);
    tests work on copies of the run, and each module instance on its own copy of the data
    cache, which the tests' runs write into."""
    base = made_once(tmp_path_factory, "run_dir_trained", _train)
    cache = shutil.copytree(base / "cache", tmp_path_factory.mktemp("rundir") / "cache")
    return base / "run", cache, (base / "stderr.txt").read_text()


@pytest.fixture
def run_copy(trained, tmp_path):
    run, cache, _ = trained
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst, cache


def test_fresh_run_has_no_contradictory_ckpt_path_warnings(trained):
    _, _, stderr = trained
    assert "ckpt_path" not in stderr and "last checkpoint" not in stderr


def test_second_fresh_run_stops_and_overwrite_replaces_the_old_run(run_copy, capsys):
    run, cache = run_copy
    before = (run / "checkpoints" / "last.ckpt").read_bytes()
    old_events = sorted(p.name for p in run.glob("events.out.tfevents.*"))
    (run / "notes.txt").write_text("mine")  # not a run file: --overwrite leaves it

    code, err = train_main(fit_args(run, cache, "--trainer.max_steps", "4"), capsys)
    assert code == 2 and len(err) == 1
    assert (
        err[0].startswith(f"error: --run_dir {run} already holds a run") and "--overwrite" in err[0]
    )
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == before  # untouched, not resumed

    code, err = train_main(fit_args(run, cache, "--trainer.max_steps", "1", "--overwrite"), capsys)
    assert code == 0, err
    assert (
        _step(run / "checkpoints" / "last.ckpt") == 1
    )  # trained from scratch: a resume would refuse max_steps 1
    new_events = sorted(p.name for p in run.glob("events.out.tfevents.*"))
    assert len(new_events) == 1 and not set(new_events) & set(old_events)
    assert [s for s, _ in scalars(run)["train/loss"]] == [0]  # no curve of the old run left
    assert (run / "notes.txt").read_text() == "mine"


def test_the_runs_own_records_are_its_files(run_copy):
    """--overwrite deletes what the earlier run wrote, its time split too: a new fit stopped
    before its end must not leave the old run's split beside its own checkpoints."""
    from vat.runs.run_dir import run_files

    run, _ = run_copy
    assert (run / "time_split.json").is_file()
    (run / "compile_cache.bin").write_bytes(b"x")  # as a compiled run leaves it
    ours, foreign = run_files(run, {"--run_dir": run})
    assert {"time_split.json", "compile_cache.bin", "checkpoints"} <= {p.name for p in ours}
    assert foreign == []


def test_overwrite_cannot_be_combined_with_a_resume(run_copy, capsys):
    run, cache = run_copy
    code, err = train_main(fit_args(run, cache, "--overwrite", "--ckpt_path", "last"), capsys)
    assert code == 2 and "--overwrite" in err[-1] and "--ckpt_path" in err[-1]


def test_resume_refuses_model_and_data_changes_and_lower_max_steps(run_copy, capsys):
    run, cache = run_copy
    before = (run / "checkpoints" / "last.ckpt").read_bytes()
    for extra, option in [
        (["--model.optim.lr", "0.05"], "--model.optim.lr"),
        (["--model.loss.kl_schedule.warmup_steps", "7"], "--model.loss.kl_schedule.warmup_steps"),
        (["--data.batch_size", "2"], "--data.batch_size"),
        (["--trainer.max_steps", "1"], "--trainer.max_steps 1"),
    ]:
        code, err = train_main(fit_args(run, cache, "--ckpt_path", "last", *extra), capsys)
        assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {option}"), (extra, err)
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == before
    assert not list(run.glob("config-resume-*.yaml"))


def test_resume_refuses_max_epochs_below_the_checkpoints_epoch(run_copy, capsys):
    run, cache = run_copy  # tiny: 12 training sentences in batches of 4, 3 steps an epoch
    last = run / "checkpoints" / "last.ckpt"
    more = ["--ckpt_path", "last", "--data.num_workers", "0"]
    code, err = train_main(fit_args(run, cache, *more, "--trainer.max_steps", "7"), capsys)
    assert code == 0, err
    assert _step(last) == 7 and int(read_checkpoint(last)["epoch"]) == 2  # the third epoch
    before = last.read_bytes()
    unbounded = ["--trainer.max_steps", "-1", "--trainer.max_epochs"]
    code, err = train_main(fit_args(run, cache, *more, *unbounded, "1"), capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: --trainer.max_epochs 1 is below the epoch of {last} (2,")
    assert last.read_bytes() == before and len(list(run.glob("config-resume-*.yaml"))) == 1
    code, err = train_main(fit_args(run, cache, *more, *unbounded, "3"), capsys)
    assert code == 0, err
    assert _step(last) == 9  # the third epoch finished, and no further


def test_resume_records_each_start_without_destroying_the_first(run_copy, capsys):
    run, cache = run_copy
    first = (run / "config.yaml").read_text()
    for n, steps in [(1, 3), (2, 4)]:
        code, err = train_main(
            fit_args(
                run,
                cache,
                "--ckpt_path",
                "last",
                "--trainer.max_steps",
                str(steps),
                "--checkpoint.every_n_train_steps",
                "2",
                "--data.num_workers",
                "0",
            ),
            capsys,
        )
        assert code == 0, err
        cfg = yaml.safe_load((run / f"config-resume-{n}.yaml").read_text())
        assert (
            cfg["trainer"]["max_steps"] == steps and cfg["checkpoint"]["every_n_train_steps"] == 2
        )
        assert cfg["ckpt_path"] == str(run / "checkpoints" / "last.ckpt")  # "last", resolved
        assert cfg["model"]["optim"]["lr"] == 0.001  # what the optimiser ran with
    assert (run / "config.yaml").read_text() == first
    assert _step(run / "checkpoints" / "last.ckpt") == 4


def test_copied_run_dir_overwrites_last_ckpt(run_copy, capsys):
    """Lightning's version counter wrote last-v1.ckpt beside the copied last.ckpt, while
    evaluate and the sweep read last.ckpt."""
    run, cache = run_copy
    code, err = train_main(
        fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps", "3"), capsys
    )
    assert code == 0, err
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert not [n for n in names if "-v1" in n], names
    assert _step(run / "checkpoints" / "last.ckpt") == 3


def test_ckpt_path_last_in_an_empty_run_dir_starts_fresh(tmp_path, trained, capsys):
    _, cache, _ = trained
    code, err = train_main(
        fit_args(tmp_path / "new", cache, "--ckpt_path", "last", "--trainer.max_steps", "1"),
        capsys,
    )
    assert code == 0 and any("no checkpoint" in line for line in err)
    assert _step(tmp_path / "new" / "checkpoints" / "last.ckpt") == 1


def test_second_run_in_a_locked_run_dir_fails_and_a_dead_holder_does_not_block(
    tmp_path, trained, capsys
):
    _, cache, _ = trained
    run = tmp_path / "run"
    run.mkdir()
    holder = hold_lock(run)
    try:
        code, err = train_main(fit_args(run, cache, "--trainer.max_steps", "1"), capsys)
        assert code == 2 and len(err) == 1
        assert err[0] == (
            f"error: --run_dir {run} is in use by another run (pid {holder.pid}); "
            f"wait for it to finish or choose another --run_dir"
        )
        assert not (run / "checkpoints").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    code, err = train_main(
        fit_args(run, cache, "--trainer.max_steps", "1"), capsys
    )  # the kernel dropped the lock
    assert code == 0, err


def test_temp_files_of_killed_writes_are_removed_at_start(run_copy, capsys):
    run, cache = run_copy
    ckpts = run / "checkpoints"
    stale = [
        ckpts / ".last.ckpt.tmp-4000000@otherhost-a1b2c3d4",
        ckpts / ".last.ckpt.tmp-k3j4h5g6",
        run / ".config.yaml.tmp-4000000@otherhost-zzzzzzzz",
    ]
    for p in stale:
        p.write_bytes(b"half a checkpoint")
    code, err = train_main(
        fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps", "3"), capsys
    )
    assert code == 0, err
    assert not [p for p in stale if p.exists()]


def test_full_disk_while_saving_a_checkpoint_is_one_line(tmp_path, trained, monkeypatch, capsys):
    _, cache, _ = trained
    run = tmp_path / "run"
    real_save = torch.save

    def full_disk_save(obj, f, *args, **kwargs):
        if isinstance(obj, dict) and "state_dict" in obj:
            f.write(b"PK partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk_save)
    code, err = train_main(fit_args(run, cache, "--trainer.max_steps", "2"), capsys)
    assert code == 2 and err[-1].startswith(f"error: cannot write {run / 'checkpoints'}")
    assert "no space left on device" in err[-1]
    # no traceback of the failure (in-process runs may add unrelated "Logging error" noise)
    assert not [line for line in err[:-1] if "space left" in line or "unexpected pos" in line], err
    assert not [p.name for p in (run / "checkpoints").iterdir()]  # no temp, no partial checkpoint


@pytest.mark.slow
def test_sigint_while_writing_a_checkpoint(run_copy):
    """A KeyboardInterrupt inside the write of step 3's checkpoint (a second Ctrl-C): last.ckpt
    stays whole at step 2, and nothing half-done is offered as a resume point."""
    run, cache = run_copy
    before = (run / "checkpoints" / "last.ckpt").read_bytes()
    r = train_subprocess(
        [
            *fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps", "5"),
            "--trainer.callbacks+=crash_callbacks.InterruptDuringSave",
            "--trainer.callbacks.step=3",
        ]
    )
    assert r.returncode == 130, r.stderr[-3000:]
    assert (
        r.stderr.strip().splitlines()[-1].startswith("error: interrupted")
        and "Traceback" not in r.stderr
    )
    last = run / "checkpoints" / "last.ckpt"
    assert (
        last.read_bytes() == before and _step(last) == 2
    )  # the interrupted save of step 3 left it whole
    assert not (run / "checkpoints" / "on_exception.ckpt").exists()
    assert not [p.name for p in (run / "checkpoints").iterdir() if ".tmp-" in p.name]


@pytest.mark.slow
def test_first_ctrl_c_during_a_checkpoint_write_lets_it_finish(run_copy):
    """The first Ctrl-C while step 3's checkpoint is written (the checkpoint callbacks run
    after the others, so the step's stop decision has passed): the write finishes, training
    stops after the next step, and last.ckpt holds step 4."""
    run, cache = run_copy
    r = train_subprocess(
        [
            *fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps", "5"),
            "--trainer.callbacks+=crash_callbacks.InterruptDuringSave",
            "--trainer.callbacks.step=3",
            "--trainer.callbacks.hard=false",
        ]
    )
    assert r.returncode == 130, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1].startswith("vat: stopped by Ctrl-C after step 4;")
    assert _step(run / "checkpoints" / "last.ckpt") == 4
    assert not [p.name for p in (run / "checkpoints").iterdir() if ".tmp-" in p.name]


def test_garbage_tokenizer_json_is_one_line(tmp_path, trained, capsys):
    _, cache, _ = trained
    bad = tmp_path / "tok.json"
    bad.write_text('{"version": "1.0", "model": 42')
    code, err = train_main(
        fit_args(tmp_path / "run", cache, "--data.tokenizer_path", str(bad)), capsys
    )
    assert code == 2 and err[-1].startswith("error: tokenizer file") and str(bad) in err[-1]
    assert "not a valid tokenizers JSON" in err[-1]


@pytest.mark.parametrize("monitor", ["val/nll", "val/stsb_spearman"])
def test_best_checkpoint_monitor(tmp_path, trained, monitor, capsys):
    _, cache, _ = trained
    run = tmp_path / "run"
    extra = [
        "--trainer.max_steps",
        "6",
        "--trainer.val_check_interval",
        "1",
        "--trainer.check_val_every_n_epoch",
        "null",
        "--best_monitor",
        monitor,
    ]
    if monitor == "val/stsb_spearman":
        code, err = train_main(fit_args(run, cache, *extra), capsys)
        assert code == 2 and "vat.callbacks.sts.STSBSpearman" in err[-1]
        assert not run.exists()  # a refused start leaves no folder behind
        extra += [
            "--trainer.callbacks+=crash_callbacks.ScriptedSTSBSpearman",
            "--trainer.callbacks.values=[0.1,0.3,0.7,0.2,0.6,0.5]",
        ]
    code, err = train_main(fit_args(run, cache, *extra), capsys)
    assert code == 0, err
    values = scalars(run)[monitor]
    best_step = (max if monitor == "val/stsb_spearman" else min)(values, key=lambda sv: sv[1])[
        0
    ] + 1
    if monitor == "val/stsb_spearman":
        assert best_step == 3  # the scripted maximum, 0.7 at the third validation
    assert [p.name for p in (run / "checkpoints").glob("best-*.ckpt")] == [
        f"best-step{best_step:07d}.ckpt"
    ]


def test_stale_lock_file_from_an_old_pid_does_not_block(tmp_path, trained, capsys):
    _, cache, _ = trained
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_text("4000000\n")  # a run that died: its flock died with it
    t0 = time.time()
    code, err = train_main(fit_args(run, cache, "--trainer.max_steps", "1"), capsys)
    assert code == 0 and time.time() - t0 < 120, err
    assert (run / ".lock").read_text() == f"{os.getpid()}\n"  # the old pid replaced, not added to


def test_hints_name_the_run_folder_as_given_when_checkpoints_is_a_link(
    tmp_path, trained, monkeypatch, capsys
):
    """RUN/checkpoints may be a link to a bigger disk: the `next:` hints still name RUN as the
    user gave it, not the folder above the link's target."""
    from vat.cli.train import main

    _, cache, _ = trained
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store" / "ckpts").mkdir(parents=True)
    Path("run").mkdir()
    os.symlink(Path("..") / "store" / "ckpts", Path("run") / "checkpoints")
    sentences = ROOT / "tests" / "assets" / "sentences.txt"
    # without validation there is no best checkpoint: the hints come from last.ckpt
    args = fit_args(Path("run"), cache, "--data.train_files", f"[{sentences}]")
    code = main([*args, "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    hints = out[out.index("next:") + 1 :]
    assert len(hints) == 3 and all("run" in h.split() and "store" not in h for h in hints), out
    assert "vat: last checkpoint run/checkpoints/last.ckpt" in out  # the summary's line too
    assert _step(tmp_path / "store" / "ckpts" / "last.ckpt") == 1

    # resumed under another spelling of the same folder: the run's record is its own, and
    # the checkpoint just written is kept
    args[args.index("run")] = str(tmp_path / "run")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        code = main([*args, "--ckpt_path", "last", "--trainer.limit_val_batches", "0"])
    assert code == 0, capsys.readouterr().err
    assert not [w for w in seen if "dirpath has changed" in str(w.message)]
    assert _step(tmp_path / "store" / "ckpts" / "last.ckpt") == 2


# -- what a resume may change: the command's value is the one used ----------------------------
def _value(model: dict, data: dict, key: str):
    """model.x.y of `model`, data.x of `data` (a checkpoint's or a config's sections)."""
    section, *path = key.split(".")
    value = model if section == "model" else data
    for part in path:
        value = value[part]
    return value


# key: (its value on the command line, what the resumed process used of it, and that use
# when it is not the value itself); the keys of vat.runs.run_dir.RESUME_MAY_CHANGE, but
# model.compile (the next tests: one direction compiles)
_USED = {
    "model.loss.fused_cross_entropy": ("true", lambda s: s.fused_calls > 0, None),
    "data.num_workers": ("1", lambda s: s.trainer.train_dataloader.num_workers, None),
    "data.num_proc": ("2", lambda s: s.cache_settings.num_proc, None),
    "data.progress": ("false", lambda s: s.cache_settings.progress, None),
    "data.cache_dir": ("{tmp}/new", lambda s: str(s.cache_path.parent), None),
    "data.test_files": ("[{tmp}/test.txt]", lambda s: len(s.data.splits["test"]), 3),
}


@pytest.fixture
def resumed(run_copy, tmp_path, monkeypatch, capsys):
    """resume(key, value, *extra): `--ckpt_path last --KEY VALUE` into a copy of the run whose
    checkpoint records another value of KEY, a fresh cache folder for the data keys (so the
    tokenizing runs); returns what the resumed process used and its config-resume-1.yaml."""
    from types import SimpleNamespace

    from vat.cli import train as cli
    from vat.data import datamodule, token_cache
    from vat.train import objective

    run, cache = run_copy
    seen = SimpleNamespace(fused_calls=0, cache_settings=None, cache_path=None)
    begin, fused = cli.begin, objective.fused_linear_cross_entropy
    write_cache, encode = datamodule.write_token_cache, token_cache.encode_chunks

    def capture(run_cli, start):
        seen.model, seen.data, seen.trainer = run_cli.model, run_cli.datamodule, run_cli.trainer
        begin(run_cli, start)

    def counted(*args, **kwargs):
        seen.fused_calls += 1
        return fused(*args, **kwargs)

    def recorded(path, tok, train_val, others, **kwargs):
        seen.cache_path, seen.cache_settings = path, SimpleNamespace(**kwargs)
        return write_cache(path, tok, train_val, others, **kwargs)

    monkeypatch.setattr(cli, "begin", capture)
    monkeypatch.setattr(objective, "fused_linear_cross_entropy", counted)
    monkeypatch.setattr(datamodule, "write_token_cache", recorded)
    # a pool of spawned interpreters tokenizes the same: what it was asked for is recorded
    monkeypatch.setattr(token_cache, "encode_chunks", lambda c, t, n: encode(c, t, 1))

    def resume(key: str, value: str, *extra: str):
        value = value.format(tmp=tmp_path)
        last = run / "checkpoints" / "last.ckpt"
        ckpt = torch.load(last, weights_only=True)
        want = yaml.safe_load(value)
        if key.startswith("model."):  # the checkpoint records the other value
            *path, name = key.split(".")[1:]
            d = ckpt["hyper_parameters"]
            for part in path:
                d = d[part]
            d[name] = not want
            torch.save(ckpt, last)
        assert _value(ckpt["hyper_parameters"], ckpt["datamodule_hyper_parameters"], key) != want
        (tmp_path / "test.txt").write_text("one test line\nand a second\nand a third\n")
        args = ["--ckpt_path", "last", "--trainer.max_steps", "3", f"--{key}", value, *extra]
        if key.startswith("data."):
            args = ["--data.cache_dir", str(tmp_path / "fresh"), *args]
        code, err = train_main(fit_args(run, cache, *args), capsys)
        assert code == 0, err
        config = yaml.safe_load((run / "config-resume-1.yaml").read_text())
        return seen, _value(config["model"], config["data"], key), want

    return resume


@pytest.mark.parametrize("key", sorted(_USED))
def test_a_resume_uses_the_commands_value_of_each_key_it_may_change(resumed, key):
    value, used, use = _USED[key]
    seen, written, want = resumed(key, value)
    assert used(seen) == (want if use is None else use) and written == want


def test_the_keys_a_resume_may_change_are_each_tested():
    from vat.runs.run_dir import RESUME_MAY_CHANGE

    assert set(_USED) | {"model.compile"} == RESUME_MAY_CHANGE


def test_a_compiled_run_resumed_with_compile_false_runs_eagerly(resumed):
    seen, written, _ = resumed("model.compile", "false")
    assert seen.model.compile is False and seen.model._compiled is None and written is False


def test_a_run_resumed_with_compile_true_compiles(compiled_resume):
    """compiled_resume: an eager run resumed with --model.compile true (aot_eager: vat's
    compiled step without inductor's C++ build), a dynamo reset before it, so that it
    compiles its own graphs."""
    run, model = compiled_resume.run, compiled_resume.model
    first = yaml.safe_load((run / "config.yaml").read_text())
    assert first["model"]["compile"] is False  # what its checkpoint recorded
    assert model.compile is True and model._compiled is not None and model._compiled.graphs >= 1
    config = yaml.safe_load((run / "config-resume-1.yaml").read_text())
    assert config["model"]["compile"] is True
