"""Where a fit's wall time goes (vat.callbacks.time_split): the ledger in closed form, the
process's start read from the kernel, and real fits, fresh, resumed and compiled, whose
parts add up to the fit's wall time."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
import torch
from helpers import fit_args, scalars, train_main

from vat.callbacks import time_split
from vat.callbacks.time_split import (
    PARTS,
    Ledger,
    compile_seconds,
    process_seconds,
    read_split,
    split_line,
)

pytest_plugins = ["compile_fixtures"]  # compiled_resume

SPLIT_KEYS = [f"{p}_s" for p in PARTS]
# "vat: first optimizer step (step 1) 25.8 s after the command started: set-up 0.3 s,
# compile 25.2 s, training steps 0.2 s"
FIRST_STEP_LINE = re.compile(
    r"vat: first optimizer step \(step \d+\) (?P<seconds>[\d.]+) s after .*?"
    r"compile (?P<compile>[\d.]+) s"
)


def test_the_ledger_charges_each_interval_once_and_moves_compile_out():
    """Set-up 0-10 s (a 2-s validation inside, a 1-s save inside that), training 10-30 s with
    4 s of compile in it, a save 30-31 s, then the end 31-33 s."""
    ledger = Ledger(origin=0.0, compiled=5.0)  # 5 s compiled before this fit: not ours
    ledger.enter("validation", 6.0, 5.0)
    ledger.enter("checkpoint", 7.0, 5.0)
    ledger.leave("checkpoint", 8.0, 5.0)
    ledger.leave("validation", 8.0, 5.0)
    ledger.become("training", 10.0, 5.0)
    ledger.enter("checkpoint", 30.0, 9.0)  # dynamo counted 4 s meanwhile
    ledger.leave("checkpoint", 31.0, 9.0)
    ledger.become("other", 31.0, 9.0)
    ledger.charge(33.0, 9.0)
    assert ledger.seconds == {
        "setup": 8.0,
        "compile": 4.0,
        "training": 16.0,
        "validation": 1.0,
        "checkpoint": 2.0,
        "other": 2.0,
    }
    assert ledger.total() == 33.0
    # torch._dynamo.reset() zeroes dynamo's count: what it counted since is this fit's
    ledger.become("training", 40.0, 0.5)
    assert ledger.seconds["compile"] == 4.5 and ledger.seconds["other"] == 8.5
    assert ledger.total() == 40.0


def test_process_seconds_reads_the_start_of_the_process_from_the_kernel(tmp_path):
    """/proc/PID/stat's start (clock ticks since boot) against CLOCK_BOOTTIME: the seconds
    since the process began, interpreter start-up included."""
    started = time.monotonic()
    child = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(1.0)
        seconds = process_seconds(f"/proc/{child.pid}/stat")
        assert seconds is not None
        assert seconds == pytest.approx(time.monotonic() - started, abs=0.1)
    finally:
        child.kill()
        child.wait()
    here = process_seconds()
    assert here is not None and here > 1.0  # this test process began before the test
    assert process_seconds(str(tmp_path / "missing")) is None


def _outside(wall: float) -> float:
    """Most seconds of a `vat train` process's wall time outside its split (the interpreter's
    exit): 1-3 s on 2 quiet cores, up to a sixth of a short run's wall time on busy ones."""
    return max(4.0, wall / 5)


class _Clocked(time_split.TimeSplit):
    """vat train's TimeSplit, noting when its clock started (a command's, in-process)."""

    made: list[float] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.made.append(time.perf_counter())


def _wall_fit(args: list[str], capsys, caplog, monkeypatch) -> tuple[float, float, list[str]]:
    """`vat train ARGS` in-process: its wall seconds, those since its clock started, and the
    `vat:` lines logged."""
    import vat.cli.train

    monkeypatch.setattr(vat.cli.train, "TimeSplit", _Clocked)
    caplog.clear()
    with caplog.at_level("INFO"):
        t0 = time.perf_counter()
        code, err = train_main(args, capsys)
        t1 = time.perf_counter()
    assert code == 0, err
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vat: ")]
    return t1 - t0, t1 - _Clocked.made[-1], lines


