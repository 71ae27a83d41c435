"""Stage 3, `reference`: one model trained alone on the GPU with the recipe that reached BLEU
99 before (configs/reference_gpu.yaml: the paper shape, 8k BPE, 64k-token batches, bf16,
compiled, the rate held at 20 nats per token), evaluated as the frontier runs are, and
exported as a folder ready to become a shipped model.

- Its token budget (reference_budget): at least REFERENCE_MIN_TOKENS (600M on a GPU, the
  budget that reached BLEU 99), or all of the stage's time share if the measured 8k
  throughput allows less; the report says which.
- Resumable across calls like the frontier (runs.py): the recipe's first call starts it and
  stops it with its state saved, the second resumes it.
- Evaluated like a frontier run (frontier_eval.evaluate_run: validation KL and NLL, active
  units, STS12 and STS-B with mean and precision pooling, newstest2019 BLEU with the long
  lines apart), and the folder's own features (the default spec) through `vat export
  --evaluate STS12,STSBenchmark`, which also puts those scores on the card.
- Exported (`vat export`, as artefacts.py does) to OUT_DIR/work/export/NAME and packed as
  OUT_DIR/reference.tar; the card gets a section with the suite's measurements; the report
  prints the line that adds it to the registry: `vat pretrained add FOLDER --name NAME`.

The run trains in OUT_DIR/work/reference/."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from bench.gpu_suite.call import MAX_OUT_FILE, Call, copy_atomic, now_iso, pack, tokens_text
from bench.gpu_suite.frontier_eval import BLEU_MIN, LONG_OVER, evaluate_run, measured
from bench.gpu_suite.frontier_train import TARGET_KL_KEY
from bench.gpu_suite.plan import Plan
from bench.gpu_suite.report import fmt
from bench.gpu_suite.runs import Outcome, TrainRun, prepare_data, train
from bench.gpu_suite.throughput import measured_throughput
from vat.errors import VatError
from vat.feature_spec import DEFAULT_EXPORT_SPEC
from vat.io import write_json_atomic
from vat.share.folder import record_measurements

TARGET_KL = 20.0
"""The rate the reference is held at (nats per token): the BLEU-99 run had 21-27."""
EXPORT_TASKS = "STS12,STSBenchmark"
VAL_EVERY_ONE_LAUNCH = 500
ONE_LAUNCH_MARGIN_S = 20.0
"""One launch (the short plan) stops training this long before the evaluation and the
export's estimates would end the stage: their estimates are not measurements."""
RUN = "reference"


def new_reference() -> dict[str, Any]:
    return {
        "config": "configs/reference_gpu.yaml",
        "key": TARGET_KL_KEY,
        "target_kl": TARGET_KL,
        "steps": None,
        "tokens": None,
        "basis": None,
        "floor_tokens": None,
        "why": None,
        "launches": [],
        "trained": False,
        "eval": None,
        "bleu_min": BLEU_MIN,
        "bleu_reached": None,
        "export": None,
    }


