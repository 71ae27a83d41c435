"""The GPU suite against what a rehearsal of the three-call recipe found on a node replica,
each in --smoke mode with short budgets: the recipe's arithmetic, a stage's clock, a call at
its limit or with a failed stage, a report carried to a fresh machine. (A run stopped before
its first checkpoint, a run that finished unrecorded, and the smoke run telling its two
targets apart are checked in tests/test_gpu_suite.py, on its smoke run.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: from the checkout

import gpu_suite_fixtures
from helpers import train_env, vat_python

from bench.gpu_suite import frontier_eval
from bench.gpu_suite.__main__ import seed_out_dir
from bench.gpu_suite.call import MAX_OUT_BYTES, MAX_OUT_FILE, MAX_OUT_FILES
from bench.gpu_suite.plan import (
    CALL_GUARD_S,
    CALL_LIMIT_S,
    CALL_OVERHEAD_S,
    CONTINUE_OVERHEAD_S,
    DEVICE_S,
    DEVICE_S_SHORT,
    RECIPE,
    RECIPE_CARRY,
    RECIPE_CONTINUE,
    RECIPE_OUT_DIR,
    RECIPE_SEED_DIR,
    RECIPE_SHORT,
    continue_budget_min,
    gpu_plan,
    recipe_command,
    recipe_device_s,
    smoke_plan,
)
from bench.gpu_suite.schema import write
from bench.gpu_suite.state import STAGES, Budget, Suite, new_state, stage_allot
from vat.errors import VatError

ROOT = Path(__file__).resolve().parents[1]
SH = str(ROOT / "bench" / "gpu_suite.sh")
suite_data_dir = gpu_suite_fixtures.suite_data_dir  # the shared data, its STS files short


def _env(data_dir: Path) -> dict[str, str]:
    """bench/gpu_suite.sh's environment: the suite and its children in the tests' vat
    interpreter (helpers.vat_python: `PYTHON`, which the script runs)."""
    return {**train_env(), "PYTHON": vat_python(), "VAT_DATA_DIR": str(data_dir),
            "OMP_NUM_THREADS": "1"}  # fmt: skip


def _simulate(plan, recipe):
    """Each recipe call's allotments, every stage spending all it gets (the worst case):
    {stage: [seconds per call]}, by the suite's own rule (state.stage_allot)."""
    stages = new_state(smoke=False).stages
    got = {s: [] for s in STAGES}
    for call in recipe:
        now = [0.0]
        budget = Budget(call.budget_min, clock=lambda now=now: now[0])
        todo = [s for s in STAGES if not call.stages or s in call.stages]
        for i, s in enumerate(todo):
            if stages[s].status == "done":
                continue
            allot = stage_allot(plan, s, todo[i + 1 :], stages, budget)
            if allot < plan.min_s[s]:
                continue
            now[0] += allot
            stages[s].seconds += allot
            got[s].append(allot)
            if stages[s].seconds >= plan.shares_s[s]:
                stages[s].status = "done"
    return got


def test_the_recipe_fits_the_gpu_allocation_and_gives_each_stage_its_share():
    """The old recipe gave frontier_train 525 s + 195 s (two starts, two recompiles) for
    steps sized to 720 s. Now: every stage gets its whole share; the frontier in one call
    (its steps are sized to that call); the reference in plan.reference_launches calls;
    each call ends inside the 10-minute limit less the guard, and the whole recipe inside
    the 30 minutes of device time, start and gaps included."""
    plan = gpu_plan()
    got = _simulate(plan, RECIPE)
    assert {s: sum(v) for s, v in got.items()} == plan.shares_s
    assert len(got["frontier_train"]) == 1
    assert len(got["reference"]) == plan.reference_launches
    for call in RECIPE:
        assert 15 + 60 * call.budget_min + 10 <= CALL_LIMIT_S - CALL_GUARD_S
    # bench/gpu_suite.sh stops the suite CALL_GUARD_S before the limit
    assert f"GUARD_S={CALL_GUARD_S} " in Path(SH).read_text()
    assert recipe_device_s() == 120 + 3 * CALL_OVERHEAD_S + 60 * 23.5 + 2 * 25 <= DEVICE_S - 60
    # the old plan and recipe, for the record: the frontier split over two calls
    old = gpu_plan()
    old.shares_s = {"facts": 30, "throughput": 420, "reference": 0, "frontier_train": 720,
                    "frontier_eval": 240, "artefacts": 30}  # fmt: skip
    old.min_s.update(reference=1, frontier_train=90)
    old_recipe = [
        type(RECIPE[0])(8.5, ("facts", "throughput"), ""),
        type(RECIPE[0])(9, ("frontier_train",), ""),
        type(RECIPE[0])(8.5, (), ""),
    ]
    assert len(_simulate(old, old_recipe)["frontier_train"]) == 2