def test_a_fit_and_its_resume_each_split_their_wall_time(tmp_path, capsys, caplog, monkeypatch):
    """The parts add up to the fit's wall time, the JSON, the lines and TensorBoard agree,
    and a resume splits its own time, from its own first step. In-process (as here, or a
    sweep's later runs) the clock starts when the command has read its arguments (which
    LightningCLI takes 1-2 s to do on this machine, more on busy cores); it ends with the
    fit, a few milliseconds before the command returns."""
    monkeypatch.setattr(time_split, "_clock_started", ["process start"])  # not the first fit
    run, cache = tmp_path / "run", tmp_path / "cache"
    extra = ["--trainer.max_steps", "4", "--checkpoint.every_n_train_steps", "2"]
    wall, clocked, lines = _wall_fit(fit_args(run, cache, *extra), capsys, caplog, monkeypatch)
    split = read_split(run)
    assert split is not None and split["clock_from"] == "command start"
    assert sum(split[k] for k in SPLIT_KEYS) == pytest.approx(split["total_s"], abs=0.01)
    assert split["total_s"] == pytest.approx(clocked, abs=0.3) and wall > clocked
    assert split["training_s"] > 0 and split["validation_s"] > 0 and split["checkpoint_s"] > 0
    assert split["compile_s"] == 0.0  # eager
    assert (split["first_step"], split["last_step"], split["steps"]) == (0, 4, 4)
    # tiny.yaml's epoch is 3 batches, validated at its 2nd: step 2 (the sanity check is timed
    # as validation, not counted as one)
    assert split["validations"] == 1
    assert split["checkpoint_saves"] >= 3  # steps 2 and 4, and the best
    assert split["setup_s"] < split["first_step_s"] < split["total_s"]
    (first,) = [ln for ln in lines if ln.startswith("vat: first optimizer step")]
    assert first.startswith(f"vat: first optimizer step (step 1) {split['first_step_s']:.1f} s ")
    assert f"set-up {split['setup_s']:.1f} s" in first
    assert lines[-1] == split_line(split, str(run / "time_split.json"))
    tb = scalars(run)
    for key in [*SPLIT_KEYS, "total_s", "first_step_s"]:
        assert tb[f"time/{key}"] == [(4, pytest.approx(split[key], abs=1e-3))], key

    more = ["--trainer.max_steps", "6", "--ckpt_path", "last"]
    wall, clocked, lines = _wall_fit(fit_args(run, cache, *more), capsys, caplog, monkeypatch)
    resumed = read_split(run)
    assert (resumed["first_step"], resumed["last_step"], resumed["steps"]) == (4, 6, 2)
    assert sum(resumed[k] for k in SPLIT_KEYS) == pytest.approx(resumed["total_s"], abs=0.01)
    assert resumed["total_s"] == pytest.approx(clocked, abs=0.3) and wall > clocked
    assert any(ln.startswith("vat: first optimizer step (step 5) ") for ln in lines)
    assert scalars(run)["time/total_s"][-1] == (6, pytest.approx(resumed["total_s"], abs=1e-3))


def test_a_fit_stopped_by_a_signal_writes_its_split_and_leaves_the_last_lines_to_the_stop(
    tmp_path, capsys, caplog, monkeypatch
):
    """The GPU suite stops its launches with a signal (vat.train.interrupt): the split ends
    after the stop's save, in the JSON and TensorBoard, and says nothing after the stop's
    own lines."""
    monkeypatch.setattr(time_split, "_clock_started", ["process start"])
    run = tmp_path / "run"
    stop = ["--trainer.callbacks+=crash_callbacks.SignalAt", "--trainer.callbacks.step=3"]
    args = fit_args(run, tmp_path / "cache", "--trainer.max_steps", "6", *stop)
    with caplog.at_level("INFO"):
        code, err = train_main(args, capsys)
    assert code == 130, err
    split = read_split(run)
    assert split["ended"] == "stopped" and split["last_step"] == 3
    assert split["checkpoint_saves"] >= 2  # step 2's and the stop's last.ckpt
    assert sum(split[k] for k in SPLIT_KEYS) == pytest.approx(split["total_s"], abs=0.01)
    assert scalars(run)["time/total_s"] == [(3, pytest.approx(split["total_s"], abs=1e-3))]
    assert not [r for r in caplog.records if "time split" in r.getMessage()]
    assert err[-1].startswith("vat: stopped by Ctrl-C after step 3; ")


@pytest.mark.slow
def test_the_first_fit_of_a_process_counts_from_the_process_s_start(tmp_path):
    """`vat train` as users run it: the split's total is the process's wall time up to the
    fit's end, its start-up and imports included (only the interpreter's exit is left: 3.5
    s of a 26-s run here, 7.5 of 46 with the 2 cores at load 7)."""
    from helpers import train_subprocess

    run = tmp_path / "run"
    t0 = time.monotonic()
    r = train_subprocess(fit_args(run, tmp_path / "cache", "--trainer.max_steps", "2"))
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    split = read_split(run)
    assert split["clock_from"] == "process start"
    assert 0 < wall - split["total_s"] < _outside(wall), (wall, split)
    assert split["setup_s"] > 0.5 * split["total_s"]  # imports, data, model: most of 2 steps
    assert "vat: time split of " in r.stderr and " since the process started: " in r.stderr


def test_compile_seconds_is_dynamo_s_own_clock():
    torch._dynamo.reset()
    assert compile_seconds() == 0.0
    double = torch.compile(lambda x: 2 * x + 1, backend="eager")
    t0 = time.perf_counter()
    double(torch.ones(3))
    wall = time.perf_counter() - t0
    assert 0 < compile_seconds() <= wall
    before = compile_seconds()
    double(torch.ones(3))  # compiled already: no new compile time
    assert compile_seconds() == before


