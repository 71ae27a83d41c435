"""The GPU suite records where each launch's seconds went: a launch's time split
(vat.callbacks.time_split) in its call's record, checked as its type says, and in the report,
with each call's unused seconds."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest
from test_gpu_suite import _finished_report

from bench.gpu_suite.records import CallRecord, Report, TimeSplit
from bench.gpu_suite.report import render_markdown, unused_s
from bench.gpu_suite.runs import Outcome, launch_split, record_launch
from bench.gpu_suite.schema import read, write
from bench.gpu_suite.state import load_state
from vat.errors import VatError

SPLIT = {
    "total_s": 399.9, "setup_s": 67.5, "compile_s": 20.1, "training_s": 283.0,
    "validation_s": 27.0, "checkpoint_s": 2.0, "other_s": 0.3, "first_step_s": 87.9,
    "steps": 4593, "validations": 9, "checkpoint_saves": 5, "ended": "stopped",
}  # fmt: skip
"""The H200 launch of 2026-11-27 as its split would read (its measured figures)."""


def test_a_launch_keeps_the_split_it_wrote_not_an_earlier_launch_s(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    written = {**SPLIT, "clock_from": "process start", "first_step": 49, "last_step": 4642,
               "device": "cuda"}  # fmt: skip
    (run / "time_split.json").write_text(json.dumps(written))
    assert write(launch_split(run, since=time.time() - 60)) == SPLIT  # the record's fields only
    old = time.time() - 3600
    os.utime(run / "time_split.json", (old, old))  # an earlier launch's file
    assert launch_split(run, since=time.time() - 60) is None

    calls = [CallRecord(started=s, command="c", allotted_s={}, used_s={}) for s in "ab"]
    call = SimpleNamespace(state=SimpleNamespace(calls=calls))
    split = read(TimeSplit, SPLIT, "time_split")
    record_launch(call, "reference", "reference", Outcome("interrupted", 4642, 406.7, True,
                                                          time_split=split))  # fmt: skip
    expected = {"stage": "reference", "run": "reference", "seconds": 406.7, "step": 4642,
                "status": "interrupted", "time_split": SPLIT}  # fmt: skip
    assert write(calls[1])["launches"] == [expected]
    assert "launches" not in write(calls[0])  # the call under way is the last


def _report_with_a_launch() -> dict:
    state = _finished_report()
    la = state["reference"]["launches"][0]
    state["calls"][0]["allotted_s"] = {"facts": 30.0, "reference": 525.0}
    state["calls"][0]["used_s"] = {"facts": 0.5, "reference": 437.6}
    state["calls"][0]["launches"] = [
        {"stage": "reference", "run": "reference", "seconds": la["seconds"], "step": la["step"],
         "status": "trained", "time_split": {**SPLIT, "total_s": 6.1}},
        {"stage": "frontier_train", "run": "target_kl_5", "seconds": 9.0, "step": None,
         "status": "failed", "time_split": None},
    ]  # fmt: skip
    return state


def test_the_report_says_where_each_launch_s_seconds_went(tmp_path):
    state = _report_with_a_launch()
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(state))
    assert write(load_state(out, smoke=True)) == state  # the records know the new fields
    report = read(Report, state, "report")
    assert unused_s(report.calls[0]) == pytest.approx(29.5 + 87.4)
    md = render_markdown(report)
    assert "| started | command | exit | allotted / used s per stage | unused s |" in md
    assert "| facts 30 / 0, reference 525 / 438 | 117 |" in md
    split = (
        "set-up 68 s, compile 20 s, training steps 283 s, validation 27 s, checkpoint saving "
        "2 s, other 0 s, outside the fit 0 s; first step at 88 s"
    )
    assert f"- call 1, reference `reference`: 7 s, trained: {split}" in md
    assert "- call 1, frontier_train `target_kl_5`: 9 s, failed: no time split (" in md
    (launch,) = [ln for ln in md.splitlines() if ln.startswith("- launch 1:")]
    assert launch.endswith(f", trained; {split}")  # the reference's own launch line


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda la: la["time_split"].update(setup_s=-1.0),
         "'report.calls[0].launches[0].time_split.setup_s' must be a finite number >= 0"),
        (lambda la: la["time_split"].pop("total_s"),
         "'report.calls[0].launches[0].time_split.total_s' must be present"),
        (lambda la: la.update(status="gone"),
         "'report.calls[0].launches[0].status' must be one of trained"),
    ],
    ids=["negative", "missing", "status"],
)  # fmt: skip
def test_a_broken_launch_record_is_one_line(tmp_path, damage, needle):
    state = _report_with_a_launch()
    damage(state["calls"][0]["launches"][0])
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(state))
    with pytest.raises(VatError) as e:
        load_state(out, smoke=True)
    assert needle in str(e.value) and "\n" not in str(e.value)