def run(call: Call, allot: float) -> str:
    end = time.monotonic() + allot  # everything below counts, the data preparation included
    ref, plan = call.state["reference"], call.plan
    run_dir = call.work / RUN
    if not ref["trained"]:
        prepare_data(call, call.reference_config)
        if ref["steps"] is None:
            ref.update(reference_budget(call.state, plan))
            call.note("reference", f"{ref['steps']:,} steps: {ref['why']}")
        one = plan.reference_launches == 1
        cmd = train_cmd(call.reference_config, run_dir, ref["steps"], one)
        r = TrainRun(RUN, run_dir, cmd, ref["steps"], call.logs / "train_reference.log")
        step_before = (ref["launches"][-1]["step"] if ref["launches"] else None) or 0
        # one launch: it trains until the evaluation and the export are what is left
        train_end = end - (plan.eval_run_s + plan.export_s + ONE_LAUNCH_MARGIN_S if one else 0)
        o = train(call, "reference", [r], train_end)[RUN]
        if o.launched:
            ref["launches"].append(_launch_record(call.state, plan, o, step_before, run_dir))
        if o.status == "failed":
            call.note("reference", f"failed ({o.note})")
            return "failed"
        if o.status == "interrupted" and not (one and o.step):
            return "partial"
        if o.status == "interrupted":
            _last_is_the_stop(run_dir)
            call.note(
                "reference",
                f"stopped for time at step {o.step:,} of at most "
                f"{ref['steps']:,} (one launch): evaluated as it stands",
            )
        ref["trained"] = True
        if one:
            ref["tokens"] = _tokens_seen(run_dir)
        call.save()
    if ref["eval"] is None:
        if end - time.monotonic() < plan.eval_run_s:
            call.note("reference", "trained; its evaluation is left for the next call")
            return "partial"
        rec = evaluate_run(run_dir, TARGET_KL, call.reference_config, call.data_dir, plan)
        rec["run"] = RUN
        ref["eval"] = rec
        ref["bleu_reached"] = rec["bleu"] >= BLEU_MIN
        cmp = ">=" if ref["bleu_reached"] else "<"
        call.note("reference", f"newstest2019 BLEU {rec['bleu']:.2f} ({cmp} {BLEU_MIN:g})")
        call.save()
    if ref["export"] is None:
        if end - time.monotonic() < plan.export_s:
            call.note("reference", "evaluated; its export is left for the next call")
            return "partial"
        ref["export"] = export(call, run_dir / "checkpoints" / "last.ckpt")
        a = ref["export"]
        call.note("reference", f"{a['file']}: {a['bytes'] / 2**20:.1f} MiB; "
                               f"{a['registry_command']}")  # fmt: skip
    return "done"