def test_docs_gpu_gives_the_recipe_of_plan_py():
    """docs/gpu.md's recipe is plan.RECIPE: each call's command, `offline` and the seed folder
    copied to the node on every call (a fresh node has lost the bundle), OUT_DIR never."""
    section = (ROOT / "docs" / "gpu.md").read_text()
    for i, call in enumerate(RECIPE, 1):
        assert recipe_command(call) in section, f"call {i}"
    copied = " and ".join(f"{d}/" for d in RECIPE_CARRY)
    assert f"with {copied} copied to the node" in section
    assert RECIPE_CARRY == ("offline", RECIPE_SEED_DIR) and RECIPE_OUT_DIR not in RECIPE_CARRY
    assert f"{recipe_device_s():,.0f} s" in section
    for line in section.splitlines():  # the old recipe's `; find ... $OUT` hid the exit code
        assert not re.search(r";\s*find .*\$OUT", line), line
    # the 15-minute allocation: plan.RECIPE_SHORT, with --plan short, and its device time
    for i, call in enumerate(RECIPE_SHORT, 1):
        assert recipe_command(call, "short") in section, f"short call {i}"
    assert f"= {recipe_device_s(RECIPE_SHORT):,.0f} s of the {DEVICE_S_SHORT:,} s" in section
    # the call that continues the reference, for any command limit M
    cont = section[section.index("**Continuing the reference") :]
    cont = cont[: cont.index("\n**An allocation")]
    assert f"# each call, with {copied} copied to the node:\n" in cont
    assert recipe_command(RECIPE_CONTINUE, "short") in cont
    assert continue_budget_min(CALL_LIMIT_S) == RECIPE_CONTINUE.budget_min
    assert f"M - {CONTINUE_OVERHEAD_S / 60:g}" in cont and "`--call-limit-s` is M x 60" in cont
    for said in ("resumed exactly from step N", "(optimizer fresh)", "*from nothing*",
                 "`reference.ckpt.part1`", "--overwrite"):  # fmt: skip
        assert said in cont, said


def test_the_best_runs_feature_specs_wait_for_the_clock(tmp_path, data_dir):
    """frontier_eval took 290 s of a 240-s share: the best run's feature specs ran after the
    last time check. With less time left than their estimate, they wait for the next call
    and the stage ends within its allotment."""
    plan = smoke_plan()
    state = write(new_state(smoke=True))
    state["stages"]["frontier_train"]["status"] = "done"
    state["frontier"].update(values=[5.0, 20.0], steps=8)
    for name, stsb, kl in (("target_kl_5.0", 0.3, 5.0), ("target_kl_20.0", 0.4, 20.0)):
        sts = {"sts12": 0.3, "stsb": stsb}
        rec = {"run": name, "bleu": 50.0, "sts": {"mean": sts, "precision": sts}, "extra_sts": {},
               "checkpoint": str(tmp_path / "gone.ckpt"), "target_kl": kl, "step": 8,
               "val_kl": 2.0, "val_nll": 5.0, "active_units": 8, "bleu_lines": 24,
               "bleu_short": 50.0, "bleu_long": None, "lines_long": 0}  # fmt: skip
        state["frontier"]["runs"][name] = {"trained": True, "eval": rec}
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(state))
    suite = Suite(out, plan, data_dir, Budget(1), None)
    allot = plan.extra_eval_s / 2
    t0 = time.monotonic()
    assert frontier_eval.run(suite, allot) == "partial"
    assert time.monotonic() - t0 < allot
    fr = suite.state.frontier
    assert fr.best.export.best_sts.run == "target_kl_20.0"
    assert fr.runs["target_kl_20.0"].eval.extra_sts == {}
    assert "the next call measures them" in suite.state.stages["frontier_eval"].notes[-1]


