"""The report: OUT_DIR/gpu_report.md (the calls and their exit codes, the stages, the device,
throughput, the reference model, the frontier, the artefacts), the frontier's plot, and the
logs packed beside them; rewritten from the state after every stage, so that a call stopped
anywhere leaves a report of what it did."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from math import nan
from pathlib import Path
from typing import Any

from bench.gpu_suite.call import Call, copy_atomic, pack, tokens_text
from bench.gpu_suite.frontier_eval import BLEU_MIN
from bench.gpu_suite.records import (
    CallLaunch,
    CallRecord,
    Evaluation,
    Reference,
    Report,
    TimeSplit,
)
from vat.io import atomic_write


def write_outputs(call: Call) -> None:
    call.save()
    atomic_text(call.out / "gpu_report.md", render_markdown(call.state))
    records = evaluations(call.state)
    if records:
        try:
            plot_frontier(records, call.out / "frontier.png")
        except ImportError:
            call.state.frontier.plot = "no plot: matplotlib is not installed"
            call.save()
    if call.logs.is_dir():
        copy_event_files(call.work, call.logs / "tensorboard")
        pack(call.out / "logs.tar.gz", call.logs, arcname="logs", gz=True)


def copy_event_files(work: Path, dest: Path) -> None:
    """Each run's TensorBoard event files (the reference's, every frontier run's) into the
    packed logs: a run's loss, KL, tokens/s and compiled-graph curves say where its launch
    spent its time, and the run folders stay on a node that is released (2026-11-26:
    a launch of 274 s trained about 100 s at its logged speed, and nothing said where the
    rest went)."""
    for events in sorted(work.glob("**/events.out.tfevents.*")):
        rel = events.relative_to(work)
        if events.is_relative_to(dest) or rel.parts[0] in ("export", "cache", "throughput"):
            continue  # an earlier call's copy, or no training run's
        copy_atomic(events, dest / rel)


def atomic_text(path: Path, text: str) -> None:
    """`text` written through vat.io.atomic_write: a fresh temporary file, never a link
    (a fixed temporary name could be one, and written through)."""
    atomic_write(path, lambda f: f.write(text))


def evaluations(state: Report) -> list[Evaluation]:
    """The frontier's evaluated runs, in the order they were trained."""
    return [r.eval for r in state.frontier.runs.values() if r.eval is not None]


