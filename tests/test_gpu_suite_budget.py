"""The reference launch's end of call: it leaves the evaluation and the export what this model
took before, not the plan's estimates, and validates a few times per launch, spaced by the
steps it is expected to train. Closed forms, no training."""

from __future__ import annotations

import pytest

from bench.gpu_suite import reference
from bench.gpu_suite.plan import gpu_plan
from bench.gpu_suite.records import Evaluation, Launch, Reference
from bench.gpu_suite.schema import read, write


def _launch(steps: int, seconds: float) -> Launch:
    return Launch(started="2026-11-27T14:54:04Z", seconds=seconds, steps=steps, step=steps,
                  overhead_s=None, status="interrupted")  # fmt: skip


def test_the_reserve_is_the_plans_estimate_until_measured_then_the_measurement():
    plan, ref = gpu_plan(), reference.new_reference()
    s, why = reference.finish_reserve_s(ref, plan)
    assert s == plan.eval_run_s + plan.export_s + reference.ONE_LAUNCH_MARGIN_S == 95
    assert "not yet measured" in why
    reference._measured_finish(ref, "eval", 21.04)
    s, _ = reference.finish_reserve_s(ref, plan)
    assert s == 95  # both parts are needed
    assert reference.finish_estimate_s(ref, plan, "eval") == pytest.approx(1.25 * 21.0)
    assert reference.finish_estimate_s(ref, plan, "export") == plan.export_s
    reference._measured_finish(ref, "export", 8.96)
    s, why = reference.finish_reserve_s(ref, plan)
    assert s == pytest.approx(1.25 * (21.0 + 9.0) + 10.0)  # 47.5 s, not 95
    assert "measured 21 + 9 s" in why
    assert read(Reference, write(ref), "reference") == ref  # the report keeps it


def test_validations_per_launch_follow_the_last_launchs_speed():
    ref = reference.new_reference()
    assert reference.val_every(ref, 400.0) == reference.VAL_EVERY_ONE_LAUNCH  # nothing measured
    ref.launches.append(_launch(4923, 406.7))  # the H200's round 2: 12.1 steps per second
    every = reference.val_every(ref, 400.0)
    assert every == int(4923 / 406.7 * 400.0 // reference.VALIDATIONS_PER_LAUNCH) == 1210
    ref.launches.append(_launch(219, 86.2))  # a short resumed launch, mostly start-up
    assert reference.val_every(ref, 100.0) == reference.MIN_VAL_EVERY  # 63 would be too often
    assert reference.val_every(ref, 400.0) == int(219 / 86.2 * 400.0 // 4) == 254


def test_the_launch_command_validates_every_given_steps(tmp_path):
    cmd = reference.train_cmd(tmp_path / "c.yaml", tmp_path / "r", 9400, True, None, 1210)
    assert cmd[cmd.index("--trainer.val_check_interval") + 1] == "1210"
    cmd = reference.train_cmd(tmp_path / "c.yaml", tmp_path / "r", 300, True, None, 1210)
    assert cmd[cmd.index("--trainer.val_check_interval") + 1] == "300"  # never past the end
    cmd = reference.train_cmd(tmp_path / "c.yaml", tmp_path / "r", 9400, True)
    assert cmd[cmd.index("--trainer.val_check_interval") + 1] == "500"


def test_the_report_says_which_step_the_validation_numbers_come_from():
    from bench.gpu_suite.report import _val_step_note

    def record(**steps):
        from test_gpu_suite import _eval

        return read(Evaluation, {**_eval("reference", 20.0), **steps}, "eval")

    assert _val_step_note(record(step=5142, val_step=5142)) == []
    assert _val_step_note(record(step=5142, val_step=None)) == []  # an older report: no claim
    (line, _) = _val_step_note(record(step=5142, val_step=5000))
    assert "at step 5,000" in line and "step 5,142" in line