def _copied(folder: Path) -> tuple[dict, str]:
    return json.loads((folder / "gpu_report.json").read_text()), (
        folder / "gpu_report.md"
    ).read_text()


def test_a_call_with_a_failed_stage_or_at_its_limit_returns_its_files_and_exit_code(
    tmp_path, suite_data_dir
):
    """The old recipe's `; find ... $OUT` made the call's exit code find's, and a call past
    10 minutes was killed before copying. Now bench/gpu_suite.sh --copy-to copies OUT_DIR's
    files whatever happened and exits with the suite's code, which the copied report shows;
    --call-limit-s stops the suite before the limit (its state saved). (The call with a
    failed stage runs while the one at its limit waits for it.)"""
    env = _env(suite_data_dir)
    # a call at its limit: `window` s after the 40-s guard, inside the smoke run's stages (12 s
    # once stopped it while Python was still importing, under a loaded machine: no report yet;
    # the suite now imports Lightning only when a stage needs it, and writes its report
    # within seconds of its start)
    window = 20
    out2, back2 = tmp_path / "out2", tmp_path / "back2"
    limit = CALL_GUARD_S + window
    cmd = [SH, "--copy-to", str(back2), "--call-limit-s", str(limit), "--smoke", str(out2)]
    err = {name: tmp_path / f"{name}.err" for name in ("at_limit", "failed")}
    t0 = time.monotonic()
    with open(err["at_limit"], "w") as f:
        at_limit = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=f)
    while not (out2 / "gpu_report.json").exists() and at_limit.poll() is None:
        time.sleep(0.05)  # its start not slowed by the call below

    # a stage that fails: a run marked trained whose checkpoint is not there
    out, back = tmp_path / "out", tmp_path / "back"
    state = write(new_state(smoke=True))
    state["stages"]["frontier_train"]["status"] = "done"
    state["frontier"].update(values=[5.0], steps=8)
    (out / "work" / "frontier" / "target_kl_5.0").mkdir(parents=True)
    (out / "work" / "frontier" / "target_kl_5.0" / ".trained").write_text("")
    (out / "gpu_report.json").write_text(json.dumps(state))
    cmd = [SH, "--copy-to", str(back), "--smoke", "--stages", "frontier_eval", str(out)]
    with open(err["failed"], "w") as f:
        failed = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=f)
    ended: dict[str, float] = {}  # when each call's process ended
    while len(ended) < 2:
        for name, proc in (("at_limit", at_limit), ("failed", failed)):
            if name not in ended and proc.poll() is not None:
                ended[name] = time.monotonic()
        time.sleep(0.05)

    assert failed.returncode == 1, err["failed"].read_text()[-2000:]
    rep, md = _copied(back)
    assert rep["calls"][-1]["exit"] == 1 and rep["stages"]["frontier_eval"]["status"] == "failed"
    assert md.rstrip().splitlines()[-1].startswith("**This call: exit 1** (a stage failed")

    said = err["at_limit"].read_text()
    # the suite's own lines, whole: where the limit's SIGINT landed (its progress bars left out)
    assert at_limit.returncode == 124, "\n".join(
        ln for ln in said.splitlines() if ln.startswith(("gpu_suite:", "vat:", "error:"))
    )
    # stopped, not killed (SIGKILL 28 s after the SIGINT): the suite wrote its report
    assert ended["at_limit"] - t0 < window + 28
    rep, md = _copied(back2)
    assert rep["calls"][-1]["exit"] == 130
    stopped = [s for s, st in rep["stages"].items() if st["status"] == "partial"]
    assert len(stopped) == 1 and "interrupted by a signal" in rep["stages"][stopped[0]]["notes"][-1]
    assert "**This call: exit 124** (stopped by --call-limit-s" in md
    assert sorted(p.name for p in back2.iterdir()) == sorted(
        p.name for p in out2.iterdir() if p.is_file()
    )
    sizes = [p.stat().st_size for p in back2.iterdir()]  # what a call may return
    assert len(sizes) <= MAX_OUT_FILES and max(sizes) <= MAX_OUT_FILE
    assert sum(sizes) <= MAX_OUT_BYTES