def reference_budget(state: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """The reference's steps: plan.reference_min_tokens non-pad tokens (the floor), or what
    the measured tokens/s trains in the stage's share (the time share) when that is less.
    The share pays plan.reference_launches start-ups, one evaluation, the export and one
    stop (the recipe's first call ends it)."""
    m = measured_throughput(state, plan)
    floor = plan.reference_min_tokens
    if plan.reference_launches == 1:
        # one launch trained for its time (the short plan): the steps are only a ceiling
        steps = math.ceil(floor / m[2]) if m else plan.reference_steps_default
        return {"steps": steps, "tokens": None, "basis": "time", "floor_tokens": floor,
                "why": f"one launch trained until the stage's time is spent, at most {steps:,} "
                "steps (the recipe's; the 8k throughput when measured sizes the "
                f"{tokens_text(floor)}-token floor); its tokens are read from its "
                "checkpoint"}  # fmt: skip
    if m is None:
        steps = plan.reference_steps_default
        return {"steps": steps, "tokens": None, "basis": "default", "floor_tokens": floor,
                "why": f"default {steps:,} steps (no 8k throughput measured)"}  # fmt: skip
    variant, tok_s, per_step = m
    share = plan.shares_s["reference"]
    train_s = max(
        share
        - plan.reference_launches * plan.startup_s
        - plan.eval_run_s
        - plan.export_s
        - plan.stop_grace_s,
        0.0,
    )
    in_share = tok_s * train_s
    basis, tokens = ("floor", floor) if in_share >= floor else ("time_share", in_share)
    steps = max(1, min(math.ceil(tokens / per_step), plan.max_steps))
    which = (
        f"the {tokens_text(floor)}-token floor (the share would train {tokens_text(in_share)})"
        if basis == "floor"
        else f"the stage's time share (less than the {tokens_text(floor)}-token floor)"
    )
    why = (
        f"{tokens_text(tokens)} non-pad tokens = {which}: {variant} {tok_s:,.0f} tokens/s x "
        f"{train_s:.0f} s ({share:.0f} s share - {plan.reference_launches} starts x "
        f"{plan.startup_s:.0f} s - {plan.eval_run_s:.0f} s evaluation - {plan.export_s:.0f} s "
        f"export - {plan.stop_grace_s:.0f} s stop); {steps:,} steps of {per_step:,.0f} tokens"
    )
    return {"steps": steps, "tokens": round(tokens), "basis": basis, "floor_tokens": floor,
            "why": why}  # fmt: skip


def _launch_record(
    state: dict[str, Any], plan: Plan, o: Outcome, step_before: int, run_dir: Path
) -> dict[str, Any]:
    """One launch: its seconds, the steps it trained, and its overhead (seconds not spent on
    steps at the measured tokens/s: start-up, compile, validation, stop), which sizes later
    launches (runs.launch_overhead_s)."""
    trained = max((o.step or 0) - step_before, 0)
    m = measured_throughput(state, plan)
    overhead = None
    if m is not None and trained:
        overhead = round(max(o.seconds - trained * m[2] / m[1], 0.0), 1)
    return {"started": now_iso(), "seconds": round(o.seconds, 1), "steps": trained,
            "step": o.step, "overhead_s": overhead, "status": o.status,
            "logged_tokens_per_s": logged_tokens_per_s(run_dir, step_before)}  # fmt: skip


def logged_tokens_per_s(run_dir: Path, step_before: int) -> float | None:
    """The median of the run's logged train/tokens_per_s over this launch's second half
    (after its compile and warm-up): vat's loop speed in the reference's own recipe."""
    from vat.experiments.measure import read_scalars

    try:
        curve = [(s, v) for s, v in read_scalars(run_dir).get("train/tokens_per_s", [])
                 if s > step_before]  # fmt: skip
    except Exception:  # an unreadable log is a missing figure, not a failed stage
        return None
    values = sorted(v for _, v in curve[len(curve) // 2 :])
    return round(values[len(values) // 2], 1) if values else None


def train_cmd(config: Path, run_dir: Path, steps: int, one_launch: bool = False) -> list[str]:
    # one validation, at the end; a launch stopped for time (the short plan) validates every
    # 500 steps, so that its validation KL and NLL exist when it stops
    every = min(steps, VAL_EVERY_ONE_LAUNCH) if one_launch else steps
    return [
        sys.executable, "-m", "vat", "train", "-c", str(config), "--run_dir", str(run_dir),
        "--trainer.max_steps", str(steps),
        "--trainer.max_time", "null",
        "--trainer.val_check_interval", str(every),
        # a SIGKILL (not the SIGINT a stop sends, which saves) loses at most a tenth
        "--checkpoint.every_n_train_steps", str(max(1, steps // 10)),
        "--ckpt_path", "last",
    ]  # fmt: skip


def _last_is_the_stop(run_dir: Path) -> None:
    """A run stopped by a signal writes last.ckpt at the end of the step it was in
    (vat.train.interrupt); an older vat, and an error, left on_exception.ckpt instead, which
    `--ckpt_path last` resumes (find_last) but which the evaluation and the export, reading
    checkpoints/last.ckpt, would miss: when it is the newer, it becomes last.ckpt (copied,
    then renamed into place)."""
    from vat.train.run_dir import find_last

    newest = find_last(run_dir / "checkpoints")
    if newest is not None and newest.name != "last.ckpt":
        copy_atomic(newest, newest.with_name("last.ckpt"))


def _tokens_seen(run_dir: Path) -> int | None:
    """The non-pad tokens the run's last checkpoint has trained on (its training record)."""
    from vat.share.checkpoint import read_checkpoint

    try:
        ckpt = read_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    except VatError:
        return None
    tokens = ((ckpt.get("vat") or {}).get("training") or {}).get("tokens_seen")
    return int(tokens) if tokens is not None else None


def suggested_name(plan: Plan) -> str:
    """The registry name the report suggests, for what the model is: English of WMT's news
    test sets 2008-2017 and Tatoeba (with Multi30k), at width d."""
    d = plan.config_overrides.get("model.arch.d_model", 128)
    return f"wmt-tatoeba-en-d{d}"


def export(call: Call, ckpt: Path) -> dict[str, Any]:
    """`vat export CKPT FOLDER --evaluate STS12,STSBenchmark` (the folder's own features
    scored, on its card), the suite's measurements added to the card, the folder packed as
    OUT_DIR/reference.tar; and the line that adds it to the registry."""
    from vat.cli.export import main as export_main

    name = suggested_name(call.plan)
    folder = (call.work / "export" / name).resolve()
    argv = [str(ckpt), str(folder), "--overwrite", "--evaluate", EXPORT_TASKS]
    argv += ["--data-dir", str(call.data_dir / "senteval")]
    with contextlib.redirect_stdout(io.StringIO()):
        rc = export_main(argv)
    if rc != 0:
        raise VatError(f"vat export {' '.join(argv)} failed (exit {rc})")
    ref = call.state["reference"]
    evaluation = _folder_config(folder).get("evaluation", [])
    scores = {s["task"]: measured(s["value"] / 100) for s in evaluation}
    ref["eval"]["extra_sts"]["default_spec"] = {
        # the folder's own features: vat export's default spec, as --features gives it
        "options": ["--features", DEFAULT_EXPORT_SPEC],
        "sts12": scores.get("STS12"),
        "stsb": scores.get("STSBenchmark"),
    }
    write_json_atomic(call.work / RUN / "suite_eval.json", ref["eval"])
    _add_to_card(folder, call.state)
    tar = call.out / "reference.tar"
    pack(tar, folder, arcname=name)
    size = tar.stat().st_size
    return {
        "name": name,
        "folder": str(folder),
        "file": tar.name,
        "folder_in_tar": name,
        "bytes": size,
        "within_16_mib": size <= MAX_OUT_FILE,
        "registry_command": f"vat pretrained add {folder} --name {name}",
        "registry_command_from_tar": f"tar xf {tar.name} && vat pretrained add {name} "
        f"--name {name}",
    }


def _folder_config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def _add_to_card(folder: Path, state: dict[str, Any]) -> None:
    """The suite's measurements (BLEU, the rate, STS with each pooling, the budget and the
    device) go into the folder's config.json and its card (vat.share.folder
    .record_measurements), so that `vat pretrained add` and a Hub upload keep them."""
    ref, f = state["reference"], state.get("facts") or {}
    e = ref["eval"]
    budget = ""
    if ref["tokens"]:
        budget = f" ({tokens_text(ref['tokens'])} non-pad tokens, {ref['basis'].replace('_', ' ')})"
    text = (
        f"`bench/gpu_suite.sh` (stage `reference`, {now_iso()}) on {f.get('device', 'n/a')}, "
        f"torch {f.get('torch', 'n/a')}: {ref['config']} with {ref['key']} "
        f"{ref['target_kl']:g}, {e['step']:,} steps{budget}."
    )
    rows = [
        (f"newstest2019 BLEU, greedy mu-decoding, all {e['bleu_lines']} lines", fmt(e["bleu"])),
        (f"BLEU, lines of at most {LONG_OVER} subwords", fmt(e["bleu_short"])),
        (f"BLEU, the {e['lines_long']} longer lines", fmt(e["bleu_long"])),
        (
            "validation KL (nats per token) / NLL",
            f"{fmt(e['val_kl'])} / {fmt(e['val_nll'], '.3f')}",
        ),
        ("active units", str(e["active_units"])),
    ]
    for pooling, s in e["sts"].items():
        rows.append((f"STS12 / STS-B Spearman x 100, {pooling} pooling of mu",
                     f"{fmt(s['sts12'], '.2f', 100)} / {fmt(s['stsb'], '.2f', 100)}"))  # fmt: skip
    d = e["extra_sts"].get("default_spec")
    if d:
        rows.append(("STS12 / STS-B Spearman x 100, this folder's features",
                     f"{fmt(d['sts12'], '.2f', 100)} / {fmt(d['stsb'], '.2f', 100)}"))  # fmt: skip
    record_measurements(folder, "Measured by vat's GPU suite", text, rows)


def check_reference_files(call: Call) -> None:
    """A report carried to a fresh machine: a reference trained (or half trained) there but
    not exported has lost its checkpoints, so it is trained again (same steps)."""
    ref, st = call.state["reference"], call.state["stages"]["reference"]
    if st["status"] not in ("done", "partial") or ref["export"] is not None:
        return
    if not (call.work / RUN).is_dir():
        st.update(status="pending", seconds=0.0)
        ref.update(trained=False, eval=None, bleu_reached=None)
        call.note("reference", "its checkpoints are gone (a fresh machine): retraining")
