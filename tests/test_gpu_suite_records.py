"""The GPU suite's state as types (bench/gpu_suite/records.py, read and written by schema.py):
a report written before the records existed loads, writes back key for key, renders the same
gpu_report.md, and the suite resumes from it.

tests/assets/gpu_suite_report.json and .md are what `bench/gpu_suite.sh --smoke` wrote in two
calls (facts and throughput, then the rest) with the dict-based suite of commit b85818a, the
last before the records: every stage finished, the reference trained in one round, its
checkpoint returned in one part, two frontier runs and their artefacts."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: from the checkout

from bench.gpu_suite.plan import smoke_plan
from bench.gpu_suite.records import Count, Report
from bench.gpu_suite.report import render_markdown
from bench.gpu_suite.schema import Broken, read, write
from bench.gpu_suite.state import STAGES, Budget, Suite, load_state, read_report
from vat.errors import VatError

ASSETS = Path(__file__).resolve().parent / "assets"
REPORT = ASSETS / "gpu_suite_report.json"


def _written() -> dict:
    return json.loads(REPORT.read_text(encoding="utf-8"))


def test_a_report_of_the_dict_based_suite_loads_and_writes_back_unchanged():
    report = read_report(REPORT, smoke=True, fix="use another OUT_DIR")
    assert isinstance(report, Report)
    assert write(report) == _written()  # the same keys and values, nothing added or lost
    assert render_markdown(report) == (ASSETS / "gpu_suite_report.md").read_text("utf-8")
    # typed all the way down: what the stages read
    assert report.reference.eval is not None and report.reference.eval.bleu_lines == 24
    assert report.reference.checkpoint_parts.parts[0].name == "reference.ckpt.part1"
    assert {n: s.status for n, s in report.stages.items()} == dict.fromkeys(STAGES, "done")
    assert report.frontier.best.export.best_sts.run in report.frontier.runs
    assert report.throughput.variants["smoke_eager"].result.vocabs[0].vat.tokens_per_s > 0


def test_keys_a_record_does_not_declare_are_kept():
    """A newer suite's field, or a tool's own (bench_train_side_by_side.py writes many more
    figures than the report reads), passes through as it was."""
    data = _written()
    data["reference"]["a_later_field"] = {"x": [1, 2]}
    data["throughput"]["variants"]["smoke_eager"]["result"]["vocabs"][0]["params"] = 7
    assert write(read(Report, copy.deepcopy(data), "report")) == data


def test_the_suite_resumes_from_that_report(tmp_path, data_dir):
    """A call on an OUT_DIR holding the report: every stage is finished, so none runs again;
    the call is recorded, and the rest of the report is as it was."""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(REPORT, out / "gpu_report.json")
    suite = Suite(out, smoke_plan(), data_dir, Budget(5), None)
    assert suite.run(list(STAGES)) == 0
    after = json.loads((out / "gpu_report.json").read_text(encoding="utf-8"))
    before = _written()
    new_call = after["calls"].pop()
    assert after == before
    assert new_call["exit"] == 0 and new_call["allotted_s"] == {} == new_call["used_s"]
    assert "none ran" in (out / "gpu_report.md").read_text(encoding="utf-8")
    assert load_state(out, smoke=True).calls[-1].exit == 0


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda r: r["stages"].pop("facts"), "'report.stages.facts' must be present"),
        (lambda r: r["calls"][1]["launches"][0].update(step=-1),
         "'report.calls[1].launches[0].step' must be a whole number >= 0"),
        (lambda r: r["reference"]["rounds"].append({"round": 0, "step": 1, "tokens_total": None,
                                                    "bleu": 1.0}),
         "'report.reference.rounds[0].round' must be a whole number >= 1"),
        (lambda r: r["frontier"]["runs"]["target_kl_5.0"].update(eval=None),
         "'report.frontier.runs.target_kl_5.0.eval' must be an object"),
        (lambda r: r["throughput"]["variants"]["smoke_eager"]["result"].update(vocabs=[]),
         "'report.throughput.variants.smoke_eager.result.vocabs' must be a non-empty list"),
    ],
    ids=["a stage missing", "a negative step", "round 0", "a null where a key is left out",
         "no vocabulary"],
)  # fmt: skip
def test_a_damaged_report_is_one_line_naming_the_file_and_the_field(tmp_path, damage, needle):
    data = _written()
    damage(data)
    path = tmp_path / "gpu_report.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(VatError) as e:
        read_report(path, smoke=True, fix="use another OUT_DIR")
    assert str(e.value) == f"{path}: {needle}; use another OUT_DIR"


def test_a_field_type_the_reader_does_not_know_is_a_programming_error():
    """A record declared with a kind of field read() has no rule for fails loudly, not as a
    damaged report; the kinds it knows are checked with their ranges."""
    with pytest.raises(TypeError, match="no reader for"):
        read(set[int], [1], "x")
    with pytest.raises(Broken, match="'x' must be a whole number >= 0"):
        read(Count, -1, "x")
    assert read(Count, 3, "x") == 3
