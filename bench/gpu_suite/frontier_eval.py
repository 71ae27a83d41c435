"""Stage 5, `frontier_eval`: each run: validation KL and NLL, active units (`vat sweep`'s
measure_run), STS12 and STS-B Spearman with mean and precision pooling (`vat evaluate`),
newstest2019 BLEU of greedy mu-decoding with the lines over 63 subwords apart (`vat generate
bleu --long-over 63`). The table and plot give BLEU and STS-B against the rate and name the
best STS-B among runs with BLEU >= 95 (or say that none reached it).

Run by run: each record is kept in the run's folder (suite_eval.json) and in the state, so a
call out of time leaves the rest to the next one. Every step is checked against the clock
first (the first run's evaluation against the plan's estimate, later ones against 1.25 x the
slowest so far, the best run's feature specs against theirs): the stage ends within its
time (the rehearsal's ran the feature specs after its last check, 290 s against 240)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.gpu_suite import schema
from bench.gpu_suite.call import Call
from bench.gpu_suite.frontier_train import TARGET_KL_KEY, run_name
from bench.gpu_suite.in_process import run_vat
from bench.gpu_suite.plan import NEWSTEST2019, Plan
from bench.gpu_suite.records import Best, BestExports, Brief, Evaluation, ExtraSts, FrontierRun, Sts
from vat.errors import VatError
from vat.io import write_json_atomic

BLEU_MIN = 95.0
"""The reconstruction bar: the best STS-B is named among runs at least this good."""
LONG_OVER = 63
"""newstest2019 lines of more than this many subwords are scored apart."""


def run(call: Call, allot: float) -> str:
    fr = call.state.frontier
    runs_dir = call.work / "frontier"
    if not fr.values:
        call.note("frontier_eval", "skipped: the frontier has not been trained")
        return "skipped"
    end = time.monotonic() + allot
    per_run: list[float] = []
    missing = []
    for v in fr.values:
        name = run_name(v)
        rec_path = runs_dir / name / "suite_eval.json"
        if rec_path.is_file():
            fr.runs.setdefault(name, FrontierRun()).eval = read_record(rec_path)
            continue
        if name in fr.runs and fr.runs[name].eval is not None:  # evaluated on an earlier
            continue  # node, whose run folders are gone
        if not (runs_dir / name / ".trained").exists():
            missing.append(name)
            continue
        guess = 1.25 * max(per_run) if per_run else call.plan.eval_run_s
        if end - time.monotonic() < guess:
            call.note("frontier_eval", f"{name}: not evaluated, the stage's time is spent")
            missing.append(name)
            continue
        t0 = time.monotonic()
        record = evaluate_run(runs_dir / name, v, call.config, call.data_dir, call.plan)
        write_json_atomic(rec_path, schema.write(record))
        fr.runs.setdefault(name, FrontierRun()).eval = record
        per_run.append(time.monotonic() - t0)
        call.note("frontier_eval", f"{name}: evaluated in {per_run[-1]:.0f} s")
        call.save()
    records = [r.eval for r in fr.runs.values() if r.eval is not None]
    fr.best = pick_best(records)
    call.save()
    if missing:
        call.note("frontier_eval", f"not yet evaluated: {', '.join(missing)}")
        return "partial"
    best = fr.best.export.best_sts
    rec = fr.runs[best.run].eval if best else None
    if best and rec is not None and not {"default_spec", "best_spec"} <= set(rec.extra_sts):
        left = end - time.monotonic()
        if left < call.plan.extra_eval_s:
            call.note("frontier_eval", f"{best.run}: the feature specs need about "
                      f"{call.plan.extra_eval_s:.0f} s, {max(left, 0):.0f} s left: the next call "
                      "measures them")  # fmt: skip
            return "partial"
        _evaluate_best_extra(call, rec, runs_dir)
    return "done"


def read_record(path: Path) -> Evaluation:
    """A run's suite_eval.json, checked as the report's records are (records.Evaluation): a
    broken one fails the stage with one line, not a traceback in a later one."""
    try:
        return schema.read(Evaluation, json.loads(path.read_text(encoding="utf-8")), "record")
    except (ValueError, RecursionError, schema.Broken) as e:
        raise VatError(f"{path}: {e}; delete it to evaluate the run again") from None


def _evaluate_best_extra(call: Call, rec: Evaluation, runs_dir: Path) -> None:
    """The extra feature specs on the best-STS run (best_run_option_sets)."""
    name = rec.run
    ckpt = Path(rec.checkpoint)
    fit_sentences = 2_000 if call.plan.smoke else 20_000
    option_sets = best_run_option_sets(ckpt, call.data_dir, runs_dir / name, fit_sentences)
    for set_name, opts in option_sets:
        if set_name in rec.extra_sts:
            continue
        out = runs_dir / name / f"sts_extra_{set_name}.json"
        sts = _evaluate_sts(ckpt, call.data_dir, opts, out)
        rec.extra_sts[set_name] = ExtraSts(options=opts, sts12=sts.sts12, stsb=sts.stsb)
        write_json_atomic(runs_dir / name / "suite_eval.json", schema.write(rec))


def sts_option_sets() -> list[tuple[str, list[str]]]:
    """The `vat evaluate` options every frontier run is measured with (STS12 and STS-B)."""
    return [("mean", ["--pooling", "mean"]), ("precision", ["--pooling", "precision"])]


def best_run_option_sets(
    ckpt: Path, data_dir: Path, work: Path, fit_sentences: int
) -> list[tuple[str, list[str]]]:
    """The extra feature specs, evaluated on the frontier's best-STS run: the default spec
    of exported models (vat.feature_spec.DEFAULT_EXPORT_SPEC) and the best spec of
    `vat features compare` on that run (by the mean of STS12's five sets and STS-B dev,
    fitted on the run's own training sentences). Each is (name, [vat evaluate options]); its
    STS12 / STS-B Spearman land in the run's `extra_sts[name]`."""
    from vat.cli.features import main as features_main
    from vat.feature_spec import DEFAULT_EXPORT_SPEC

    out = work / "feature_compare"
    argv = ["compare", "--model", str(ckpt), "--output-dir", str(out), "--overwrite"]
    argv += ["--data-dir", str(data_dir / "senteval"), "--fit-sentences", str(fit_sentences)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_vat(features_main, argv, f"vat features {' '.join(argv)}")
    with open(out / "compare.csv", encoding="utf-8") as f:
        best = next(csv.DictReader(f))["spec"]  # rows are sorted by the selection score
    return [
        ("default_spec", ["--features", DEFAULT_EXPORT_SPEC]),
        ("best_spec", ["--features", best]),
    ]


def _evaluate_sts(ckpt: Path, data_dir: Path, opts: list[str], out: Path) -> Sts:
    from vat.cli.evaluate import main as evaluate_main

    argv = ["--ckpt", str(ckpt), "--tasks", "STS12,STSBenchmark"]
    argv += ["--data-dir", str(data_dir / "senteval"), *opts]
    argv += ["--output", str(out), "--overwrite", "--quiet"]
    with contextlib.redirect_stdout(io.StringIO()):
        run_vat(evaluate_main, argv, f"vat evaluate {' '.join(argv)}")
    res = json.loads(out.read_text(encoding="utf-8"))
    return Sts(
        sts12=measured(res["STS12"]["all"]["spearman"]["mean"]),
        stsb=measured(res["STSBenchmark-cosine"]["test"]["spearman"]),
    )


def measured(x: Any) -> float | None:
    """A measurement as the report keeps it: a float, or None when there is none or it is
    NaN (a Spearman of an encoder that returns one vector for every sentence), so that the
    report stays JSON that the next call accepts (schema.py) and ranks it last."""
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _bleu(ckpt: Path, data_dir: Path, limit: int | None, out: Path) -> dict[str, Any]:
    from vat.cli.generate import main as generate_main

    argv = ["bleu", "--ckpt", str(ckpt), "--input", str(data_dir / NEWSTEST2019)]
    argv += ["--long-over", str(LONG_OVER), "--json", "--output", str(out), "--overwrite"]
    argv += ["--quiet", "--no-progress"] + (["--limit", str(limit)] if limit else [])
    run_vat(generate_main, argv, f"vat generate {' '.join(argv)}")
    return json.loads(out.read_text(encoding="utf-8").strip().splitlines()[-1])


def evaluate_run(
    run_dir: Path, value: float, config: Path, data_dir: Path, plan: Plan
) -> Evaluation:
    """One frontier run's record: losses, active units, STS (each pooling), BLEU."""
    from vat.experiments.config import SweepConfig
    from vat.experiments.measure import measure_run

    cfg = SweepConfig(
        train_config=str(config),
        probe=str(data_dir / "senteval"),  # STS12's sentences: the geometry probe
        probe_max_sentences=plan.probe_max_sentences,
        senteval_dir=None,  # STS through vat evaluate below, with each pooling
        bleu_file=None,  # BLEU through vat generate bleu below, long lines apart
        device="auto",
    )
    rec = measure_run(cfg, {TARGET_KL_KEY: value}, run_dir)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    sts = {
        name: _evaluate_sts(ckpt, data_dir, opts, run_dir / f"sts_{name}.json")
        for name, opts in sts_option_sets()
    }
    b = _bleu(ckpt, data_dir, plan.bleu_limit, run_dir / "bleu_newstest2019.json")
    return Evaluation(
        run=rec["run"],
        target_kl=value,
        step=rec["step"],
        checkpoint=str(ckpt),
        val_kl=measured(rec["val_kl"]),
        val_nll=measured(rec["val_nll"]),
        val_step=rec.get("val_step"),
        active_units=rec["geometry_active_units"],
        kl_per_token_probe=measured(rec["geometry_kl_per_token"]),
        sts=sts,
        extra_sts={},
        bleu=b["bleu"],
        bleu_lines=b["n"],
        bleu_short=measured(b["short"].get("bleu")),
        bleu_long=measured(b["long"].get("bleu")),
        lines_long=b["long"]["n"],
    )


def stsb(record: Evaluation) -> tuple[float | None, str]:
    """A run's best STS-B Spearman over the poolings measured, and that pooling (None when
    none came out a number)."""
    pooling, best = max(record.sts.items(), key=lambda kv: _rank(kv[1].stsb))
    return best.stsb, pooling


def _rank(score: float | None) -> float:
    return -math.inf if score is None else score


def _percent(score: float | None) -> str:
    return "n/a" if score is None else f"{100 * score:.2f}"


def pick_best(records: Sequence[Evaluation], bleu_min: float = BLEU_MIN) -> Best:
    """The frontier's question: the best STS-B among runs with BLEU >= bleu_min (or none), and
    the runs the artefacts stage exports (best STS-B of those, else of all; best BLEU)."""
    if not records:
        return Best(bleu_min=bleu_min, best_sts_at_bleu_min=None, export=BestExports())
    good = [r for r in records if r.bleu >= bleu_min]
    best_good = max(good, key=lambda r: _rank(stsb(r)[0])) if good else None
    best_sts = best_good or max(records, key=lambda r: _rank(stsb(r)[0]))
    best_bleu = max(records, key=lambda r: r.bleu)

    def brief(r: Evaluation, why: str | None = None) -> Brief:
        s, pooling = stsb(r)
        return Brief(run=r.run, bleu=r.bleu, stsb=s, pooling=pooling, why=why)

    if best_good:
        verdict = (
            f"{best_good.run}: STS-B {_percent(stsb(best_good)[0])} ({stsb(best_good)[1]} "
            f"pooling) at BLEU {best_good.bleu:.2f}, the best STS-B of the "
            f"{len(good)} runs with BLEU >= {bleu_min:g}"
        )
    else:
        verdict = (
            f"no run reached BLEU {bleu_min:g} (best BLEU {best_bleu.bleu:.2f}, {best_bleu.run})"
        )
    sts_why = (
        f"best STS-B among BLEU >= {bleu_min:g}"
        if best_good
        else "best STS-B of all runs (none reached the BLEU bar)"
    )
    return Best(
        bleu_min=bleu_min,
        best_sts_at_bleu_min=brief(best_good) if best_good else None,
        verdict=verdict,
        export=BestExports(
            best_sts=brief(best_sts, sts_why),
            best_bleu=brief(best_bleu, "best newstest2019 BLEU"),
        ),
    )
