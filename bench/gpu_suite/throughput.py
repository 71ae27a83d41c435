"""Stage 2, `throughput`: bench/bench_train_side_by_side.py, vat's loop against a plain loop,
bf16, at 8k and 32k vocabulary, compiled and eager, and the cross-entropy variants at 32k
(`model.loss.fused_cross_entropy` off and on); tokens/s, vat / plain, MFU, hours for 3e9
tokens, and torch._dynamo's recompiles and their first failed guards. Each variant is one
child process with the stage's remaining time as its timeout: a compile that never settles
is reported as such instead of eating the budget.

The first eager variant also profiles PROFILE_STEPS steps of each loop once its figures are
written (about 15 s on a GPU; `--profile-steps`): the host-device syncs that
torch.cuda.set_sync_debug_mode("warn") reports, by the line that made them, the CUDA
runtime's synchronize calls, and the profiler's ops by device time (report
throughput.profile): where vat's loop spends what the plain loop does not. It is skipped with
a note when the stage has less than a variant's least time left; stopped for time, the
variant's figures stand."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.gpu_suite import schema
from bench.gpu_suite.call import Call
from bench.gpu_suite.children import last_line, run_child
from bench.gpu_suite.plan import ROOT, Plan, Variant
from bench.gpu_suite.records import (
    Profile,
    Report,
    Target,
    ThroughputRow,
    VariantRecord,
    VariantResult,
)
from vat.errors import VatError

PROFILE_STEPS = 10
"""Profiled steps of each loop (after 3 more), in the first eager variant of a call."""
SMOKE_PROFILE_STEPS = 1
"""--smoke: one profiled step of each loop (the profiler's own summary of a CPU step's
thousands of ops took seconds a step on a busy 2-core machine)."""
FINAL_TIMEOUT_S = 240.0
"""A throughput variant stopped after this long is reported, not retried by a later call."""
TARGETS = {
    "tokens_per_s_8k": 1_200_000,
    "vat_over_plain": 0.95,
    "tokens_per_s_32k": 800_000,
    "hours_for_3e9_tokens": 1.0,
}


def run(call: Call, allot: float) -> str:
    t = call.state.throughput
    t.not_run = dict(call.plan.variants_not_run)
    peak = call.state.facts.bf16_matmul_tflops if call.state.facts else None
    if not peak:
        call.note("throughput", "no measured peak (facts not run): MFU is over 989 TFLOP/s")
    end = time.monotonic() + allot
    complete = True
    profile_tried = t.profile is not None and t.profile.status == "done"
    for v in call.plan.variants:
        done = t.variants.get(v.name)
        if done is not None and (done.status == "done" or done.final):
            continue
        left = end - time.monotonic()
        if left < call.plan.stop_grace_s + call.plan.min_s["throughput"] / 3:
            t.variants[v.name] = VariantRecord(status="skipped", note="stage budget spent")
            complete = False
            continue
        out = call.work / "throughput" / f"{v.name}.json"
        out.unlink(missing_ok=True)
        profile = not profile_tried and not v.compile
        if profile:
            profile_tried = True
            if left < call.plan.min_s["throughput"]:
                profile = False
                t.profile = Profile(
                    status="skipped",
                    variant=v.name,
                    note=f"the stage's time was short ({left:.0f} s left; a variant and "
                    f"its profile run with {call.plan.min_s['throughput']:.0f} s)",
                )
        steps = (SMOKE_PROFILE_STEPS if call.plan.smoke else PROFILE_STEPS) if profile else 0
        cmd = variant_cmd(call.plan, v, call.config, peak, out, steps)
        rc, secs = run_child(cmd, call.logs / f"throughput_{v.name}.log", left, call.plan)
        if rc in (0, None) and out.is_file():  # stopped in its profile: the figures stand
            result, profiled = read_result(out)
            t.variants[v.name] = VariantRecord(status="done", seconds=round(secs), result=result)
            call.note("throughput", f"{v.name}: done in {secs:.0f} s")
            if profile:
                t.profile = profile_record(v.name, profiled)
                call.note("throughput", f"{v.name}: profile {t.profile.status}")
        elif rc is None:
            t.variants[v.name] = VariantRecord(
                status="timed_out",
                # a variant given FINAL_TIMEOUT_S that still did not finish is not tried
                # again (a compile that never settles); a shorter stop is retried
                final=secs >= FINAL_TIMEOUT_S,
                note=f"stopped after {secs:.0f} s (the stage's time was spent); "
                f"a compiled step that does not settle shows here: see "
                f"logs/throughput_{v.name}.log for its recompiles",
            )
            complete = False
            call.note("throughput", f"{v.name}: stopped after {secs:.0f} s")
        else:
            t.variants[v.name] = VariantRecord(
                status="failed",
                note=f"exit {rc}: {last_line(call.logs / f'throughput_{v.name}.log')}",
            )
            complete = False
            call.note("throughput", f"{v.name}: failed (exit {rc})")
        call.save()
    rows = throughput_rows(t.variants)
    t.rows = rows
    t.targets = judge_targets(rows)
    t.compile_diagnosis = compile_diagnosis(rows)
    if any(v.status == "failed" for v in t.variants.values()):
        return "failed"
    return "done" if complete else "partial"


def read_result(path: Path) -> tuple[VariantResult, dict[str, Any] | None]:
    """A variant's result as the bench wrote it (checked as the report's records are: a
    broken one fails the stage in one line), and its first vocabulary's profile, which the
    report keeps apart (None: none written)."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        profiled = result["vocabs"][0].pop("profile", None)
        return schema.read(VariantResult, result, "result"), profiled
    except (ValueError, KeyError, IndexError, TypeError, schema.Broken) as e:
        raise VatError(f"{path}: not a result of bench_train_side_by_side.py ({e})") from None