@pytest.mark.slow
def test_a_compiled_fit_counts_dynamo_s_compile_time(compiled_resume):
    """model.compile (compiled_resume: an in-process launch, aot_eager, which compiles its own
    graph). The first step's compile is inside the time to the first step; the run's compile
    (a later step may compile a second graph, for another padded length) is inside its whole
    time."""
    split = json.loads((compiled_resume.run / "time_split.json").read_text())
    assert split["compile_s"] > 0.2  # aot_eager: dynamo's trace, AOTAutograd's forward+backward
    first = [m for line in compiled_resume.lines if (m := FIRST_STEP_LINE.match(line))]
    assert len(first) == 1, compiled_resume.lines
    to_first_step, compile_by_then = float(first[0]["seconds"]), float(first[0]["compile"])
    assert 0.2 < compile_by_then < to_first_step
    assert to_first_step == pytest.approx(split["first_step_s"], abs=0.05)  # shown to 0.1 s
    assert compile_by_then <= split["compile_s"] + 0.05 < split["total_s"]
    assert sum(split[k] for k in SPLIT_KEYS) == pytest.approx(split["total_s"], abs=0.01)


def test_read_split_refuses_what_is_not_this_launch_s_split(tmp_path):
    assert read_split(tmp_path) is None
    path = tmp_path / "time_split.json"
    path.write_text('{"total_s": 1}')
    assert read_split(tmp_path) is None  # not every part
    record = {"total_s": 3.0, **dict.fromkeys(SPLIT_KEYS, 0.5)}
    path.write_text(json.dumps(record))
    assert read_split(tmp_path) == record
    assert read_split(tmp_path, since=time.time() + 60) is None  # an earlier launch's
    path.write_text("{")
    assert read_split(tmp_path) is None


def test_resuming_a_finished_run_splits_no_steps_and_does_not_fail(tmp_path, capsys):
    """`--ckpt_path last` on a run already at max_steps (what `vat sweep` does with a run it
    finds trained but not marked) trains nothing: the split says 0 steps and no first step,
    and the command ends with 0 (before: a TypeError traceback from the split's None)."""
    run, cache = tmp_path / "run", tmp_path / "cache"
    extra = ["--trainer.max_steps", "2", "--data.num_workers", "0"]
    code, err = train_main(fit_args(run, cache, *extra), capsys)
    assert code == 0, err
    code, err = train_main(fit_args(run, cache, *extra, "--ckpt_path", "last"), capsys)
    assert code == 0, err
    assert not any("Traceback" in line for line in err)
    split = read_split(run)
    assert (split["first_step"], split["last_step"], split["steps"]) == (2, 2, 0)
    assert split["first_step_s"] is None
    tb = scalars(run)
    assert "time/first_step_s" in tb and tb["time/first_step_s"][-1][0] == 2  # the first fit's
    assert tb["time/total_s"][-1] == (2, pytest.approx(split["total_s"], abs=1e-3))


@pytest.mark.parametrize("bad", [0, 1])
def test_a_non_finite_step_is_not_counted_as_trained(tmp_path, capsys, bad):
    """NaN at step 1 recorded `steps: 2, last_step: 2` and two saves: the split counts the
    steps trained to completion (those before the NaN, as the last good checkpoint holds
    them) and the checkpoints written, not the save the guard refused."""
    run = tmp_path / "run"
    poison = [
        "--trainer.callbacks+=crash_callbacks.PoisonAtStep",
        f"--trainer.callbacks.step={bad}",
    ]
    args = fit_args(run, tmp_path / "cache", "--trainer.max_steps", "4", *poison)
    code, err = train_main(args, capsys)
    assert code == 2 and err[-1].startswith(f"error: non-finite loss at step {bad} "), err
    split = read_split(run)
    assert (split["ended"], split["first_step"], split["last_step"]) == ("failed", 0, bad)
    assert split["steps"] == bad and split["checkpoint_saves"] == len(list(run.rglob("*.ckpt")))


def test_a_split_that_cannot_be_written_is_a_warning_not_a_failed_run(tmp_path, capsys, caplog):
    """A folder where RUN/time_split.json goes turned a run that trained and saved into exit 2
    after its `next:` hints. The run's result stands; the split is said, not written."""
    from vat.share.checkpoint import read_checkpoint

    run, cache = tmp_path / "run", tmp_path / "cache"
    code, err = train_main(fit_args(run, cache), capsys)
    assert code == 0, err
    (run / "time_split.json").unlink()
    (run / "time_split.json").mkdir()
    more = ["--ckpt_path", "last", "--trainer.max_steps", "3"]
    caplog.clear()
    with caplog.at_level("INFO"):
        code, err = train_main(fit_args(run, cache, *more), capsys)
    assert code == 0, err
    assert read_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 3
    assert err[-1] == (
        f"vat: warning: time split not written: cannot write: output {run / 'time_split.json'} "
        "is a folder, expected a file path to write"
    )
    said = [r.getMessage() for r in caplog.records if "time split of" in r.getMessage()]
    assert len(said) == 1 and "written to" not in said[0]
    assert (run / "time_split.json").is_dir() and not list((run / "time_split.json").iterdir())
