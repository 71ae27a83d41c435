"""bench/gpu_suite/: the budget, the choice of the best run, the targets, the sizing of the
reference and the frontier, the one-line errors, and the whole suite in --smoke mode on CPU
(two calls: resume; made once, gpu_suite_fixtures.smoke_suite, and read by the tests
below, which continue it on another machine). The rehearsal's findings are in
tests/test_gpu_suite_rehearsal.py."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import signal
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch
import yaml

from vat.errors import VatError
from vat.feature_spec import DEFAULT_EXPORT_SPEC

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: from the checkout

import gpu_suite_fixtures
from gpu_suite_fixtures import returned_files
from helpers import add_main, load_file_module

from bench.gpu_suite.__main__ import main
from bench.gpu_suite.call import OUT_FILES
from bench.gpu_suite.frontier_eval import measured, pick_best
from bench.gpu_suite.frontier_train import (
    check_frontier_files,
    frontier_size,
    run_name,
    train_cmd,
)
from bench.gpu_suite.plan import gpu_plan, smoke_plan
from bench.gpu_suite.records import (
    Artefact,
    CallRecord,
    Evaluation,
    Export,
    Facts,
    FrontierRun,
    Launch,
    Profile,
    Report,
    ThroughputRow,
    VariantRecord,
)
from bench.gpu_suite.reference import reference_budget
from bench.gpu_suite.reference import train_cmd as reference_cmd
from bench.gpu_suite.report import render_markdown
from bench.gpu_suite.runs import checkpoint_step
from bench.gpu_suite.schema import read, write
from bench.gpu_suite.state import STAGES, Budget, Suite, load_state, new_state
from bench.gpu_suite.throughput import (
    SMOKE_PROFILE_STEPS,
    compile_diagnosis,
    judge_targets,
    profile_record,
    throughput_rows,
    variant_cmd,
)

ROOT = Path(__file__).resolve().parents[1]
smoke_suite = gpu_suite_fixtures.smoke_suite  # the finished smoke run the tests below read
suite_data_dir = gpu_suite_fixtures.suite_data_dir


def _rec(run, bleu, stsb_mean, stsb_prec):
    sts = {
        "mean": {"sts12": 0.4, "stsb": stsb_mean},
        "precision": {"sts12": 0.4, "stsb": stsb_prec},
    }
    return read(Evaluation, {**_eval(run, 5.0), "bleu": bleu, "sts": sts}, "record")


def test_pick_best_among_runs_reaching_the_bleu_bar():
    recs = [
        _rec("a", 99.0, 0.40, 0.42),
        _rec("b", 96.0, 0.45, 0.41),  # best STS-B (mean) of the runs with BLEU >= 95
        _rec("c", 80.0, 0.60, 0.30),  # better STS-B, but below the bar
    ]
    best = write(pick_best(recs))
    assert best["best_sts_at_bleu_min"] == {
        "run": "b",
        "bleu": 96.0,
        "stsb": 0.45,
        "pooling": "mean",
    }
    assert best["export"]["best_sts"]["run"] == "b"
    assert best["export"]["best_bleu"]["run"] == "a"
    assert best["verdict"].startswith("b: STS-B 45.00 (mean pooling) at BLEU 96.00")
    assert "of the 2 runs with BLEU >= 95" in best["verdict"]


def test_pick_best_says_when_no_run_reaches_the_bar():
    recs = [_rec("a", 90.0, 0.40, 0.47), _rec("c", 80.0, 0.60, 0.30)]
    best = write(pick_best(recs))
    assert best["best_sts_at_bleu_min"] is None
    assert best["verdict"] == "no run reached BLEU 95 (best BLEU 90.00, a)"
    assert best["export"]["best_sts"]["run"] == "c"  # best STS-B of all, and it says so
    assert "none reached" in best["export"]["best_sts"]["why"]
    assert pick_best([]).best_sts_at_bleu_min is None


def test_budget_allots_share_less_reserve():
    t = [100.0]
    b = Budget(10, clock=lambda: t[0])  # 600 s
    assert b.allot(share_left=420, reserve=150) == 420
    t[0] += 300  # 300 s left
    assert b.allot(share_left=420, reserve=150) == 150
    t[0] += 400
    assert b.left() == -100 and b.allot(420, 0) == 0


def _row(variant, vocab, loop, tok, compile_=False, ratio=None, recompiles=(0,), reasons=()):
    return read(ThroughputRow, {
        "variant": variant,
        "vocab": vocab,
        "compile": compile_,
        "fused_cross_entropy": False,
        "loop": loop,
        "tokens_per_s": tok,
        "vat_over_plain": ratio,
        "mfu": None,
        "hours_for_3e9_tokens": 3e9 / tok / 3600,
        "recompiles": list(recompiles),
        "compiled_graphs": [2],
        "first_recompile_reasons": list(reasons),
    }, "row")  # fmt: skip


def test_targets_and_compile_diagnosis():
    rows = [
        _row("8k_compiled", 8192, "vat", 1_250_000, True, ratio=0.96),
        _row("8k_compiled", 8192, "plain", 1_300_000, True),
        _row("32k_eager", 32768, "vat", 500_000, ratio=0.9),
        _row("32k_compiled", 32768, "vat", 54_000, True, 0.5, (3,), ["size mismatch at index 1"]),
    ]
    t = write(judge_targets(rows))
    assert t["tokens_per_s_8k"] == {
        "target": 1_200_000,
        "measured": 1_250_000,
        "variant": "8k_compiled",
        "reached": True,
    }
    assert t["vat_over_plain"]["reached"] is True
    assert t["tokens_per_s_32k"]["measured"] == 500_000 and not t["tokens_per_s_32k"]["reached"]
    assert t["hours_for_3e9_tokens"]["measured"] == pytest.approx(3e9 / 1.25e6 / 3600)
    assert t["hours_for_3e9_tokens"]["reached"] is True  # 0.67 h <= 1 h
    diag = compile_diagnosis(rows)
    assert len(diag) == 1 and diag[0].startswith("32k_compiled: compiled vat 54,000 tokens/s")
    assert "< eager 500,000, 3 recompiles" in diag[0] and "size mismatch at index 1" in diag[0]
    assert judge_targets([])["tokens_per_s_8k"].reached is None


def _measured(state, tok_s, per_step=60_000):
    """The 8k compiled variant measured at `tok_s` (vat's loop), `per_step` tokens a step."""
    loop = {"tokens_per_s": tok_s, "mfu": None, "hours_for_3e9_tokens": 3e9 / tok_s / 3600}
    voc = {"vocab_size": 8192, "compile": True, "fused_cross_entropy": False,
           "timed_nonpad_tokens": 100 * per_step, "ratio_vat_over_plain": 1.0, "vat": loop,
           "plain": loop}  # fmt: skip
    variant = {"status": "done", "result": {"timed_steps": 100, "vocabs": [voc]}}
    state.throughput.variants["8k_compiled"] = read(VariantRecord, variant, "variant")


def test_throughput_profile_record_fits_the_schema():
    """What the variant's bench wrote becomes report.throughput.profile: a profile, an error,
    or nothing when the child was stopped in it (its timed figures stand)."""
    loop = {
        "steps": 10, "wall_ms_per_step": 105.0, "device_ms_per_step": 70.0,
        "syncs_per_step": 0.1, "sync_sites": {"vat/train/state.py:77": 0.1},
        "cuda_sync_calls_per_step": {"cudaStreamSynchronize": 0.1}, "aten_calls_per_step": 4000.0,
        "top_ops": [{"op": "aten::mm", "calls_per_step": 60.0, "device_ms_per_step": 20.0,
                     "cpu_ms_per_step": 1.5}],
    }  # fmt: skip
    profiled = {"warmup_steps": 3, "steps": 10, "sync_debug_mode": True, "log_every_n_steps": 50}
    done = write(profile_record("8k_eager", {**profiled, "vat": loop, "plain": loop}))
    assert done["status"] == "done" and done["vat"] == loop
    assert write(profile_record("8k_eager", {"error": "RuntimeError: x"})) == {
        "status": "failed", "variant": "8k_eager", "note": "RuntimeError: x"}  # fmt: skip
    stopped = write(profile_record("8k_eager", None))
    assert stopped["status"] == "stopped" and "figures stand" in stopped["note"]
    for record in (done, stopped, write(profile_record("8k_eager", {"error": "x"}))):
        assert write(read(Profile, record, "report.throughput.profile")) == record


def test_frontier_size_from_the_measured_throughput():
    """As many runs as get >= 75M tokens each (at least two), the targets in the plan's
    order, the steps filling the training time (plan.py's arithmetic)."""
    plan = gpu_plan()
    state = new_state(smoke=False)
    no_tp = "default (no 8k throughput measured)"
    assert frontier_size(state, plan, 190, None) == ([10.0, 20.0, 40.0], 1500, no_tp)
    assert frontier_size(state, plan, 190, 123)[1] == 123
    _measured(state, 1_200_000)
    # 0.8 x 1.2M tokens/s x 190 s = 182.4M tokens: 2 runs of 91.2M = 1,520 steps of 60,000
    values, steps, why = frontier_size(state, plan, 190, None)
    assert (values, steps) == ([10.0, 40.0], 1520)
    assert why.startswith("8k_compiled: 1,200,000 tokens/s x 0.8 (the runs share the GPU) x 190")
    assert "182.4M tokens; 2 runs (>= 75.0M tokens each, at least 2)" in why
    _measured(state, 1_500_000)  # 228M: 3 runs of 76M
    assert frontier_size(state, plan, 190, None)[:2] == ([10.0, 20.0, 40.0], 1266)
    _measured(state, 600_000)  # 91M: still two runs (a frontier), of 45.6M each
    assert frontier_size(state, plan, 190, None)[:2] == ([10.0, 40.0], 760)


def test_reference_budget_is_the_floor_or_the_time_share():
    plan = gpu_plan()
    state = new_state(smoke=False)
    b = reference_budget(state, plan)
    assert (b.steps, b.tokens, b.basis) == (9_400, None, "default")
    # the share trains at 1.2M tokens/s x (720 - 2 x 60 - 45 - 30 - 20) s = 606M >= 600M
    _measured(state, 1_200_000)
    b = reference_budget(state, plan)
    assert (b.steps, b.tokens, b.basis) == (10_000, 600_000_000, "floor")
    assert b.why.startswith("600.0M non-pad tokens = the 600.0M-token floor")
    _measured(state, 950_000)  # 950k x 505 s = 479.75M: the time share
    b = reference_budget(state, plan)
    assert (b.steps, b.tokens, b.basis) == (7_996, 479_750_000, "time_share")
    assert "the stage's time share (less than the 600.0M-token floor)" in b.why


def test_one_line_errors(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--smoke", "--stages", "facts,bogus", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --stages: unknown bogus; choose from facts, throughput, reference, "
        "frontier_train, frontier_eval, artefacts"
    ]
    assert main(["--smoke", "--budget-min", "0", str(out)]) == 2
    assert "--budget-min must be a positive" in capsys.readouterr().err
    empty = tmp_path / "nodata"
    empty.mkdir()
    assert main(["--smoke", "--data-dir", str(empty), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--data-dir {empty}: corpus/wmt_newstest_en/" in err[0]
    assert "offline_bundle.sh --install" in err[0]
    if not torch.cuda.is_available():
        assert main([str(out)]) == 2
        assert capsys.readouterr().err.startswith("error: no CUDA device here")
    assert not out.exists()  # nothing written on a bad call
    (tmp_path / "f").write_text("x")
    assert main(["--smoke", str(tmp_path / "f")]) == 2
    assert "is a file, expected a folder" in capsys.readouterr().err


def test_a_budget_too_small_skips_every_stage_with_a_note(tmp_path, data_dir, capsys):
    out = tmp_path / "out"
    argv = ["--smoke", "--data-dir", str(data_dir), "--budget-min", "0.0001", str(out)]
    assert main(argv) == 0
    rep = json.loads((out / "gpu_report.json").read_text())
    assert {s["status"] for s in rep["stages"].values()} == {"skipped"}
    assert all("skipped: needs at least" in s["notes"][-1] for s in rep["stages"].values())
    # a smoke OUT_DIR is not continued by a GPU call, nor the reverse
    with pytest.raises(VatError, match="holds a smoke report"):
        load_state(out, smoke=False)


def _schema(obj, depth=2):
    """The keys of a report down to `depth` levels (values of dicts keyed by run excluded)."""
    if not isinstance(obj, dict) or depth == 0:
        return type(obj).__name__
    return {k: _schema(v, depth - 1) for k, v in obj.items() if k not in ("runs", "variants")}


@pytest.mark.slow
def test_smoke_suite_two_calls_resume_and_report(smoke_suite, tmp_path):
    """bench/gpu_suite.sh --smoke (gpu_suite_fixtures.smoke_suite): facts and throughput in a
    first call, the rest in a second one on the same OUT_DIR (the finished stages are not run
    again); the report's schema, the reference model (budget, scores, export), the frontier
    records (the two targets train apart), the best run, the exported folders, every stage
    within its allotment, and the OUT_DIR limits."""
    out, first, rep = smoke_suite.out, smoke_suite.first, smoke_suite.rep
    assert smoke_suite.exits == [0, 0]
    assert first["stages"]["facts"]["status"] == "done"
    assert first["stages"]["frontier_train"]["status"] == "pending"
    assert write(load_state(out, smoke=True)) == rep  # every field as its type says

    assert _schema(rep) == _schema(write(new_state(smoke=False))) | {
        "facts": _schema(rep["facts"], 1),
        "throughput": _schema(rep["throughput"], 1),
        "reference": _schema(rep["reference"], 1),
        "frontier": _schema(rep["frontier"], 1),
        "artefacts": _schema(rep["artefacts"], 1),
    }
    assert set(rep["reference"]) == set(write(new_state(smoke=True))["reference"])
    assert set(rep["facts"]) >= {"device", "torch", "cuda", "bf16_matmul_tflops"}
    assert rep["facts"]["bf16_matmul_tflops"] > 0
    assert len(rep["calls"]) == 2 and [c["exit"] for c in rep["calls"]] == [0, 0]
    assert [c["command"].split()[-1] for c in rep["calls"]] == [str(out)] * 2  # the call's own
    assert {n: s["status"] for n, s in rep["stages"].items()} == dict.fromkeys(STAGES, "done")
    for c in rep["calls"]:  # every stage ended within what its call allotted it
        assert set(c["used_s"]) == set(c["allotted_s"])
        assert all(c["used_s"][s] <= c["allotted_s"][s] for s in c["used_s"]), c
    assert set(rep["calls"][1]["allotted_s"]) == set(STAGES) - {"facts", "throughput"}
    assert rep["stages"]["facts"] == first["stages"]["facts"]  # not run again
    assert rep["throughput"]["variants"] == first["throughput"]["variants"]

    rows = rep["throughput"]["rows"]
    assert {(r["loop"], r["vocab"]) for r in rows} == {("vat", 320), ("plain", 320)}
    assert all(r["tokens_per_s"] > 0 and r["hours_for_3e9_tokens"] > 0 for r in rows)
    vat_row = next(r for r in rows if r["loop"] == "vat")
    plain_row = next(r for r in rows if r["loop"] == "plain")
    assert vat_row["vat_over_plain"] == pytest.approx(
        vat_row["tokens_per_s"] / plain_row["tokens_per_s"], rel=1e-3
    )
    assert rep["throughput"]["targets"]["tokens_per_s_8k"]["measured"] is None  # no 8k in smoke
    # the first eager variant profiled both loops (on CPU: no device time, no sync mode)
    prof = rep["throughput"]["profile"]
    assert prof["status"] == "done" and prof["variant"] == "smoke_eager"
    assert prof["steps"] == SMOKE_PROFILE_STEPS == 1
    for loop in ("vat", "plain"):
        assert prof[loop]["steps"] == 1 and prof[loop]["wall_ms_per_step"] > 0
        assert prof[loop]["syncs_per_step"] is None and prof[loop]["top_ops"]
    assert "profile" not in rep["throughput"]["variants"]["smoke_eager"]["result"]["vocabs"][0]

    ref = rep["reference"]
    assert ref["basis"] == "floor" and ref["tokens"] == ref["floor_tokens"] == 6_000
    per_step = rep["throughput"]["variants"]["smoke_eager"]["result"]
    per_step = per_step["vocabs"][0]["timed_nonpad_tokens"] / per_step["timed_steps"]
    assert ref["steps"] == -(-6_000 // per_step)  # the floor's tokens in whole steps
    assert ref["trained"] and [la["status"] for la in ref["launches"]] == ["trained"]
    e = ref["eval"]
    assert e["run"] == "reference" and e["step"] == ref["steps"] and e["bleu_lines"] == 24
    assert set(e["sts"]) == {"mean", "precision"} and set(e["extra_sts"]) == {"default_spec"}
    default = e["extra_sts"]["default_spec"]
    assert -1 <= default["sts12"] <= 1 and -1 <= default["stsb"] <= 1
    assert ref["bleu_reached"] is (e["bleu"] >= 95) and ref["bleu_reached"] is False
    a = ref["export"]
    folder = out.resolve() / "work" / "export" / "wmt-tatoeba-en-d16"
    assert a["folder"] == str(folder) and (folder / "model.safetensors").is_file()
    add = "python scripts/add_pretrained.py"
    assert a["registry_command"] == f"{add} {folder} --name wmt-tatoeba-en-d16"
    card = (folder / "README.md").read_text()
    assert "## Measured by vat's GPU suite" in card and f"{e['bleu']:.2f}" in card
    assert "STSBenchmark" in card  # vat export --evaluate: the folder's own STS on its card
    with tarfile.open(out / "reference.tar") as tf:
        assert tf.getnames()[0] == "wmt-tatoeba-en-d16"

    fr = rep["frontier"]
    assert fr["values"] == [5.0, 20.0] and fr["steps"] == 8
    recs = [fr["runs"][n]["eval"] for n in ("target_kl_5.0", "target_kl_20.0")]
    for r, v in zip(recs, (5.0, 20.0)):
        assert r["target_kl"] == v and r["step"] == 8
        assert r["val_kl"] > 0 and r["val_nll"] > 0 and 0 <= r["active_units"] <= 16
        assert r["bleu_lines"] == 24 and r["lines_long"] + 0 >= 0
        for pooling in ("mean", "precision"):
            assert set(r["sts"][pooling]) == {"sts12", "stsb"}
            assert all(-1 <= x <= 1 for x in r["sts"][pooling].values())
        if r["run"] == rep["frontier"]["best"]["export"]["best_sts"]["run"]:
            # the extra specs: the default export spec and compare's best spec, on the best-STS run
            extra = r["extra_sts"]
            assert set(extra) == {"default_spec", "best_spec"}
            assert extra["default_spec"]["options"] == ["--features", DEFAULT_EXPORT_SPEC]
            assert all(-1 <= x[k] <= 1 for x in extra.values() for k in ("sts12", "stsb"))
        else:
            assert r["extra_sts"] == {}
        run_cfg = yaml.safe_load((out / "work" / "frontier" / r["run"] / "config.yaml").read_text())
        assert run_cfg["model"]["loss"]["target_kl"] == v  # each run trained at its own target
        assert run_cfg["model"]["loss"]["free_bits"] == 0.0
    assert fr["best"] == write(pick_best([read(Evaluation, r, "record") for r in recs]))
    # the target reaches the training: the same seed and data, and the lower target ends at
    # a lower rate and a worse reconstruction (the rehearsal's two runs were identical)
    assert recs[0]["val_kl"] < recs[1]["val_kl"] - 1.0 and recs[0]["val_nll"] > recs[1]["val_nll"]

    files = sorted(p.name for p in out.iterdir() if p.is_file())
    # the reference trained in this call: its checkpoint travels back too
    parts = [p["name"] for p in ref["checkpoint_parts"]["parts"]]
    assert files == sorted([*OUT_FILES, *parts]) and len(files) <= 8
    assert all((out / f).stat().st_size <= 16 * 2**20 for f in files)
    md = (out / "gpu_report.md").read_text()
    assert "| target_kl_5.0 | 5 | 8 |" in md and fr["best"]["verdict"] in md
    assert "6,000 non-pad tokens: the 6,000-token floor" in md
    assert "BLEU >= 95 on newstest2019: **not reached**" in md and a["registry_command"] in md
    for kind in ("best_sts", "best_bleu"):
        with tarfile.open(out / f"{kind}.tar") as tf:
            tf.extractall(tmp_path / kind, filter="data")
        folder = tmp_path / kind / rep["artefacts"][kind]["folder_in_tar"]
        assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    import vat

    feats = vat.load(str(folder)).encode(["A man plays a guitar."])
    assert tuple(feats.shape) == (1, 16)
    # the runs' TensorBoard curves travel back in the logs (the run folders stay behind)
    with tarfile.open(out / "logs.tar.gz") as tf:
        curves = {Path(n).parent.as_posix() for n in tf.getnames() if "tfevents" in n}
    assert curves == {"logs/tensorboard/reference"} | {
        f"logs/tensorboard/frontier/{r}" for r in fr["runs"]
    }


@pytest.mark.slow
def test_smoke_suite_continues_on_another_machine(smoke_suite, tmp_path, monkeypatch, vat_children):
    """The next call, on another machine, continues the reference instead of restarting it.
    Seeded with only the files the smoke run returned (what --copy-to copies), in another
    OUT_DIR, the data folder at another path and the smoke run's model shipped under the
    reference's name (its one-line registry command, which keeps the suite's measurements on
    the shipped card): it resumes the reference exactly (the same weights and tokens as one
    uninterrupted run of both calls' steps), adds its tokens and says so, compares its BLEU
    with the shipped model's, and returns its checkpoint within the limits. (With the part
    damaged: test_one_launch_stopped_for_time_is_evaluated_and_exported.)

    The call is bench/gpu_suite.sh's three steps in this process: --copy-to's check
    (out_files.py check), the suite (__main__.main), the copy (out_files.py copy); the
    wrapper's own run of them is tests/test_gpu_suite_rehearsal.py's."""
    from bench.gpu_suite import out_files, reference
    from bench.gpu_suite.plan import make_plan
    from vat.cli.train import vat_train
    from vat.share.checkpoint import read_checkpoint

    out, data_dir = smoke_suite.out, smoke_suite.data_dir
    ref1 = smoke_suite.rep["reference"]
    folder, e = Path(ref1["export"]["folder"]), ref1["eval"]
    # the one-line registry command works, and the shipped card keeps the suite's measurements
    registry = tmp_path / "registry"
    name = "wmt-tatoeba-en-d16"
    argv = [str(folder), "--name", name, "--registry", str(registry)]
    assert add_main(argv) == 0
    shipped_card = (registry / name / "README.md").read_text()
    assert "## Measured by vat's GPU suite" in shipped_card and f"{e['bleu']:.2f}" in shipped_card

    back = returned_files(out, tmp_path / "back")  # what --copy-to returned: OUT_DIR's files
    assert json.loads((back / "gpu_report.json").read_text())["reference"] == ref1
    n1, t1 = ref1["eval"]["step"], ref1["tokens_total"]
    assert ref1["checkpoint_parts"]["step"] == n1 and t1 == ref1["launches"][-1]["tokens_total"]
    assert ref1["device"] == {"device": "CPU", "torch": torch.__version__,
                              "cuda": torch.version.cuda}  # fmt: skip
    # the data folder elsewhere there: a folder of its own whose contents link to the data
    node_data = tmp_path / "node" / "data"
    node_data.mkdir(parents=True)
    for sub in ("corpus", "senteval"):
        (node_data / sub).symlink_to((data_dir / sub).resolve())
    monkeypatch.setenv("VAT_SHIPPED_DIR", str(registry))
    out2, back2 = tmp_path / "node" / "runs" / "gpu", tmp_path / "back2"
    plan = make_plan("short", smoke=True)
    # one launch, its steps a ceiling counted on from round 1's: the floor's tokens
    n2 = reference.reference_budget(load_state(out, smoke=True), plan, one=True, base=n1).steps
    n2 -= n1
    assert out_files.main(["check", str(back2)]) == 0
    argv = ["--data-dir", str(node_data), "--seed", str(back), "--smoke", "--plan", "short"]
    rc = main([*argv, "--stages", "reference", str(out2)])
    assert rc == 0
    assert out_files.main(["copy", str(out2), str(back2), str(rc), ""]) == 0
    rep2 = json.loads((back2 / "gpu_report.json").read_text())
    ref2, md2 = rep2["reference"], (back2 / "gpu_report.md").read_text()
    assert md2.rstrip().splitlines()[-1].startswith("**This call: exit 0**")  # the copy's line
    launch = ref2["launches"][-1]
    said = f"resumed exactly from step {n1:,} (the checkpoint an earlier call returned, joined"
    assert launch["how"] == "resumed" and launch["start"].startswith(said) and said in md2
    assert ref2["round"] == 2 and ref2["rounds"] == [
        {"round": 1, "step": n1, "tokens_total": t1, "bleu": ref1["eval"]["bleu"],
         "ended": ref2["rounds"][0]["ended"]}
    ]  # fmt: skip
    assert launch["steps"] == n2 > 0 and ref2["eval"]["step"] == launch["step"] == n1 + n2
    ckpt = read_checkpoint(out2 / "work" / "reference" / "checkpoints" / "last.ckpt")
    tokens = ckpt["vat"]["training"]["tokens_seen"]
    assert ref2["tokens_total"] == tokens > t1
    assert f"**{tokens:,} non-pad tokens behind the model**" in md2
    # the BLEU it must beat: the shipped model's, the first call's export (24 lines each)
    a, old, new = ref2["export"], round(ref1["eval"]["bleu"], 2), ref2["eval"]["bleu"]
    assert a["shipped_bleu"] == old and a["compare"] in md2
    if round(new, 2) > old:
        assert a["registry_command"].endswith("--name wmt-tatoeba-en-d16 --overwrite")
    else:
        assert a["registry_command"] is None and a["compare"].endswith("the shipped model stays")
    card = json.loads((Path(a["folder"]) / "config.json").read_text())["measurements"][0]["text"]
    assert f"on CPU, torch {torch.__version__}, CUDA " in card and f"{tokens:,} non-pad" in card
    # what comes back: this call's checkpoint parts too, within 8 files of at most 16 MiB
    returned = {f.name: f.stat().st_size for f in back2.iterdir()}
    assert {p["name"] for p in ref2["checkpoint_parts"]["parts"]} <= set(returned)
    assert len(returned) <= 8 and max(returned.values()) <= 16 * 2**20

    # the exact resume: one run of n1 + n2 steps, uninterrupted, from the same config on this
    # machine (in this process: it is the yardstick here, not the subject), has the same
    # weights and tokens
    alone = tmp_path / "uninterrupted"
    cmd = reference.train_cmd(out2 / "work" / "reference_config.yaml", alone, n1 + n2)
    assert cmd[1:4] == ["-m", "vat", "train"]
    monkeypatch.chdir(out2 / "work")  # where the suite starts it: its data paths are relative
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = vat_train(cmd[4:])  # `python -m vat train ARGS`' entry point
    assert code == 0, err.getvalue()[-2000:]
    whole = read_checkpoint(alone / "checkpoints" / "last.ckpt")
    assert whole["global_step"] == ckpt["global_step"] == n1 + n2
    assert whole["vat"]["training"]["tokens_seen"] == tokens
    assert all(torch.equal(whole["state_dict"][k], v) for k, v in ckpt["state_dict"].items())


class StopAfterFirstStep:
    """A clock for bench.gpu_suite.runs (its `time` module): the real one, except that once
    the launch's log says it made its first optimizer step (`vat train`'s own line) and
    `after_s` more seconds have passed, one reading of monotonic() lies past any deadline.
    runs.train then stops the launch as at the end of its stage's time (SIGINT: it saves its
    state), a step or more into it however long its process took to start, instead of
    after a fixed wait sized for the slowest start. Everything after the stop (the
    evaluation, the export, their clock) runs as it would."""

    LINE = b"vat: first optimizer step"

    def __init__(self, log: Path, after_s: float = 1.0) -> None:
        self.log, self.after_s = log, after_s
        self.seen: float | None = None
        self.fired = False
        self.time, self.sleep = time.time, time.sleep

    def monotonic(self) -> float:
        now = time.monotonic()
        if self.fired:
            return now
        if self.seen is None and self.log.is_file() and self.LINE in self.log.read_bytes():
            self.seen = now
        if self.seen is not None and now >= self.seen + self.after_s:
            self.fired = True
            return now + 1e9
        return now


@pytest.mark.slow
def test_one_launch_stopped_for_time_is_evaluated_and_exported(
    smoke_suite, tmp_path, monkeypatch, vat_children
):
    """A call on a fresh node seeded with what the smoke run returned, its checkpoint's part
    damaged on the way: the reference continues from the returned reference.tar's weights
    (said; `vat train --init-from`, the optimizer fresh), its tokens counted on. That launch
    is the short plan's one launch: stopped for time (SIGINT: vat writes last.ckpt at the end
    of the step it was in; an older vat left on_exception.ckpt), it is not left for a later
    launch but evaluated as it stands, on the checkpoint it saved, its tokens read from that
    checkpoint; a call whose time ends before the export leaves it for the next, which does
    not train again. With the part missing instead, the call starts the same way, said so."""
    from bench.gpu_suite import reference, runs
    from bench.gpu_suite.__main__ import seed_out_dir
    from bench.gpu_suite.carry import part_files
    from bench.gpu_suite.plan import make_plan
    from bench.gpu_suite.throughput import measured_throughput
    from vat.share.checkpoint import read_checkpoint

    back = returned_files(smoke_suite.out, tmp_path / "back")
    ref1 = json.loads((back / "gpu_report.json").read_text())["reference"]
    n1, t1 = ref1["eval"]["step"], ref1["tokens_total"]
    (part,) = part_files(back)
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 1
    part.write_bytes(bytes(data))
    out = tmp_path / "node"
    seed_out_dir(out, back, smoke=True)
    plan = make_plan("short", smoke=True)
    assert plan.reference_launches == 1
    plan.reference_min_tokens = 1e9  # the steps' ceiling far away: only the time stops it
    suite = Suite(out, plan, smoke_suite.data_dir, Budget(5), None)
    suite.write_config()
    assert reference.begin_round(suite)  # what a call that names --stages reference does
    monkeypatch.setattr(runs, "time", StopAfterFirstStep(suite.logs / "train_reference.log"))
    first = reference.run(suite, 300.0)  # the smoke share; the clock above stops it sooner
    ref = suite.state.reference
    # a slow machine may leave the evaluation or the export to the next call, never training
    assert first == "done" or (first == "partial" and ref.trained)
    assert len(ref.launches) == 2  # round 1's, and this one
    launch = ref.launches[-1]
    said = "continued from the weights of reference.tar (wmt-tatoeba-en-d16, "
    assert launch.how == "init_from" and launch.start.startswith(said)
    assert launch.start.endswith("(optimizer fresh)") and said in render_markdown(suite.state)
    damaged = "cannot be resumed: reference.ckpt.part1 fails its SHA-256 check"
    assert any(damaged in n for n in suite.state.stages["reference"].notes)
    ceiling = math.ceil(1e9 / measured_throughput(suite.state, plan)[2])
    assert launch.status == "interrupted" and 0 < launch.step < ref.steps == ceiling
    assert ref.trained and ref.basis == "time"
    if first == "partial":
        assert reference.run(suite, 60.0) == "done"
    trained = read_checkpoint(out / "work" / "reference" / "checkpoints" / "last.ckpt")
    record = trained["vat"]["training"]
    assert trained["global_step"] == launch.steps == launch.step == ref.eval.step  # a fresh run
    assert ref.tokens == record["tokens_seen"] > 0
    assert record["init_from"]["global_step"] == n1 and record["init_from"]["tokens_total"] == t1
    assert ref.tokens_total == record["tokens_total"] == record["tokens_seen"] + t1
    assert suite.parts_written and ref.checkpoint_parts.step == trained["global_step"]
    assert launch.logged_tokens_per_s is None or launch.logged_tokens_per_s > 0
    assert any("stopped for time at step" in n for n in suite.state.stages["reference"].notes)
    assert (out / "reference.tar").is_file()
    ref.export = None  # a call that ran out of time before the export: the next exports
    (out / "reference.tar").unlink()
    assert reference.run(suite, 60.0) == "done"
    assert len(ref.launches) == 2 and (out / "reference.tar").is_file()  # no further launch
    assert f"at most {ceiling:,} steps" in render_markdown(suite.state)

    # the part left behind: the same start, said so
    part.unlink()
    seed_out_dir(tmp_path / "node2", back, smoke=True)
    suite = Suite(tmp_path / "node2", plan, smoke_suite.data_dir, Budget(5), None)
    suite.write_config()
    assert reference.begin_round(suite)
    start = reference.choose_start(suite, suite.work / "reference")
    assert start.how == "init_from" and start.text.startswith(said)
    missing = "cannot be resumed: reference.ckpt.part1 is missing"
    assert missing in suite.state.stages["reference"].notes[-1]


@pytest.mark.slow
def test_runs_killed_before_their_first_checkpoint_start_afresh_and_finished_runs_stay(
    smoke_suite, tmp_path, vat_children
):
    """Run 5.0 is killed (SIGKILL, as by the OOM killer) after vat wrote its run folder and
    before its first checkpoint: `--ckpt_path last` refuses such a folder, so every later
    call failed. Run 20.0 reached its last step but the suite never recorded it (stopped
    in its last seconds): it was counted as interrupted and relaunched. Now the first starts
    afresh and the second is found finished and not launched.

    The kill is the smoke run's (gpu_suite_fixtures._make_smoke_run: its second call found
    the killed folder); the finished runs are the smoke run's two frontier runs, copied into
    a fresh OUT_DIR without the marks the suite writes after a run."""
    k = smoke_suite.killed
    assert k["folder_written"] and k["returncode"] == -signal.SIGKILL
    assert k["step"] is None and k["config_yaml"]  # a folder, no checkpoint: then the call
    killed = smoke_suite.out / "work" / "frontier" / "target_kl_5.0"
    rep = smoke_suite.rep
    assert rep["stages"]["frontier_train"]["status"] == "done"
    assert checkpoint_step(killed) == 8 and (killed / ".trained").is_file()
    notes = rep["stages"]["frontier_train"]["notes"]
    assert any("target_kl_5.0: no checkpoint from its earlier start" in n for n in notes)

    out = tmp_path / "out"
    suite = Suite(out, smoke_plan(), smoke_suite.data_dir, Budget(5), 8)
    suite.save()  # a call saves its report before it writes work/ (the suite's own OUT_DIR)
    suite.write_config()
    runs = out / "work" / "frontier"
    suite_wrote = (".trained", "suite_eval.json", "bleu_*.json", "sts_*.json", "feature_compare")
    for run in ("target_kl_5.0", "target_kl_20.0"):
        shutil.copytree(smoke_suite.out / "work" / "frontier" / run, runs / run,
                        ignore=shutil.ignore_patterns(*suite_wrote))  # fmt: skip
        assert checkpoint_step(runs / run) == 8 and not (runs / run / ".trained").exists()

    argv = ["--smoke", "--data-dir", str(smoke_suite.data_dir), "--stages", "frontier_train"]
    assert main([*argv, "--frontier-steps", "8", str(out)]) == 0
    rep = json.loads((out / "gpu_report.json").read_text())
    assert rep["stages"]["frontier_train"]["status"] == "done"
    for run in ("target_kl_5.0", "target_kl_20.0"):
        finished = runs / run
        assert (finished / ".trained").is_file()
        assert not list(finished.glob("config-resume-*.yaml"))  # not launched again
        assert not (out / "work" / "logs" / f"train_{run}.log").exists()
    assert "launches" not in rep["calls"][-1]


def test_a_missing_package_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # find_spec then says: not installed
    assert main(["--smoke", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        "error: Python package 'datasets' is missing (on an offline node install the bundle: "
        "scripts/offline_bundle.sh --install DIR; docs/gpu.md, 'A node without internet')\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_report_carried_to_a_fresh_machine_retrains_only_lost_runs(tmp_path, data_dir):
    """The frontier was trained on a node since released: the runs evaluated there keep
    their records; a run whose checkpoints are gone makes the frontier train again."""
    out = tmp_path / "out"
    state = write(new_state(smoke=True))
    state["stages"]["frontier_train"]["status"] = "done"
    state["stages"]["frontier_eval"]["status"] = "partial"
    state["frontier"].update(values=[5.0, 20.0], steps=4)
    evaluated = _eval("target_kl_5.0", 5.0)
    state["frontier"]["runs"] = {"target_kl_5.0": {"trained": True, "eval": evaluated}}
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(state))
    suite = Suite(out, smoke_plan(), data_dir, Budget(1), None)
    check_frontier_files(suite)
    st = suite.state.stages
    assert st["frontier_train"].status == "pending" and st["frontier_eval"].status == "pending"
    assert (
        st["frontier_train"]
        .notes[-1]
        .endswith("checkpoints of target_kl_20.0 are gone: retraining")
    )
    assert write(suite.state.frontier.runs["target_kl_5.0"].eval) == evaluated
    # with the lost run's checkpoints present, nothing changes
    state["stages"]["frontier_train"]["status"] = "done"
    (out / "gpu_report.json").write_text(json.dumps(state))
    (out / "work" / "frontier" / "target_kl_20.0" / "checkpoints").mkdir(parents=True)
    suite = Suite(out, smoke_plan(), data_dir, Budget(1), None)
    check_frontier_files(suite)
    assert suite.state.stages["frontier_train"].status == "done"


def test_gpu_mode_commands_parse(tmp_path, data_dir, capsys):
    """The GPU-only paths, checked without a GPU: the suite's config points into the data
    folder, every throughput variant's arguments pass the bench's parser, and a frontier
    run's arguments pass vat train's own parser (--print_config)."""
    import contextlib
    import io

    bench = load_file_module(ROOT / "bench" / "bench_train_side_by_side.py", "bench_side_by_side")
    plan = gpu_plan()
    suite = Suite(tmp_path / "out", plan, data_dir, Budget(1), None)
    suite.write_config()
    cfg = yaml.safe_load(suite.config.read_text())
    files = cfg["data"]["train_files"] + cfg["data"]["val_files"]
    assert all(f.startswith(str(data_dir)) for f in files) and "callbacks" not in cfg["trainer"]
    assert (cfg["data"]["vocab_size"], cfg["data"]["max_len"], cfg["model"]["compile"]) == (
        8192,
        256,
        True,
    )
    names = []
    for v in plan.variants:
        cmd = variant_cmd(plan, v, suite.config, 800.0, tmp_path / "v.json")
        a = bench.parse_args(cmd[2:])
        assert (a.device, a.precision, a.vocabs, a.peak_tflops) == (
            "cuda",
            "bf16-mixed",
            str(v.vocab),
            800.0,
        )
        assert (a.compile, a.fused_ce, a.profile_steps) == (v.compile, v.fused_ce, 0)
        names.append((v.vocab, v.compile, v.fused_ce))
    profiled = variant_cmd(plan, plan.variants[1], suite.config, None, tmp_path / "v.json", 10)
    assert bench.parse_args(profiled[2:]).profile_steps == 10
    assert set(names) == {(8192, True, False), (8192, False, False)} | {
        (32768, c, f) for c in (True, False) for f in (True, False)
    }
    from vat.cli.train import vat_train

    def printed_config(cmd):
        assert cmd[1:4] == ["-m", "vat", "train"]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                rc = vat_train([*cmd[4:], "--print_config"])
            except SystemExit as e:  # --print_config exits after printing
                rc = e.code
        assert rc == 0, capsys.readouterr().err
        return yaml.safe_load(out.getvalue())

    printed = printed_config(train_cmd(suite.config, tmp_path / "run", 15.0, 1234))
    assert printed["model"]["loss"]["target_kl"] == 15.0
    assert printed["model"]["loss"]["free_bits"] == 0.0
    assert (
        printed["trainer"]["max_steps"] == 1234 and printed["trainer"]["val_check_interval"] == 1234
    )
    # the reference: configs/reference_gpu.yaml's recipe, the same model and data
    printed = printed_config(reference_cmd(suite.reference_config, tmp_path / "ref", 10_000))
    loss, arch = printed["model"]["loss"], printed["model"]["arch"]
    assert (loss["target_kl"], loss["free_bits"], printed["model"]["compile"]) == (20.0, 0.0, True)
    assert (arch["d_model"], printed["data"]["vocab_size"], printed["data"]["max_tokens"]) == (
        128,
        8192,
        65536,
    )
    assert printed["trainer"]["precision"] == "bf16-mixed"
    assert printed["trainer"]["max_steps"] == 10_000
    assert printed["checkpoint"]["every_n_train_steps"] == 1_000


def _broken(path, *keys, value):
    def damage(state):
        obj = state
        for k in path:
            obj = obj[k]
        obj[keys[0]] = value
        return state

    return damage


BROKEN_REPORTS = {
    "calls a string": (_broken((), "calls", value="x"), "'report.calls' must be a list"),
    "a stage a number": (
        _broken(("stages",), "reference", value=3),
        "'report.stages.reference' must be an object",
    ),
    "a stage without status": (
        lambda s: (s["stages"]["reference"].pop("status"), s)[1],
        "'report.stages.reference.status' must be present",
    ),
    "a status unknown": (
        _broken(("stages", "reference"), "status", value="weird"),
        "'report.stages.reference.status' must be one of pending",
    ),
    "seconds NaN": (
        _broken(("stages", "reference"), "seconds", value=float("nan")),
        "must be a finite number",
    ),
    "seconds text": (
        _broken(("stages", "reference"), "seconds", value="3"),
        "must be a finite number",
    ),
    "trained text": (
        _broken(("reference",), "trained", value="yes"),
        "'report.reference.trained' must be true or false",
    ),
    "a call without start": (
        _broken((), "calls", value=[{"command": "x", "allotted_s": {}, "used_s": {}}]),
        "'report.calls[0].started' must be present",
    ),
}


@pytest.mark.parametrize("case", BROKEN_REPORTS)
def test_a_report_with_broken_fields_is_one_line(tmp_path, case):
    """A gpu_report.json of the right schema whose fields are broken is one line naming the
    file and the field (before: a KeyError or TypeError traceback mid-call)."""
    damage, needle = BROKEN_REPORTS[case]
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(damage(write(new_state(smoke=True)))))
    with pytest.raises(VatError) as e:
        load_state(out, smoke=True)
    assert needle in str(e.value) and str(out / "gpu_report.json") in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
    # the sound report loads
    (out / "gpu_report.json").write_text(json.dumps(write(new_state(smoke=True))))
    assert load_state(out, smoke=True) == new_state(smoke=True)


# -- the fields the stages add: a finished report, then one field broken --------------------
def _eval(run, target_kl, stsb=0.25):
    """A run's evaluation record as frontier_eval.evaluate_run writes it."""
    sts = {"sts12": 0.4, "stsb": stsb}
    return {
        "run": run, "target_kl": target_kl, "step": 8, "checkpoint": f"/x/{run}/last.ckpt",
        "val_kl": 2.3, "val_nll": 5.5, "val_step": 8, "active_units": 8,
        "kl_per_token_probe": 1.9,
        "sts": {"mean": dict(sts), "precision": dict(sts)}, "extra_sts": {}, "bleu": 0.0,
        "bleu_lines": 24, "bleu_short": 0.0, "bleu_long": None, "lines_long": 9,
    }  # fmt: skip


def _finished_report():
    """A smoke report after every stage, as gpu_report.json holds it, made by the suite's
    own functions where it has them (the sizing, the throughput rows and targets, the best
    run)."""
    state = new_state(smoke=True)
    state.calls = [read(CallRecord, {"started": "t", "command": "gpu_suite --smoke out",
                                     "allotted_s": {"facts": 30.0}, "used_s": {"facts": 0.5},
                                     "exit": 0}, "call")]  # fmt: skip
    for st in state.stages.values():
        st.status, st.seconds, st.notes = "done", 5.0, ["[t] done"]
    state.facts = Facts(device="cpu", torch="2", cuda=None, cudnn=None, bf16_matmul_tflops=0.2,
                        bf16_matmul="256x256")  # fmt: skip

    def loop(tok_s):
        return {"tokens_per_s": tok_s, "mfu": 0.02, "hours_for_3e9_tokens": 3e9 / tok_s / 3600,
                "recompiles": [0], "compiled_graphs": [0],
                "first_recompile_reasons": []}  # fmt: skip

    voc = {"vocab_size": 320, "compile": False, "fused_cross_entropy": False,
           "timed_nonpad_tokens": 3630, "ratio_vat_over_plain": 0.5, "vat": loop(5e4),
           "plain": loop(1e5)}  # fmt: skip
    t = state.throughput
    t.variants = {"smoke_eager": read(VariantRecord, {"status": "done", "seconds": 8, "result":
                                      {"timed_steps": 2, "vocabs": [voc]}}, "variant")}  # fmt: skip
    t.rows = throughput_rows(t.variants)
    t.targets, t.compile_diagnosis = judge_targets(t.rows), compile_diagnosis(t.rows)
    ref = state.reference
    reference_budget(state, smoke_plan()).apply(ref)
    ref.launches = [Launch(started="t", seconds=6.6, steps=ref.steps, step=ref.steps,
                           overhead_s=6.5, status="trained")]  # fmt: skip
    ref.trained, ref.bleu_reached = True, False
    ref.eval = read(Evaluation, _eval("reference", 20.0), "eval")
    ref.export = Export(name="m", folder="/x/m", file="reference.tar", folder_in_tar="m",
                        bytes=92160, within_16_mib=True,
                        registry_command="python scripts/add_pretrained.py /x/m --name m",
                        registry_command_from_tar="tar xf reference.tar")  # fmt: skip
    fr = state.frontier
    fr.values, fr.steps, fr.steps_from = [5.0, 20.0], 8, "measured"
    fr.runs = {run_name(v): FrontierRun(seconds=10.0, trained=True, eval=read(
                   Evaluation, _eval(run_name(v), v, stsb=v / 100), "eval"))
               for v in fr.values}  # fmt: skip
    fr.best = pick_best([r.eval for r in fr.runs.values()])
    for kind, b in write(fr.best.export).items():
        state.artefacts[kind] = Artefact(**b, file=f"{kind}.tar", bytes=92160,
                                         folder_in_tar=f"{kind}_{b['run']}",
                                         within_16_mib=True)  # fmt: skip
    return write(state)


BROKEN_STAGE_FIELDS = {
    # (path in the report, value (None: deleted), the field and what it must be)
    "peak text": (("facts", "bf16_matmul_tflops"), "abc",
                  "'report.facts.bf16_matmul_tflops' must be a finite number >= 0"),
    "a finished variant without result": (
        ("throughput", "variants", "smoke_eager", "result"), None,
        "'report.throughput.variants.smoke_eager.result' must be present for a finished"),
    "tokens/s text": (("throughput", "rows", 0, "tokens_per_s"), "x",
                      "'report.throughput.rows[0].tokens_per_s' must be a finite number > 0"),
    "a target reached text": (("throughput", "targets", "vat_over_plain", "reached"), "a",
                              "'report.throughput.targets.vat_over_plain.reached' must be true"),
    "reference steps text": (("reference", "steps"), "4",
                             "'report.reference.steps' must be a whole number >= 1"),
    "reference basis unknown": (("reference", "basis"), "weird",
                                "'report.reference.basis' must be one of floor, time_share"),
    "launch seconds negative": (("reference", "launches", 0, "seconds"), -3.0,
                                "'report.reference.launches[0].seconds' must be a finite "
                                "number >= 0"),
    "a pooling missing": (("reference", "eval", "sts", "mean"), None,
                          "'report.reference.eval.sts.mean' must be present"),
    "BLEU NaN": (("reference", "eval", "bleu"), float("nan"),
                 "'report.reference.eval.bleu' must be a finite number in [0, 100]"),
    "export bytes text": (("reference", "export", "bytes"), "x",
                          "'report.reference.export.bytes' must be a whole number >= 0"),
    "a run's KL text": (("frontier", "runs", "target_kl_5.0", "eval", "val_kl"), "x",
                        "'report.frontier.runs.target_kl_5.0.eval.val_kl' must be a finite "
                        "number >= 0"),
    "a Spearman of 7": (("frontier", "runs", "target_kl_5.0", "eval", "sts", "mean", "stsb"),
                        7, "'report.frontier.runs.target_kl_5.0.eval.sts.mean.stsb' must be "
                        "a finite number in [-1, 1]"),
    "the best an unknown run": (("frontier", "best", "export", "best_sts", "run"), "nope",
                                "'report.frontier.best.export' must be runs the frontier "
                                "evaluated"),
    "a target KL text": (("frontier", "values", 0), "x",
                         "'report.frontier.values[0]' must be a finite number >= 0"),
    "artefact bytes text": (("artefacts", "best_sts", "bytes"), "x",
                            "'report.artefacts.best_sts.bytes' must be a whole number >= 0"),
    "used seconds text": (("calls", 0, "used_s", "facts"), "x",
                          "'report.calls[0].used_s.facts' must be a finite number >= 0"),
}  # fmt: skip


@pytest.mark.parametrize("case", BROKEN_STAGE_FIELDS)
def test_a_report_with_a_broken_stage_field_is_one_line(tmp_path, case):
    """Before, the fields the stages add were not checked: a text where the reference's steps
    are, a run without its mean pooling, a NaN BLEU, a best run that was never evaluated, ...
    loaded, then stopped the next call with a TypeError or KeyError in gpu_report.md, or in
    the stage that read them (or were rendered as if measured). Now each is one line naming
    the file and the field, before any stage runs."""
    path, value, needle = BROKEN_STAGE_FIELDS[case]
    state = _finished_report()
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(state))
    assert write(load_state(out, smoke=True)) == state  # the sound report loads, and renders
    assert "| target_kl_5.0 | 5 | 8 |" in render_markdown(read(Report, state, "report"))
    obj = state
    for key in path[:-1]:
        obj = obj[key]
    if value is None:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    (out / "gpu_report.json").write_text(json.dumps(state))
    with pytest.raises(VatError) as e:
        load_state(out, smoke=True)
    msg = str(e.value)
    assert msg.startswith(f"{out / 'gpu_report.json'}: {needle}"), msg
    assert msg.endswith("; use another OUT_DIR") and "\n" not in msg


def test_a_report_that_is_not_a_file_or_too_deep_is_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    report = out / "gpu_report.json"
    report.mkdir()  # before: IsADirectoryError
    with pytest.raises(VatError, match=r"gpu_report.json is not a file; use another OUT_DIR"):
        load_state(out, smoke=True)
    report.rmdir()
    os.mkfifo(report)  # before: the call blocked reading it
    with pytest.raises(VatError, match=r"gpu_report.json is not a file"):
        load_state(out, smoke=True)
    report.unlink()
    report.write_text("[" * 100_000)  # before: RecursionError
    with pytest.raises(VatError, match=r"gpu_report.json is not a gpu_report.json"):
        load_state(out, smoke=True)


def test_a_score_that_came_out_nan_is_kept_as_null_and_ranked_last(tmp_path):
    """A constant encoder's Spearman is NaN (vat.eval.sts): the suite wrote it into the report
    as NaN, which the next call's check would refuse, and pick_best compared it (or a null)
    with numbers. Now it is recorded as null, ranked below every number, shown as n/a."""
    assert measured(float("nan")) is None and measured(None) is None
    assert measured(0.25) == 0.25 and measured(1) == 1.0
    state = _finished_report()
    flat = _eval("target_kl_5.0", 5.0, stsb=None)
    state["frontier"]["runs"]["target_kl_5.0"]["eval"] = flat

    def best_of(state):
        return pick_best([read(Evaluation, r["eval"], "eval") for r in
                          state["frontier"]["runs"].values()])  # fmt: skip

    assert best_of(state).export.best_sts.run == "target_kl_20.0"  # the run with a number
    flat["bleu"] = 99.0  # the only run at the BLEU bar, its STS-B not a number
    best = best_of(state)
    assert best.verdict.startswith("target_kl_5.0: STS-B n/a (mean pooling) at BLEU 99.00")
    state["frontier"]["best"] = write(best)
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(state))
    assert write(load_state(out, smoke=True)) == state
    md = render_markdown(read(Report, state, "report"))
    assert "| target_kl_5.0 | 5 | 8 | 2.30 | 5.500 | 8 | 99.00 |" in md


def test_a_broken_run_record_fails_its_stage_in_one_line(tmp_path):
    """A run's suite_eval.json (read back by frontier_eval) is checked as the report's
    records are: a text KL was taken into the report, and broke the next call's check."""
    from bench.gpu_suite.frontier_eval import read_record

    rec = tmp_path / "suite_eval.json"
    rec.write_text(json.dumps(_eval("target_kl_5.0", 5.0)))
    assert write(read_record(rec)) == _eval("target_kl_5.0", 5.0)
    rec.write_text(json.dumps({**_eval("target_kl_5.0", 5.0), "val_kl": "x"}))
    with pytest.raises(VatError) as e:
        read_record(rec)
    assert str(e.value) == (
        f"{rec}: 'record.val_kl' must be a finite number >= 0; delete it to evaluate the run again"
    )


# -- the short plan (15 minutes of a GPU allocation): the reference in one launch ------------------
def test_short_plan_runs_the_reference_in_one_launch_and_fits_fifteen_minutes():
    """plan.RECIPE_SHORT: two calls inside the allocation's 15 minutes (start, overheads and the
    gap counted), call 1 inside the 10-minute command limit less the guard, the reference's
    share the whole of call 1, and the 8k eager variant first (it fits call 2)."""
    from bench.gpu_suite.plan import (
        CALL_GUARD_S,
        CALL_LIMIT_S,
        DEVICE_S_SHORT,
        RECIPE_SHORT,
        make_plan,
        recipe_command,
        recipe_device_s,
        short_gpu_plan,
    )

    plan = short_gpu_plan()
    assert plan.reference_launches == 1 and gpu_plan().reference_launches == 2
    assert [v.name for v in plan.variants] == ["8k_eager", "8k_compiled"]
    assert plan.shares_s["reference"] == 60 * RECIPE_SHORT[0].budget_min
    assert recipe_device_s(RECIPE_SHORT) == 120 + 2 * 40 + 60 * (8.75 + 2) + 25 == 870
    assert recipe_device_s(RECIPE_SHORT) <= DEVICE_S_SHORT - 30
    assert 15 + 60 * RECIPE_SHORT[0].budget_min + 10 <= CALL_LIMIT_S - CALL_GUARD_S
    assert RECIPE_SHORT[0].stages == ("reference",)
    assert "--plan short --budget-min 8.75 --stages reference runs/gpu" in recipe_command(
        RECIPE_SHORT[0], "short"
    )
    assert "--plan" not in recipe_command(RECIPE_SHORT[0])
    assert make_plan("short", smoke=True).reference_launches == 1
    assert make_plan("full", smoke=True).reference_launches == 2


def test_one_launch_budget_is_a_ceiling_of_steps():
    """The short plan trains the reference for its time: the steps are only a ceiling (the
    recipe's 9,400, or the 600M-token floor at the measured tokens per step)."""
    from bench.gpu_suite.plan import short_gpu_plan

    plan = short_gpu_plan()
    state = new_state(smoke=False)
    b = reference_budget(state, plan)
    assert (b.steps, b.tokens, b.basis) == (9_400, None, "time")
    _measured(state, 1_200_000)  # 60,000 tokens a step: 600M tokens = 10,000 steps
    b = reference_budget(state, plan)
    assert (b.steps, b.tokens, b.basis) == (10_000, None, "time")
    assert b.why.startswith("one launch trained until the stage's time is spent, at most 10,000")
    every = reference_cmd(Path("c.yaml"), Path("r"), 10_000, one_launch=True)
    assert every[every.index("--trainer.val_check_interval") + 1] == "500"
    once = reference_cmd(Path("c.yaml"), Path("r"), 10_000)
    assert once[once.index("--trainer.val_check_interval") + 1] == "10000"
