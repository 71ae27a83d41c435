"""The stage list, the state in OUT_DIR/gpu_report.json, the budget, and the runner.

Budget and resume: a call runs the stages asked for (`--stages`, default all) that are not
finished, in order, inside `--budget-min` minutes: a stage starts only if its minimum fits
in what is left, gets at most its share (less what earlier calls spent on it), and a stage
that would overrun is skipped with a note. Each stage's clock starts before its first step
and it checks that clock before each further one, so it ends within what it was allotted;
the allotment and the seconds used are recorded per call. Running the same command again on
the same OUT_DIR skips finished stages and continues the rest (the reference's and the
frontier's runs from their checkpoints, the evaluation run by run). A SIGINT or SIGTERM (a
Ctrl-C, bench/gpu_suite.sh --call-limit-s) stops the stage under way the same way: its
children save their state, the report is written, exit code 130."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.gpu_suite import (
    artefacts,
    carry,
    facts,
    frontier_eval,
    frontier_train,
    reference,
    schema,
    throughput,
)
from bench.gpu_suite.call import MAX_REPORT_BYTES, REPORT, Call, now_iso
from bench.gpu_suite.children import shield
from bench.gpu_suite.out_files import open_regular
from bench.gpu_suite.plan import Plan
from bench.gpu_suite.records import CallRecord, Frontier, Report, StageRecord, Throughput
from bench.gpu_suite.report import write_outputs
from vat.errors import VatError

STAGES: dict[str, Callable[[Call, float], str]] = {
    "facts": facts.run,
    "throughput": throughput.run,
    "reference": reference.run,
    "frontier_train": frontier_train.run,
    "frontier_eval": frontier_eval.run,
    "artefacts": artefacts.run,
}
"""The stages in the order they run: stage NAME is bench/gpu_suite/NAME.py, whose run(call,
allot) works within `allot` seconds and returns the stage's status ("done", "partial",
"skipped" or "failed"). A new stage: its module, its line here, its shares in plan.py."""
SCHEMA = 2
"""2: the reference stage; a schema-1 OUT_DIR is refused (use another)."""


def new_state(smoke: bool) -> Report:
    return Report(
        schema=SCHEMA,
        mode="smoke" if smoke else "gpu",
        calls=[],
        stages={s: StageRecord(status="pending", seconds=0.0, notes=[]) for s in STAGES},
        facts=None,
        throughput=Throughput(variants={}, not_run={}, targets={}),
        reference=reference.new_reference(),
        frontier=Frontier(
            key=frontier_train.TARGET_KL_KEY,
            values=[],
            steps=None,
            steps_from=None,
            runs={},
            best=None,
        ),
        artefacts={},
    )


def load_state(out: Path, smoke: bool) -> Report:
    path = out / REPORT
    if not (path.exists() or path.is_symlink()):
        return new_state(smoke)
    return read_report(path, smoke, "use another OUT_DIR")


def read_report(path: Path, smoke: bool, fix: str) -> Report:
    """A report an earlier call wrote, every field checked against its type (records.py,
    schema.py) before any stage reads it: anything else is one line naming `path` and the
    field, ending with `fix`."""
    try:  # never through a link (a seed's could point anywhere), a folder or a FIFO
        with open_regular(path) as f:
            # no more than a report can hold: a larger file was not written by the suite
            data = f.read(MAX_REPORT_BYTES + 1)
    except OSError:
        raise VatError(f"{path} is not a file; {fix}") from None
    if len(data) > MAX_REPORT_BYTES:
        raise VatError(f"{path} is over {MAX_REPORT_BYTES // 2**20} MiB, more than a "
                       f"gpu_report.json holds; {fix}")  # fmt: skip
    try:
        state = json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise VatError(f"{path} is not a gpu_report.json ({e}); {fix}") from None
    if not isinstance(state, dict) or state.get("schema") != SCHEMA:
        raise VatError(f"{path}: not a schema-{SCHEMA} gpu_report.json; {fix}")
    mode = "smoke" if smoke else "gpu"
    if state.get("mode") != mode:
        raise VatError(
            f"{path} holds a {state.get('mode')} report and this is a {mode} call; {fix}"
        )
    try:
        report = schema.read(Report, state, "report")
        for stage in STAGES:  # the stages are a dict by name: their names are not a type's
            if stage not in report.stages:
                raise schema.Broken(f"report.stages.{stage}", "present")
    except schema.Broken as e:
        raise VatError(f"{path}: {e}; {fix}") from None
    return report


class Budget:
    """This call's deadline, and what a stage may spend of it."""

    def __init__(self, minutes: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + 60.0 * minutes

    def left(self) -> float:
        return self.deadline - self.clock()

    def allot(self, share_left: float, reserve: float) -> float:
        """Seconds a stage may run: its remaining share, less what later stages need to start."""
        return max(0.0, min(share_left, self.left() - reserve))


def stage_allot(
    plan: Plan, stage: str, later: Sequence[str], stages: dict[str, StageRecord], budget: Budget
) -> float:
    """What `stage` gets in this call: its share less what earlier calls spent on it (at
    least its minimum: a stage that must finish, like the frontier's training, continues in
    later calls), within the budget left less the minimums of the `later` stages of this call
    that are not done. Less than its minimum: it is skipped."""
    reserve = sum(plan.min_s[s] for s in later if stages[s].status != "done")
    share_left = plan.shares_s[stage] - stages[stage].seconds
    return budget.allot(max(share_left, plan.min_s[stage]), reserve)


class Suite(Call):
    """One call on OUT_DIR (its state loaded from there), which runs the stages in order."""

    def __init__(
        self,
        out: Path,
        plan: Plan,
        data_dir: Path,
        budget: Budget,
        steps: int | None,
        trust_compile_cache: bool = False,
    ) -> None:
        state = load_state(out, plan.smoke)
        super().__init__(out, plan, data_dir, steps, state, trust_compile_cache)
        self.budget = budget
        self.failed: list[str] = []

    def run(self, stages: Sequence[str], again: bool = False, command: str | None = None) -> int:
        """The `stages` not done, in order. `again`: the call named the reference in
        --stages, and a finished reference is trained further (reference.begin_round).
        `command`: the call's command line, for its record (default: this process's)."""
        if self.plan.smoke:  # tiny shapes: a second thread only spins on a shared CPU
            import torch

            torch.set_num_threads(1)
        since = time.time()  # files older than this are an earlier call's (make_room)
        # the report first: an OUT_DIR holding the suite's work/ without it is refused as
        # not the suite's (call.check_out_dir), even after a call stopped right here
        self.save()
        self.write_config()
        if again and "reference" in stages:
            reference.begin_round(self)
        reference.check_reference_files(self)
        frontier_train.check_frontier_files(self)
        call = CallRecord(
            started=now_iso(),
            budget_min=round((self.budget.deadline - self.budget.clock()) / 60, 2),
            stages=list(stages),
            command=command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            allotted_s={},
            used_s={},
            exit=None,
        )
        self.state.calls.append(call)
        self.save()
        todo = [s for s in STAGES if s in stages]
        try:
            _import_training_stack()
            rc = self._run_stages(todo, call)
        except KeyboardInterrupt:  # between two stages
            shield()
            rc = 130
        rc = rc or (1 if self.failed else 0)
        call.exit = rc
        if not self.parts_written:  # a seed's parts, or an earlier call's: not returned again
            carry.remove_parts(self.out)
        write_outputs(self)
        moved = self.make_room(since)
        if moved:
            self.note("reference", f"{', '.join(moved)}: returned by an earlier call, moved to "
                      "work/returned/ (a call returns at most 8 files, 64 MiB)")  # fmt: skip
            write_outputs(self)
        return rc

    def _run_stages(self, todo: list[str], call: CallRecord) -> int:
        """The stages in order; 130 when a signal stopped one (the rest are not started)."""
        rc = 0
        for i, stage in enumerate(todo):
            st = self.state.stages[stage]
            if st.status == "done":
                continue
            allot = stage_allot(self.plan, stage, todo[i + 1 :], self.state.stages, self.budget)
            if allot < self.plan.min_s[stage]:
                st.status = "skipped" if st.status == "pending" else st.status
                self.note(
                    stage,
                    f"skipped: needs at least {self.plan.min_s[stage]:.0f} s, "
                    f"{max(self.budget.left(), 0):.0f} s left in this call's budget; rerun "
                    "to continue",
                )
                self.save()
                continue
            call.allotted_s[stage] = round(allot, 1)
            t0 = time.monotonic()
            try:
                status = STAGES[stage](self, allot)
            except VatError as e:
                status = "failed"
                self.note(stage, f"failed: {e}")
            except KeyboardInterrupt:
                shield()  # the clean-up below must not be cut short by a second signal
                status = "partial"
                self.note(stage, "interrupted by a signal (SIGINT or SIGTERM: a Ctrl-C, the "
                          "call's limit); its state is saved: rerun to continue")  # fmt: skip
                rc = 130
            used = time.monotonic() - t0
            call.used_s[stage] = round(used, 1)
            if used > allot + 1.0:  # a clock check missing somewhere: say so in the report
                self.note(stage, f"overran its {allot:.0f} s by {used - allot:.0f} s")
            st.seconds = round(st.seconds + used, 1)
            st.status = status
            if status == "failed":
                self.failed.append(stage)
            self.save()
            write_outputs(self)
            if rc:
                break
        return rc


_STOPS = (signal.SIGINT, signal.SIGTERM)


def _import_training_stack() -> None:
    """Lightning (and torch, torchmetrics, scipy under it), which the stages import, imported
    once here with SIGINT and SIGTERM only noted. A stop that lands inside a C extension's
    import breaks it (scipy: `ImportError: generic_type: type "ObjSense" is already
    registered`), and the suite ended without its report. Noted, it is raised once the import
    is whole, as the KeyboardInterrupt the suite stops on."""
    got: list[int] = []
    kept = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in _STOPS}
    try:
        import lightning.pytorch  # noqa: F401
    finally:
        for s, handler in kept.items():
            signal.signal(s, handler)
    if got:
        raise KeyboardInterrupt