def plot_frontier(records: Sequence[Evaluation], path: Path) -> None:
    """BLEU (left axis) and STS-B Spearman x 100 (right, each pooling) against val KL."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    recs = sorted((r for r in records if r.val_kl is not None), key=lambda r: r.val_kl or 0.0)
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(111)
    x = [r.val_kl for r in recs]
    ax.plot(x, [r.bleu for r in recs], "o-", color="tab:blue", label="BLEU newstest2019")
    ax.axhline(BLEU_MIN, color="tab:blue", ls=":", lw=0.8)
    for r in recs:
        ax.annotate(f"{r.target_kl:g}", (r.val_kl, r.bleu), fontsize=7)
    ax.set_xlabel("rate: validation KL (nats per token)")
    ax.set_ylabel("reconstruction BLEU (greedy mu-decoding)")
    ax2 = ax.twinx()
    for pooling, style in (("mean", "s--"), ("precision", "^--")):
        ys = [  # NaN: a gap in the line where a run's Spearman was not a number (None)
            100 * (r.sts[pooling].stsb if r.sts[pooling].stsb is not None else nan)
            for r in recs
            if pooling in r.sts
        ]
        if len(ys) == len(recs):
            ax2.plot(x, ys, style, color="tab:red", label=f"STS-B ({pooling} pooling)")
    ax2.set_ylabel("STS-B Spearman x 100")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
    ax.set_title("The rate frontier (labels: target_kl)")
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110), binary=True)


def fmt(x: Any, spec: str = ".2f", scale: float = 1.0) -> str:
    return "n/a" if x is None else format(scale * x, spec)


def _exit(rc: int | None) -> str:
    why = {0: "0", 1: "1 (a stage failed)", 130: "130 (stopped by a signal; state saved)"}
    if rc is None:
        return "not recorded (the call was killed, or is running)"
    return why.get(rc, str(rc))


def unused_s(call: CallRecord) -> float:
    """Seconds a call allotted its stages and they did not use (a stage that ended early,
    or a launch that left more than it needed for its evaluation and export)."""
    return sum(max(v - call.used_s.get(k, 0.0), 0.0) for k, v in call.allotted_s.items())


SPLIT_WORDS = (
    ("setup_s", "set-up"),
    ("compile_s", "compile"),
    ("training_s", "training steps"),
    ("validation_s", "validation"),
    ("checkpoint_s", "checkpoint saving"),
    ("other_s", "other"),
)


def split_text(split: TimeSplit | None, seconds: float) -> str:
    """A launch's time split in words: its parts, the launch's seconds outside the fit (the
    process's exit, the polling), and when the first step came."""
    if split is None:
        return "no time split (the launch wrote none: killed, or an older vat)"
    parts = ", ".join(f"{word} {getattr(split, key):.0f} s" for key, word in SPLIT_WORDS)
    outside = max(seconds - split.total_s, 0.0)
    first = split.first_step_s
    at = f"; first step at {first:.0f} s" if first is not None else "; no step trained"
    return f"{parts}, outside the fit {outside:.0f} s{at}"


def call_launches(state: Report) -> list[tuple[int, CallLaunch]]:
    """(call number from 1, launch) of every launch the calls recorded, in order."""
    return [(i, la) for i, c in enumerate(state.calls, 1) for la in c.launches or []]


def launch_splits(state: Report, stage: str) -> list[tuple[float, int | None, TimeSplit | None]]:
    """(seconds, step, time split) of `stage`'s launches in the calls' records, which
    a stage's own launch record (same seconds and step) finds its split in."""
    return [(la.seconds, la.step, la.time_split) for _, la in call_launches(state)
            if la.stage == stage]  # fmt: skip


def render_reference(
    ref: Reference, splits: Sequence[tuple[float, int | None, TimeSplit | None]] = ()
) -> list[str]:
    """The reference model: its budget and why, its launches (each with its time split from
    `splits`, launch_splits), its scores, the BLEU bar, the exported folder and the line
    that adds it to the registry."""
    lines = ["", "## The reference model", ""]
    for r in ref.rounds:  # each call that names the reference adds its tokens
        lines.append(f"- round {r.round}: finished at step {r.step:,}, "
                     f"{tokens_text(r.tokens_total)} tokens behind the model, "
                     f"BLEU {fmt(r.bleu)}")  # fmt: skip
    if ref.steps is None:
        return [*lines, *([""] if ref.rounds else []), "Not started."]
    if ref.rounds:
        lines.append("")
    tokens = f"{tokens_text(ref.tokens)} non-pad tokens" if ref.tokens else "no token count"
    basis = {"floor": f"the {tokens_text(ref.floor_tokens)}-token floor",
             "time_share": "the stage's time share (less than the floor)",
             "default": "the default steps (no throughput measured)",
             "time": "one launch, trained for the stage's time"}[ref.basis]  # fmt: skip
    at_most = "at most " if ref.basis == "time" else ""
    n = ref.round
    lines += [
        f"`{ref.config}`, {ref.key} {ref.target_kl:g}"
        f"{f', round {n}' if n > 1 else ''}: **{at_most}{ref.steps:,} steps, "
        f"{tokens}: {basis}** ({ref.why}).",
        "",
    ]
    dev = ref.device
    if dev:
        lines += [f"On {dev.device}, torch {dev.torch}, CUDA {dev.cuda or 'none'} (the "
                  "stage's own record).", ""]  # fmt: skip
    for i, la in enumerate(ref.launches, 1):
        logged = la.logged_tokens_per_s
        speed = f"; vat's log: {logged:,.0f} tokens/s" if logged is not None else ""
        overhead = fmt(la.overhead_s, ".0f")
        start = f"{la.start}; " if la.start else ""
        behind = la.tokens_total
        behind = f"; {tokens_text(behind)} tokens behind the model" if behind else ""
        rnd = f" (round {la.round})" if la.round is not None else ""
        split = next((t for s, st, t in splits if (s, st) == (la.seconds, la.step)), None)
        split = f"; {split_text(split, la.seconds)}" if split is not None else ""
        lines.append(f"- launch {i}{rnd}: {start}{la.steps:,} steps in {la.seconds:.0f} s "
                     f"(overhead {overhead} s{speed}), {la.status}{behind}{split}")  # fmt: skip
    if ref.tokens_total:
        lines += ["", f"**{tokens_text(ref.tokens_total)} non-pad tokens behind the model** "
                  "(this run's tokens and those behind the model it started from)."]  # fmt: skip
    parts = ref.checkpoint_parts
    if parts:
        sizes = " + ".join(f"{p.bytes / 2**20:.1f}" for p in parts.parts)
        lines += ["", f"Its checkpoint at step {parts.step:,} ({parts.bytes / 2**20:.1f} "
                  f"MiB, the optimizer's state included) travels as {len(parts.parts)} "
                  f"part(s) of {sizes} MiB (`{parts.parts[0].name}`, ...; sizes and "
                  "SHA-256 in gpu_report.json): copied back with the report, the next call "
                  "resumes it exactly."]  # fmt: skip
    e = ref.eval
    if e is None:
        return [*lines, "", "Not evaluated yet."]
    s = e.sts
    d = e.extra_sts.get("default_spec")
    lines += [
        "",
        "| steps | val KL | val NLL | active units | BLEU | BLEU <= 63 | BLEU > 63 (lines) | "
        "STS12 mean | STS12 precision | STS-B mean | STS-B precision | STS12 default spec | "
        "STS-B default spec |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {e.step:,} | {fmt(e.val_kl)} | {fmt(e.val_nll, '.3f')} | "
        f"{e.active_units} | {fmt(e.bleu)} | {fmt(e.bleu_short)} | "
        f"{fmt(e.bleu_long)} ({e.lines_long}) | {fmt(s['mean'].sts12, '.2f', 100)} | "
        f"{fmt(s['precision'].sts12, '.2f', 100)} | {fmt(s['mean'].stsb, '.2f', 100)} | "
        f"{fmt(s['precision'].stsb, '.2f', 100)} | {fmt(d and d.sts12, '.2f', 100)} | "
        f"{fmt(d and d.stsb, '.2f', 100)} |",
        "",
        *_val_step_note(e),
        f"BLEU >= {ref.bleu_min:g} on newstest2019: "
        f"**{'reached' if ref.bleu_reached else 'not reached'}** ({fmt(e.bleu)}).",
    ]
    a = ref.export
    if a is None:
        return [*lines, "", "Not exported yet."]
    lines += [
        "",
        f"Exported: `{a.file}` ({a.bytes / 2**20:.1f} MiB; `tar xf {a.file}` gives "
        f"`{a.folder_in_tar}/`, whose card README.md holds these scores).",
    ]
    if a.compare:
        lines += ["", f"The shipped-model registry: {a.compare}."]
    if a.registry_command is None:
        return lines
    # the report is a file (a seed's came from elsewhere): print only the commands vat builds
    # from the export's checked name, folder and file, never the recorded text as such
    overwrite = a.registry_command.endswith(" --overwrite")
    built = registry_commands(a.name, Path(a.folder), a.file, overwrite)
    if built is None or built != (a.registry_command, a.registry_command_from_tar):
        return [*lines, "", "The report's registry command is not the one vat builds from the "
                "export's name, folder and file (the report was changed): not shown."]  # fmt: skip
    return [
        *lines,
        "",
        "```bash",
        built[0],
        f"# or, from the returned file: {built[1]}",
        "```",
    ]


MODEL_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A model name the registry command may carry (the reference's: wmt-tatoeba-en-d16)."""


def registry_commands(
    name: str, folder: Path, tar_name: str, overwrite: bool
) -> tuple[str, str] | None:
    """The line that adds the exported `folder` to the registry as `name`, and the one that
    does it from the returned `tar_name`; the folder quoted for the shell, and None when the
    name or file is not one vat gives (a report changed by hand)."""
    if not (MODEL_NAME_RE.fullmatch(name) and MODEL_NAME_RE.fullmatch(tar_name)):
        return None
    more = " --overwrite" if overwrite else ""
    return (
        f"python scripts/add_pretrained.py {shlex.quote(str(folder))} --name {name}{more}",
        f"tar xf {tar_name} && python scripts/add_pretrained.py {name} --name {name}{more}",
    )


def render_markdown(state: Report) -> str:
    """gpu_report.md: the stages, the device, throughput, the frontier, the artefacts."""
    f = state.facts
    lines = [
        f"# vat GPU suite report ({state.mode})",
        "",
        f"Device: {f.device if f else 'n/a'}; torch {f.torch if f else 'n/a'}, CUDA "
        f"{(f.cuda if f else None) or 'n/a'}; measured bf16 matmul peak "
        f"{fmt(f.bf16_matmul_tflops if f else None, '.4g')} TFLOP/s "
        f"({f.bf16_matmul if f else 'not measured'}).",
        "",
        "## Calls",
        "",
        "| started | command | exit | allotted / used s per stage | unused s |",
        "|---|---|---|---|---:|",
    ]
    for c in state.calls:
        stages = ", ".join(
            f"{k} {v:.0f} / {c.used_s.get(k, 0):.0f}" for k, v in c.allotted_s.items()
        )
        lines.append(f"| {c.started} | `{c.command}` | {_exit(c.exit)} | "
                     f"{stages or 'none ran'} | {unused_s(c):.0f} |")  # fmt: skip
    launches = call_launches(state)
    if launches:
        lines += ["", "Where each launch's seconds went (vat train's time split; `outside the "
                  "fit`: its process's exit and the suite's polling):", ""]  # fmt: skip
    for i, la in launches:
        lines.append(f"- call {i}, {la.stage} `{la.run}`: {la.seconds:.0f} s, "
                     f"{la.status}: {split_text(la.time_split, la.seconds)}")  # fmt: skip
    lines += [
        "",
        "## Stages",
        "",
        "| stage | status | seconds (all calls) | last note |",
        "|---|---|---:|---|",
    ]
    for name, s in state.stages.items():  # in the order they run (state.new_state)
        last = s.notes[-1] if s.notes else ""
        lines.append(f"| {name} | {s.status} | {s.seconds:.0f} | {last} |")
    t = state.throughput
    lines += [
        "",
        "## Throughput (vat's loop and a plain loop, side by side)",
        "",
        "| variant | vocab | loop | non-pad tokens/s | vat / plain | MFU | hours for 3e9 "
        "tokens | recompiles | graphs |",
        "|---|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for r in t.rows or []:
        lines.append(
            f"| {r.variant} | {r.vocab} | {r.loop} | {r.tokens_per_s:,.0f} | "
            f"{fmt(r.vat_over_plain, '.3f')} | {fmt(r.mfu, '.2%')} | "
            f"{fmt(r.hours_for_3e9_tokens)} | {r.recompiles} | {r.compiled_graphs} |"
        )
    for name, v in t.variants.items():
        if v.status != "done":
            lines.append(f"\n- {name}: {v.status}: {v.note or ''}")
    for key, why in t.not_run.items():
        lines.append(f"\n- {key}: {why}")
    for note in t.compile_diagnosis or []:
        lines.append(f"\n- compile: {note}")
    if t.targets:
        lines += ["", "Targets (judged only on a GPU):", ""]
        for key, j in t.targets.items():
            verdict = (
                "n/a (smoke run, CPU)"
                if state.mode == "smoke"
                else {True: "reached", False: "not reached", None: "not measured"}[j.reached]
            )
            lines.append(f"- {key}: target {j.target:,}, measured {fmt(j.measured, ',.3f')}"
                         f" ({j.variant}): {verdict}")  # fmt: skip
    lines += render_reference(state.reference, launch_splits(state, "reference"))
    fr = state.frontier
    lines += [
        "",
        f"## The rate frontier ({fr.key}, {fr.steps} steps each: {fr.steps_from})",
        "",
        "| run | target KL | steps | val KL | val NLL | active units | BLEU | BLEU <= 63 | "
        "BLEU > 63 (lines) | STS12 mean | STS12 precision | STS-B mean | STS-B precision |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    recs = evaluations(state)
    for r in sorted(recs, key=lambda r: r.target_kl):
        s = r.sts
        lines.append(
            f"| {r.run} | {r.target_kl:g} | {r.step} | {fmt(r.val_kl)} | "
            f"{fmt(r.val_nll, '.3f')} | {r.active_units} | {fmt(r.bleu)} | "
            f"{fmt(r.bleu_short)} | {fmt(r.bleu_long)} ({r.lines_long}) | "
            f"{fmt(s['mean'].sts12, '.2f', 100)} | {fmt(s['precision'].sts12, '.2f', 100)}"
            f" | {fmt(s['mean'].stsb, '.2f', 100)} | "
            f"{fmt(s['precision'].stsb, '.2f', 100)} |"
        )
    if fr.best:
        lines += ["", f"Best: {fr.best.verdict or 'n/a'}."]
    for r in recs:
        for set_name, x in r.extra_sts.items():  # the extra feature specs
            lines.append(
                f"- {r.run}, {set_name} (`{' '.join(x.options)}`): STS12 "
                f"{fmt(x.sts12, '.2f', 100)}, STS-B {fmt(x.stsb, '.2f', 100)}"
            )
    if fr.plot:
        lines += ["", f"Plot: {fr.plot}"]
    elif recs:
        lines += ["", "![frontier](frontier.png)"]
    if state.artefacts:
        lines += ["", "## Artefacts", ""]
        for a in state.artefacts.values():
            lines.append(
                f"- `{a.file}` ({a.bytes / 2**20:.1f} MiB): {a.run}, {a.why}; "
                f"`tar xf {a.file}` gives the vat folder `{a.folder_in_tar}/` "
                "(vat.load, --ckpt)"
            )
    return "\n".join(lines) + "\n"


def _val_step_note(e: Evaluation) -> list[str]:
    """Where the val KL and NLL come from when it is not the evaluated step: a launch stopped
    for time validated last before it stopped (measure_run reads the last validation)."""
    at = e.val_step
    if at is None or at == e.step:
        return []
    return [f"Val KL and NLL: the last validation, at step {at:,} (the evaluated checkpoint "
            f"is step {e.step:,}; everything else is measured on it).", ""]  # fmt: skip