@pytest.mark.parametrize("fresh", [True, False])
def test_seed_carries_a_returned_report_to_a_fresh_machine_only(tmp_path, fresh):
    """The recipe carries the last call's files as RECIPE_SEED_DIR, never OUT_DIR (a carried
    path replaces the machine's, and OUT_DIR/work holds the checkpoints): a fresh machine
    starts from the returned report, a warm one keeps its own."""
    seed, out = tmp_path / "back", tmp_path / "out"
    seed.mkdir()
    returned = write(new_state(smoke=True))
    returned["stages"]["facts"]["notes"] = ["returned"]
    (seed / "gpu_report.json").write_text(json.dumps(returned))
    (seed / "reference.tar").write_bytes(b"tar")
    (seed / "unrelated.txt").write_text("x")
    if not fresh:
        out.mkdir()
        (out / "gpu_report.json").write_text('{"warm": true}')
    said = seed_out_dir(out, seed, smoke=True)
    if fresh:
        assert json.loads((out / "gpu_report.json").read_text()) == returned
        assert (out / "reference.tar").read_bytes() == b"tar" and not (
            out / "unrelated.txt"
        ).exists()
        assert "copied gpu_report.json, reference.tar" in said
    else:
        assert json.loads((out / "gpu_report.json").read_text()) == {"warm": True}
        assert not (out / "reference.tar").exists() and "ignored" in said
    missing = seed_out_dir(tmp_path / "o2", tmp_path / "missing", smoke=True)
    assert "no gpu_report.json there" in missing


def test_a_seed_report_this_call_cannot_continue_is_one_line_before_any_copy(tmp_path):
    """Before, a returned report of the other mode, or with a broken field, was copied into
    the fresh OUT_DIR and stopped the call there (or mid-way, with a traceback); now it is one
    line naming the seed's file and the field, and OUT_DIR stays empty."""
    seed, out = tmp_path / "back", tmp_path / "out"
    seed.mkdir()
    (seed / "reference.tar").write_bytes(b"tar")
    report = write(new_state(smoke=True))
    report["reference"]["launches"] = [
        {"started": "t", "seconds": -3.0, "steps": 4, "step": 4, "overhead_s": None,
         "status": "trained"}
    ]  # fmt: skip
    for state, smoke, needle in (
        (report, True, "'report.reference.launches[0].seconds' must be a finite number >= 0"),
        (write(new_state(smoke=True)), False, "holds a smoke report and this is a gpu call"),
    ):
        (seed / "gpu_report.json").write_text(json.dumps(state))
        with pytest.raises(VatError) as e:
            seed_out_dir(out, seed, smoke=smoke)
        assert str(e.value).startswith(str(seed / "gpu_report.json")) and needle in str(e.value)
        assert str(e.value).endswith("use another --seed, or none to start afresh")
        assert not out.exists()


def test_a_stop_inside_an_in_process_vat_command_stops_the_suite():
    """vat's commands turn a Ctrl-C into exit 130 (vat.errors.run_cli). Run inside the suite,
    that SIGINT was the suite's own stop (--call-limit-s): before, the stage was called failed
    and the next stage started, until the call was killed with no report."""
    from bench.gpu_suite.in_process import run_vat
    from vat.errors import VatError, run_cli

    def interrupted(argv):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_vat(lambda argv: run_cli(interrupted, argv), [], "vat export X Y")
    with pytest.raises(VatError, match=r"^vat export X Y failed \(exit 2\)$"):
        run_vat(lambda argv: 2, [], "vat export X Y")
    assert run_vat(lambda argv: 0, ["a"], "vat export X Y") is None


def test_a_stop_during_the_suite_s_import_of_lightning_waits_for_the_import(tmp_path):
    """The call limit's SIGINT once landed while the suite imported Lightning: scipy's C
    extension was left half-registered (ImportError), and the suite ended without its report.
    Now the import finishes whole and the stop follows it as a KeyboardInterrupt. (A fresh
    interpreter: this one has Lightning already.)"""
    probe = (
        "import os, signal, sys, threading\n"
        "from bench.gpu_suite.state import _import_training_stack\n"
        "assert 'lightning.pytorch' not in sys.modules\n"
        "threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        "    _import_training_stack()\n"
        "except KeyboardInterrupt:\n"
        "    import lightning.pytorch as L\n"
        "    print('stopped after the import', L.Trainer.__name__,\n"
        "          signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                       timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert r.stdout.strip() == "stopped after the import Trainer True", r.stderr[-2000:]
