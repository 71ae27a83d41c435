"""What the GPU suite's tests share: a small data folder for the suite, and one finished
`--smoke` run (two calls), made once per test session and read by several tests.

A test module binds the fixtures it uses at its top (`smoke_suite =
gpu_suite_fixtures.smoke_suite`: pytest finds them there, and a test's argument of that name
does not shadow an import). Under pytest-xdist each worker is its own process: the smoke run
is made by the first worker that needs it, in the session's shared temporary folder under a
lock, and read by the others (`helpers.made_once`). Tests only read it: a test that changes
files copies them first.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import made_once

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench/: from the checkout

STS_LINES = 64
"""Lines kept of each STS file in the suite's data folder: the smoke run evaluates STS12 and
STS-B for every run and spec (a dozen `vat evaluate` and a `vat features compare`), and the
full files (17,600 sentences a call) made that most of its time."""


def make_suite_data(dest: Path, data_dir: Path) -> None:
    """The suite's data folder (plan.data_patterns): the corpus as it is (linked), the STS
    files cut to their first STS_LINES lines."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "corpus").symlink_to(data_dir / "corpus")
    for sts in ("STS12-en-test", "STSBenchmark"):
        src, to = data_dir / "senteval" / "STS" / sts, dest / "senteval" / "STS" / sts
        to.mkdir(parents=True)
        for f in sorted(src.iterdir()):
            if f.is_file():
                with open(f, encoding="utf-8") as lines:
                    head = [ln for _, ln in zip(range(STS_LINES), lines)]
                (to / f.name).write_text("".join(head), encoding="utf-8")


@pytest.fixture(scope="session")
def suite_data_dir(tmp_path_factory, data_dir) -> Path:
    """The shared data with short STS files (make_suite_data): what the suite's tests give
    it as --data-dir."""
    return made_once(tmp_path_factory, "gpu_suite_data", lambda d: make_suite_data(d, data_dir))


@dataclass(frozen=True)
class SmokeRun:
    """A finished `--smoke` OUT_DIR and what its making saw."""

    out: Path
    """OUT_DIR after both calls (read it; copy before changing anything)."""
    data_dir: Path
    first: dict[str, Any]
    """gpu_report.json after the first call (facts, throughput)."""
    rep: dict[str, Any]
    """gpu_report.json after the second (the rest)."""
    exits: list[int]
    """Each call's exit code."""
    killed: dict[str, Any]
    """The frontier run killed before the second call (_kill_when_written): its folder and
    checkpoint step just before that call, and how its process ended."""


KILLED_RUN = 5.0
"""The frontier run a SIGKILL stops before the second call, after vat wrote its run folder
and before its first checkpoint (as the OOM killer did in the rehearsal)."""


def _kill_when_written(proc: subprocess.Popen, written: Path, said: dict[str, Any]) -> None:
    """SIGKILL `proc` as soon as `written` exists (vat wrote its run folder)."""
    deadline = time.monotonic() + 600
    while not written.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    said["folder_written"] = written.exists()
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    said["returncode"] = proc.wait()


def _make_smoke_run(root: Path, data_dir: Path) -> None:
    """`bench/gpu_suite.sh --smoke` in two calls on one OUT_DIR (in this process:
    bench/gpu_suite/__main__.main, which the wrapper execs): facts and throughput, then the
    rest. Meanwhile the frontier's first run is started by hand and killed (SIGKILL) once vat
    has written its run folder, before its first checkpoint: the second call finds it so."""
    from helpers import children_in_vat_python

    with children_in_vat_python():  # its training runs start as bench/gpu_suite.sh's do
        _make_smoke_suite(root, data_dir)


def _make_smoke_suite(root: Path, data_dir: Path) -> None:
    from bench.gpu_suite.__main__ import main
    from bench.gpu_suite.children import child_env
    from bench.gpu_suite.frontier_train import run_name, train_cmd
    from bench.gpu_suite.plan import smoke_plan
    from bench.gpu_suite.runs import checkpoint_step, prepare_data
    from bench.gpu_suite.state import Budget, Suite

    out = root / "suite"
    out.mkdir()
    plan = smoke_plan()
    # the suite's config and data as its first call writes them (its report first, as a
    # call does), so that the run killed below starts beside that call
    suite = Suite(out, plan, data_dir, Budget(5), None)
    suite.save()
    suite.write_config()
    prepare_data(suite, suite.config)
    killed = out / "work" / "frontier" / run_name(KILLED_RUN)
    # 100,000 steps: its first checkpoint would come at step 25,000, long after its folder
    victim = subprocess.Popen(train_cmd(suite.config, killed, KILLED_RUN, 100_000), cwd=ROOT,
                              env=child_env(plan), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    said: dict[str, Any] = {}
    watcher = threading.Thread(
        target=_kill_when_written, args=(victim, killed / "config.yaml", said)
    )
    watcher.start()
    argv = ["--smoke", "--data-dir", str(data_dir)]
    try:
        rc1 = main([*argv, "--stages", "facts,throughput", str(out)])
    finally:
        watcher.join()
    shutil.copy(out / "gpu_report.json", root / "first.json")
    said["step"] = checkpoint_step(killed)
    said["config_yaml"] = (killed / "config.yaml").is_file()
    rc2 = main([*argv, str(out)])
    info = {"exits": [rc1, rc2], "killed": said, "data_dir": str(data_dir)}
    (root / "info.json").write_text(json.dumps(info))


@pytest.fixture(scope="session")
def smoke_suite(tmp_path_factory, suite_data_dir) -> SmokeRun:
    """The finished smoke OUT_DIR (_make_smoke_run), made once per session."""
    root = made_once(
        tmp_path_factory, "gpu_suite_smoke", lambda d: _make_smoke_run(d, suite_data_dir)
    )
    info = json.loads((root / "info.json").read_text())
    out = root / "suite"
    return SmokeRun(
        out=out,
        data_dir=Path(info["data_dir"]),
        first=json.loads((root / "first.json").read_text()),
        rep=json.loads((out / "gpu_report.json").read_text()),
        exits=info["exits"],
        killed=info["killed"],
    )


def returned_files(out: Path, back: Path) -> Path:
    """What `bench/gpu_suite.sh --copy-to BACK` returns of OUT_DIR: its top-level files, copied
    into `back` (a fresh folder)."""
    back.mkdir(parents=True)
    for f in out.iterdir():
        if f.is_file():
            shutil.copy(f, back / f.name)
    return back