def measured_throughput(state: Report, plan: Plan) -> tuple[str, float, float] | None:
    """(variant, vat's non-pad tokens/s, non-pad tokens per step) of the first of
    plan.sizing_variants this stage measured, or None: what the reference and the frontier
    are sized from."""
    variants = state.throughput.variants
    for name in plan.sizing_variants:
        v = variants.get(name)
        if v is None or v.status != "done" or v.result is None:
            continue
        voc = v.result.vocabs[0]
        per_step = voc.timed_nonpad_tokens / v.result.timed_steps
        return name, voc.vat.tokens_per_s, per_step
    return None


def profile_record(variant: str, profiled: dict[str, Any] | None) -> Profile:
    """report.throughput.profile from what the variant's bench wrote (None: stopped)."""
    if profiled is None:
        return Profile(
            status="stopped",
            variant=variant,
            note="stopped for time before the profile was written (the figures stand)",
        )
    if "error" in profiled:
        return Profile(status="failed", variant=variant, note=profiled["error"])
    try:
        return schema.read(Profile, {"status": "done", "variant": variant, **profiled}, "profile")
    except schema.Broken as e:
        return Profile(status="failed", variant=variant, note=f"not a profile: {e}")


def variant_cmd(
    plan: Plan, v: Variant, config: Path, peak: float | None, out: Path, profile_steps: int = 0
) -> list[str]:
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "bench_train_side_by_side.py"),
        "--config",
        str(config),
        "--vocabs",
        str(v.vocab),
        "--compile" if v.compile else "--no-compile",
        "--fused-ce" if v.fused_ce else "--no-fused-ce",
        *plan.bench_args,
        "--output",
        str(out),
    ]
    if peak:
        cmd += ["--peak-tflops", str(peak)]
    if profile_steps:
        cmd += ["--profile-steps", str(profile_steps)]
    return cmd


def throughput_rows(variants: dict[str, VariantRecord]) -> list[ThroughputRow]:
    """One row per finished variant and loop (vat, plain), for the report's table."""
    rows = []
    for name, v in variants.items():
        if v.status != "done" or v.result is None:
            continue
        for voc in v.result.vocabs:
            for loop, s in (("vat", voc.vat), ("plain", voc.plain)):
                rows.append(
                    ThroughputRow(
                        variant=name,
                        vocab=voc.vocab_size,
                        compile=voc.compile,
                        fused_cross_entropy=voc.fused_cross_entropy,
                        loop=loop,
                        tokens_per_s=s.tokens_per_s,
                        vat_over_plain=voc.ratio_vat_over_plain if loop == "vat" else None,
                        mfu=s.mfu,
                        hours_for_3e9_tokens=s.hours_for_3e9_tokens,
                        recompiles=s.recompiles,
                        compiled_graphs=s.compiled_graphs,
                        first_recompile_reasons=s.first_recompile_reasons or [],
                    )
                )
    return rows


def judge_targets(rows: list[ThroughputRow]) -> dict[str, Target]:
    """The throughput targets against the best measured vat row of each vocabulary."""

    def best(vocab: int) -> ThroughputRow | None:
        cand = [r for r in rows if r.loop == "vat" and r.vocab == vocab]
        return max(cand, key=lambda r: r.tokens_per_s) if cand else None

    b8, b32 = best(8192), best(32768)
    out: dict[str, Target] = {}
    for key, row, field_, higher in (
        ("tokens_per_s_8k", b8, "tokens_per_s", True),
        ("vat_over_plain", b8, "vat_over_plain", True),
        ("tokens_per_s_32k", b32, "tokens_per_s", True),
        ("hours_for_3e9_tokens", b8, "hours_for_3e9_tokens", False),
    ):
        measured = getattr(row, field_) if row else None
        reached = None
        if measured is not None:
            reached = measured >= TARGETS[key] if higher else measured <= TARGETS[key]
        out[key] = Target(
            target=TARGETS[key],
            measured=measured,
            variant=row.variant if row else None,
            reached=reached,
        )
    return out


def compile_diagnosis(rows: list[ThroughputRow]) -> list[str]:
    """Where a compiled vat step is below its eager twin or recompiled: say so, with why."""
    notes = []
    for r in rows:
        if r.loop != "vat" or not r.compile:
            continue
        twin = [
            e
            for e in rows
            if e.loop == "vat"
            and not e.compile
            and e.vocab == r.vocab
            and e.fused_cross_entropy == r.fused_cross_entropy
        ]
        slower = twin and r.tokens_per_s < twin[0].tokens_per_s
        recompiles = sum(x or 0 for x in (r.recompiles or []))
        if slower or recompiles:
            why = "; ".join(r.first_recompile_reasons[:2]) or "no recompile logged"
            notes.append(
                f"{r.variant}: compiled vat {r.tokens_per_s:,.0f} tokens/s"
                + (f" < eager {twin[0].tokens_per_s:,.0f}" if slower else "")
                + f", {recompiles} recompiles, graphs {r.compiled_graphs}: {why}"
            )
    return notes
