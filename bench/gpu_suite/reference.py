"""Stage 3, `reference`: one model trained alone on the GPU with the recipe that reached BLEU
99 before (configs/reference_gpu.yaml: the paper shape, 8k BPE, 64k-token batches, bf16,
compiled, the rate held at 20 nats per token), evaluated as the frontier runs are, and
exported as a folder ready to become a shipped model.

- Its token budget (reference_budget): at least REFERENCE_MIN_TOKENS (600M on a GPU, the
  budget that reached BLEU 99), or all of the stage's time share if the measured 8k
  throughput allows less; the report says which.
- Resumable across calls like the frontier (runs.py): the recipe's first call starts it and
  stops it with its state saved, the second resumes it.
- Continued, never restarted: each launch starts from the newest reference it has
  (choose_start): its own checkpoint on this machine, else the checkpoint an earlier call
  returned in parts (carry.py) joined into its run folder, both resumed exactly (`--ckpt_path
  last`, the optimizer's state included); else the newest weights, with `vat train
  --init-from` (the optimizer fresh): the exported folder in the returned reference.tar, or
  the shipped model of its name and shape (not in --smoke); else from nothing. A call whose
  `--stages` names the reference and finds it finished starts another round (begin_round):
  it trains it further for the call's time, evaluates and exports it again. Each launch
  records which start it had and the tokens behind the model (tokens_total).
- Evaluated like a frontier run (frontier_eval.evaluate_run: validation KL and NLL, active
  units, STS12 and STS-B with mean and precision pooling, newstest2019 BLEU with the long
  lines apart), and the folder's own features (the default spec) through `vat export
  --evaluate STS12,STSBenchmark`, which also puts those scores on the card.
- Exported (`vat export`, as artefacts.py does) to OUT_DIR/work/export/NAME and packed as
  OUT_DIR/reference.tar; the card gets a section with the suite's measurements (the device
  and torch the stage ran on, recorded by the stage itself); the report prints the line that
  adds it to the registry, `python scripts/add_pretrained.py FOLDER --name NAME`, or, when
  vat ships a model of that name, the line that replaces it (`--overwrite`) if newstest2019
  BLEU improved on the BLEU its card records (or says why it cannot compare).

The run trains in OUT_DIR/work/reference/, started in OUT_DIR/work (call.DATA_LINK)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.gpu_suite import carry, schema
from bench.gpu_suite.call import (
    MAX_OUT_BYTES,
    MAX_OUT_FILE,
    RETURNED,
    Call,
    copy_atomic,
    now_iso,
    pack,
    read_tar,
    remove_listed,
    remove_run,
    tokens_text,
    write_listing,
)
from bench.gpu_suite.frontier_eval import BLEU_MIN, LONG_OVER, evaluate_run, measured
from bench.gpu_suite.frontier_train import TARGET_KL_KEY
from bench.gpu_suite.in_process import run_vat
from bench.gpu_suite.out_files import open_regular
from bench.gpu_suite.plan import Plan
from bench.gpu_suite.records import (
    Basis,
    DeviceRecord,
    Export,
    ExtraSts,
    Launch,
    Reference,
    Report,
    RoundRecord,
)
from bench.gpu_suite.report import fmt, registry_commands
from bench.gpu_suite.runs import Outcome, TrainRun, checkpoint_step, prepare_data, train
from bench.gpu_suite.throughput import measured_throughput
from vat.errors import VatError
from vat.feature_spec import DEFAULT_EXPORT_SPEC
from vat.io import write_json_atomic
from vat.share.folder import record_measurements

TARGET_KL = 20.0
"""The rate the reference is held at (nats per token): the BLEU-99 run had 21-27."""
EXPORT_TASKS = "STS12,STSBenchmark"
VAL_EVERY_ONE_LAUNCH = 500
"""A launch stopped for time (the short plan) validates every this many steps when no
earlier launch says how many steps it will train (val_every)."""
VALIDATIONS_PER_LAUNCH = 4
"""Points on the validation curve per launch stopped for time (val_every): enough to see
the KL held and the NLL falling; the 2026-11-27 H200 launch validated 9 times (every 500
steps, ~3 s each)."""
MIN_VAL_EVERY = 100
ONE_LAUNCH_MARGIN_S = 20.0
"""One launch (the short plan) stops training this long before the evaluation and the
export's estimates would end the stage, while those are the plan's estimates."""
FINISH_FACTOR, FINISH_MARGIN_S = 1.25, 10.0
"""Once an earlier round measured this model's evaluation and export on this kind of
machine (Reference.finish_s), a launch leaves 1.25 x those seconds + 10 s for them, not the
plan's estimates (45 + 30 + the 20-s margin): the calls of 2026-11-27 left 86-87 s of their
budgets unused, their evaluation and export taking about 30 s (finish_reserve_s)."""
RUN = "reference"
START = "start"
"""OUT_DIR/work/start/: the returned reference.tar unpacked, when a launch continues from it."""
TAR_BYTES, TAR_MEMBERS = MAX_OUT_BYTES, 64
"""reference.tar unpacks (_unpack) only within these: the exported folder it packs is 9 files,
about 12 MiB for the d128 model in float32; a returned one is at most MAX_OUT_FILE (16 MiB),
one this machine exported may be larger (a wider --plan), far from 64 MiB."""
BLEU_ROW = "newstest2019 BLEU, greedy mu-decoding, all {n} lines"
"""The card's BLEU row (_add_to_card); a shipped model's is read back by the same words."""
BLEU_ROW_RE = re.compile(re.escape(BLEU_ROW).replace(r"\{n\}", r"(\d+)"))


def new_reference() -> Reference:
    return Reference(
        config="configs/reference_gpu.yaml",
        key=TARGET_KL_KEY,
        target_kl=TARGET_KL,
        steps=None,
        tokens=None,
        basis=None,
        floor_tokens=None,
        why=None,
        launches=[],
        trained=False,
        eval=None,
        bleu_min=BLEU_MIN,
        bleu_reached=None,
        export=None,
    )


@dataclass(frozen=True)
class ReferenceBudget:
    """The reference's steps and why (reference_budget), as the report keeps them."""

    steps: int
    tokens: float | None
    basis: Basis
    floor_tokens: float
    why: str

    def apply(self, ref: Reference) -> None:
        ref.steps, ref.tokens, ref.basis = self.steps, self.tokens, self.basis
        ref.floor_tokens, ref.why = self.floor_tokens, self.why


@dataclass(frozen=True)
class Start:
    """Where one launch of the reference starts (choose_start)."""

    how: str
    """"resumed" (exactly: weights, optimizer, schedules, data order), "init_from" (the
    weights only, `vat train --init-from`) or "scratch"."""
    text: str
    """What the report says about it."""
    step: int = 0
    """The step the launch starts from (a fresh run's 0)."""
    init_from: str | None = None
    carried: str | None = None
    """Resuming the parts an earlier call returned (on this machine for the first time): what
    they are, for the report. vat train may still refuse them (another model's checkpoint),
    so "resumed" is said only of a launch that did not fail at its start (_launch_record)."""
    trust_cache: bool = False
    """The run folder holds the compile cache an earlier call returned, unpacked because the
    call trusts it (--trust-compile-cache): vat train is told so (train_cmd)."""


def run(call: Call, allot: float) -> str:
    end = time.monotonic() + allot  # everything below counts, the data preparation included
    ref, plan = call.state.reference, call.plan
    run_dir = call.work / RUN
    status = ensure_trained(call, end)
    if status is not None:
        return status
    if ref.eval is None:
        if end - time.monotonic() < finish_estimate_s(ref, plan, "eval"):
            call.note("reference", "trained; its evaluation is left for the next call")
            return "partial"
        t0 = time.monotonic()
        rec = evaluate_run(run_dir, TARGET_KL, call.reference_config, call.data_dir, plan)
        _measured_finish(ref, "eval", time.monotonic() - t0)
        rec.run = RUN
        ref.eval = rec
        ref.bleu_reached = rec.bleu >= BLEU_MIN
        cmp = ">=" if ref.bleu_reached else "<"
        call.note("reference", f"newstest2019 BLEU {rec.bleu:.2f} ({cmp} {BLEU_MIN:g})")
        call.save()
    if ref.export is None:
        if end - time.monotonic() < finish_estimate_s(ref, plan, "export"):
            call.note("reference", "evaluated; its export is left for the next call")
            return "partial"
        t0 = time.monotonic()
        a = ref.export = export(call, run_dir / "checkpoints" / "last.ckpt")
        _measured_finish(ref, "export", time.monotonic() - t0)
        call.note("reference", f"{a.file}: {a.bytes / 2**20:.1f} MiB; {a.compare}")
    return "done"


def ensure_trained(call: Call, end: float) -> str | None:
    """The reference trained (by `end`, a time.monotonic() value) and its checkpoint in its
    run folder: None, or the stage's status when it is not. A reference trained on a machine
    since released gets its checkpoint from the parts its call returned, or is trained
    again from the newest reference there is."""
    ref = call.state.reference
    run_dir = call.work / RUN
    ref.device = device_record(call.plan)  # the card's "on DEVICE, torch X": this machine's
    if ref.trained and (ref.export is not None or checkpoint_step(run_dir) is not None):
        return None
    start = choose_start(call, run_dir)
    if ref.trained and start.how == "resumed":
        _last_is_the_stop(run_dir)
        call.note("reference", f"trained on a node since released: {start.text}, for "
                               "its evaluation and export")  # fmt: skip
        return None
    if ref.trained:
        call.note("reference", "trained on a node since released, its checkpoint lost: "
                               "trained again")  # fmt: skip
        ref.trained, ref.eval, ref.bleu_reached = False, None, None
    return _train(call, run_dir, end, start)


def _train(call: Call, run_dir: Path, end: float, start: Start, parts: bool = True) -> str | None:
    """One launch from `start`, trained to the round's steps or for the stage's time; None
    when the reference is trained (or stopped for time, one launch: evaluated as it stands),
    else the stage's status. A resume of a returned checkpoint that fails before training a
    step (a vat that refuses it here) falls back once to the newest weights."""
    ref, plan = call.state.reference, call.plan
    one = plan.reference_launches == 1 or ref.round > 1
    if start.how == "scratch":  # a continued run tokenizes with its model's own tokenizer
        prepare_data(call, call.reference_config, call.work)
    if ref.steps is None or (start.how != "resumed" and ref.from_step):
        reference_budget(call.state, plan, one=one, base=start.step).apply(ref)
        ref.from_step = start.step
        call.note("reference", f"{ref.steps:,} steps: {ref.why}")
    assert ref.steps is not None  # set just above, or by an earlier launch
    # one launch: it trains until the evaluation and the export are what is left
    reserve, basis = finish_reserve_s(ref, plan) if one else (0.0, "")
    train_end = end - reserve
    every = val_every(ref, train_end - time.monotonic()) if one else ref.steps
    cmd = train_cmd(call.reference_config, run_dir, ref.steps, one, start.init_from, every,
                    start.trust_cache)  # fmt: skip
    r = TrainRun(RUN, run_dir, cmd, ref.steps, call.logs / "train_reference.log", call.work)
    if one:
        call.note("reference", f"trains until {reserve:.0f} s before the stage's end ({basis}), "
                               f"validating every {every:,} steps")  # fmt: skip
    said = f"resuming {start.carried} (step {start.step:,})" if start.carried else start.text
    call.note("reference", f"launch {len(ref.launches) + 1}: {said}")
    try:
        o = train(call, "reference", [r], train_end)[RUN]
    except KeyboardInterrupt:  # the call's limit: the run saved its state; it travels back
        _carry_checkpoint(call, run_dir, start)
        raise
    if o.launched:
        ref.launches.append(_launch_record(call.state, plan, o, start, run_dir))
    _carry_checkpoint(call, run_dir, start)
    if o.status == "failed" and start.carried and (o.step or 0) <= start.step and parts:
        call.note("reference", f"the returned checkpoint did not resume here ({o.note}); "
                               "continuing from the newest weights instead")  # fmt: skip
        remove_run(run_dir)
        return _train(call, run_dir, end, choose_start(call, run_dir, parts=False), parts=False)
    if o.status == "failed":
        call.note("reference", f"failed ({o.note})")
        return "failed"
    if o.status == "interrupted" and not (one and (o.step or 0) > start.step):
        return "partial"
    if o.status == "interrupted":
        _last_is_the_stop(run_dir)
        call.note(
            "reference",
            f"stopped for time at step {o.step:,} of at most "
            f"{ref.steps:,} (one launch): evaluated as it stands",
        )
    ref.trained = True
    if one:
        ref.tokens = _training(run_dir).get("tokens_seen")
    call.save()
    return None


def choose_start(call: Call, run_dir: Path, parts: bool = True) -> Start:
    """The newest reference this call has (module docstring): this machine's checkpoint or
    the returned one (`parts`: joined from OUT_DIR's parts), both resumed exactly; else the
    newest weights (newest_weights); else from nothing."""
    from vat.runs.run_dir import find_last

    ref = call.state.reference
    step = checkpoint_step(run_dir)
    if step is not None:
        # --init-from the run's own checkpoint resumes it (vat.train.init_from), with the
        # tokenizer the checkpoint holds rather than a BPE trained again on this machine
        own = find_last(run_dir / "checkpoints")
        return Start("resumed", f"{_resumed(step, own)} (its checkpoint here)", step, str(own))
    manifest = ref.checkpoint_parts
    if parts and manifest:
        if run_dir.exists():  # a start that saved no checkpoint: nothing of it to keep
            remove_run(run_dir)
        dest = run_dir / "checkpoints" / manifest.file
        why = carry.join(call.out, manifest, dest)
        step = checkpoint_step(run_dir) if why is None else None
        if why is None and step is None:
            why = "the joined file does not read as a vat checkpoint"
        if why is None:
            n = len(manifest.parts)
            what = f"the checkpoint an earlier call returned, joined from {n} part{'s' * (n > 1)}"
            # the compiled step travels with the parts (carry.py): read, not compiled again,
            # when the call trusts it (it is code)
            trust, said = carry.restore_compile_cache(
                call.out, ref.compile_cache, run_dir, carry.this_machine(call.plan.smoke),
                call.trust_compile_cache,
            )  # fmt: skip
            if said is not None:
                call.note("reference", said)
            return Start("resumed", f"{_resumed(step, dest)} ({what})", step, str(dest),
                         carried=what, trust_cache=trust)  # fmt: skip
        remove_run(run_dir)
        call.note("reference", f"the returned checkpoint (step {manifest.step:,}) cannot be "
                               f"resumed: {why}")  # fmt: skip
    weights = newest_weights(call)
    if weights is not None:
        return weights
    return Start("scratch", "from nothing")


def _resumed(step: int, ckpt: Path) -> str:
    """How a resume from `ckpt` is said: exactly from last.ckpt (saved at the end of a step,
    by a stop too), not from the on_exception.ckpt an error left (perhaps inside a step)."""
    if ckpt.name == "last.ckpt":
        return f"resumed exactly from step {step:,}"
    return f"resumed from step {step:,} ({ckpt.name}, saved where an error stopped it)"


def newest_weights(call: Call) -> Start | None:
    """A fresh run from the newest weights at hand (`--init-from`, the optimizer fresh): the
    exported folder in OUT_DIR/reference.tar (an earlier round's, returned by its call), or
    the shipped model of the reference's name and shape (not in --smoke: its shapes are
    tiny); of the two, the one with more tokens behind it (the returned folder on a tie: it
    holds fp32 weights, a shipped model fp16)."""
    found = []
    tar = call.out / "reference.tar"
    if not tar.is_file():  # moved aside to make room for a later call's files
        tar = call.work / RETURNED / "reference.tar"
    if tar.is_file():
        folder, config = _unpack(call, tar)
        if folder is not None:
            tokens = tokens_behind(config)
            label = f"{tar.name} ({folder.name}, {tokens_text(tokens)} tokens behind it)"
            found.append((tokens or 0, 1, label, str(folder)))
    if not call.plan.smoke:
        shipped = shipped_candidate(call)
        if shipped is not None:
            name, tokens = shipped
            label = f"the shipped {name} ({tokens_text(tokens)} tokens behind it)"
            found.append((tokens or 0, 0, label, name))
    if not found:
        return None
    _, _, label, source = max(found)
    return Start("init_from", f"continued from the weights of {label} (optimizer fresh)", 0,
                 source)  # fmt: skip


def _unpack(call: Call, tar: Path) -> tuple[Path | None, dict[str, Any]]:
    """reference.tar's folder under OUT_DIR/work/start/ and its config.json, or (None, {})
    (said) when it holds no readable exported folder."""
    dest = call.work / START
    remove_listed(dest)  # an earlier unpack's, and nothing else
    try:
        # the plain tar call.pack writes: never decompressed (a 2 MiB gzip wrote 2 GiB)
        with open_regular(tar) as f, read_tar(f, False, TAR_BYTES, TAR_MEMBERS) as (members, tf):
            tops = {Path(m.name).parts[0] for m in members if Path(m.name).parts}
            tf.extractall(dest, filter="data")  # no absolute path or ".." either
        write_listing(dest)
        folder = dest / tops.pop() if len(tops) == 1 else None
        config = json.loads((folder / "config.json").read_text("utf-8")) if folder else None
    except (tarfile.TarError, OSError, EOFError, ValueError, RecursionError) as e:
        call.note("reference", f"{tar.name} holds no readable exported folder ({e}): not "
                               "continued from it")  # fmt: skip
        return None, {}
    if not isinstance(config, dict):
        call.note("reference", f"{tar.name} holds no exported folder: not continued from it")
        return None, {}
    return folder, config


def shipped_candidate(call: Call) -> tuple[str, int | None] | None:
    """(name, tokens behind it) of the shipped model named as the reference is, when vat
    ships one of the reference config's shape; None otherwise (a model of another shape is
    said: `vat train --init-from` would refuse it)."""
    from vat.share.pretrained import shipped_model

    name = suggested_name(call.plan)
    try:
        entry = shipped_model(name)
        config = entry.config if entry is not None else None
    except VatError as e:
        call.note("reference", f"the shipped {name} cannot be read ({e}): not continued from it")
        return None
    if config is None:
        return None
    differs = shape_difference(call.reference_config, config)
    if differs:
        call.note("reference", f"the shipped {name} is not this config's shape ({differs}): "
                               "not continued from it")  # fmt: skip
        return None
    return name, tokens_behind(config)


def shape_difference(config_path: Path, model: dict[str, Any]) -> str | None:
    """The first architecture key the train config sets otherwise than the model's
    config.json (what `vat train --init-from` would refuse), as "key: MODEL there, CONFIG
    here"; None when the model fits the config."""
    cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    mc = model.get("model_config") or {}
    arch = {k: v for k, v in (cfg["model"].get("arch") or {}).items() if k != "dropout"}
    arch["vocab_size"] = cfg["data"]["vocab_size"]
    for key, value in arch.items():
        if key in mc and mc[key] != value:
            return f"{key}: {mc[key]} there, {value} here"
    max_len = cfg["data"].get("max_len")
    if max_len is not None and mc.get("max_len") is not None and mc["max_len"] < max_len:
        return f"max_len: {mc['max_len']} there, {max_len} here"
    prior = (cfg["model"].get("loss") or {}).get("prior_std")
    if prior is not None and model.get("prior_std") is not None:
        if not math.isclose(float(model["prior_std"]), float(prior), rel_tol=1e-6):
            return f"prior_std: {model['prior_std']} there, {prior} here"
    return None


def tokens_behind(config: dict[str, Any]) -> int | None:
    """The non-pad tokens behind an exported model (its config.json training record): the
    total of a continued run, else its own."""
    t = config.get("training") or {}
    value = t.get("tokens_total", t.get("tokens_seen"))
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def begin_round(call: Call) -> bool:
    """A call whose --stages names the reference finds it finished: it trains it further
    (another round: one launch for the call's time, from the newest reference), evaluates
    and exports it again. The finished round is kept in `rounds`; True when one began."""
    ref, st = call.state.reference, call.state.stages["reference"]
    if st.status != "done" or ref.export is None or ref.eval is None:
        return False
    n, e = ref.round, ref.eval
    total = ref.tokens_total or ref.tokens
    ref.rounds.append(RoundRecord(round=n, step=e.step, tokens_total=total, bleu=e.bleu,
                                  ended=now_iso()))  # fmt: skip
    ref.round, ref.from_step = n + 1, 0
    ref.steps, ref.tokens, ref.basis, ref.floor_tokens, ref.why = None, None, None, None, None
    ref.trained, ref.eval, ref.bleu_reached, ref.export = False, None, None, None
    st.status, st.seconds = "pending", 0.0  # the stage's share is per round
    call.note("reference", f"finished at step {e.step:,} (BLEU {e.bleu:.2f}, "
                           f"{tokens_text(total)} tokens): round {n + 1} trains it further "
                           "(--stages names the reference)")  # fmt: skip
    return True


def device_record(plan: Plan) -> DeviceRecord:
    """The device, torch and CUDA this stage runs on (the card names them; the facts stage
    may not have run in this call: the 2026-11-27 card said "on n/a, torch n/a")."""
    import torch

    gpu = not plan.smoke and torch.cuda.is_available()
    return DeviceRecord(
        device=torch.cuda.get_device_name() if gpu else "CPU",
        torch=torch.__version__,
        cuda=torch.version.cuda,
    )


def _carry_checkpoint(call: Call, run_dir: Path, start: Start) -> None:
    """The run's newest checkpoint into OUT_DIR as parts (carry.py), and its compile cache
    as one more file, their manifests and the tokens behind the model into the report: after
    every launch that trained, so that the call's returned files continue the reference on
    any machine."""
    from vat.runs.run_dir import find_last

    ref = call.state.reference
    last = find_last(run_dir / "checkpoints")
    step = checkpoint_step(run_dir)
    if last is None or step is None or (start.how == "resumed" and step <= start.step):
        return  # nothing trained here: the returned parts, if any, still hold it
    ref.checkpoint_parts = carry.split(last, call.out, step)
    ref.compile_cache, why = carry.pack_compile_cache(run_dir, call.out)
    if why is not None:
        call.note("reference", why)
    call.parts_written = True
    t = _training(run_dir, last.name)
    ref.tokens_total = t.get("tokens_total", t.get("tokens_seen"))
    call.save()


def reference_budget(
    state: Report, plan: Plan, one: bool | None = None, base: int = 0
) -> ReferenceBudget:
    """The reference's steps (the run's trainer.max_steps): plan.reference_min_tokens non-pad
    tokens (the floor), or what the measured tokens/s trains in the stage's share (the time
    share) when that is less. The share pays plan.reference_launches start-ups, one
    evaluation, the export and one stop (the recipe's first call ends it). One launch (the
    short plan, a later round: `one`) trains for its time, the steps only a ceiling, counted
    on from `base`, the step it resumes."""
    m = measured_throughput(state, plan)
    floor = plan.reference_min_tokens
    if one if one is not None else plan.reference_launches == 1:
        # one launch trained for its time (the short plan): the steps are only a ceiling
        ceiling = math.ceil(floor / m[2]) if m else plan.reference_steps_default
        more = f" more than the {base:,} it resumes" if base else ""
        return ReferenceBudget(
            steps=base + ceiling, tokens=None, basis="time", floor_tokens=floor,
            why=f"one launch trained until the stage's time is spent, at most {ceiling:,} "
            f"steps{more} (the recipe's; the 8k throughput when measured sizes the "
            f"{tokens_text(floor)}-token floor); its tokens are read from its checkpoint",
        )  # fmt: skip
    if m is None:
        steps = plan.reference_steps_default
        return ReferenceBudget(
            steps=steps,
            tokens=None,
            basis="default",
            floor_tokens=floor,
            why=f"default {steps:,} steps (no 8k throughput measured)",
        )
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
    return ReferenceBudget(steps=steps, tokens=round(tokens), basis=basis, floor_tokens=floor,
                           why=why)  # fmt: skip


def _launch_record(state: Report, plan: Plan, o: Outcome, start: Start, run_dir: Path) -> Launch:
    """One launch: where it started, its seconds, the steps it trained, the tokens behind
    the model after it, and its overhead (seconds not spent on steps at the measured
    tokens/s: start-up, compile, validation, stop), which sizes later launches
    (runs.launch_overhead_s)."""
    trained = max((o.step or 0) - start.step, 0)
    how, text = start.how, start.text
    if start.carried and o.status == "failed" and not trained:  # vat refused it, say
        how, text = None, f"did not resume {start.carried} (step {start.step:,}): {o.note}"
    m = measured_throughput(state, plan)
    overhead = None
    if m is not None and trained:
        overhead = round(max(o.seconds - trained * m[2] / m[1], 0.0), 1)
    t = _training(run_dir) if o.step is not None else {}
    return Launch(started=now_iso(), seconds=round(o.seconds, 1), steps=trained, step=o.step,
                  overhead_s=overhead, status=o.status,
                  logged_tokens_per_s=logged_tokens_per_s(run_dir, start.step),
                  round=state.reference.round, how=how, start=text,
                  from_step=start.step, tokens_total=t.get("tokens_total", t.get("tokens_seen")),
                  time_split=o.time_split)  # fmt: skip


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


def finish_estimate_s(ref: Reference, plan: Plan, part: str) -> float:
    """Seconds the evaluation (`part` "eval") or the export will take: 1.25 x what an
    earlier round measured for this model, else the plan's estimate."""
    measured_s = getattr(ref.finish_s, part)
    if measured_s is None:
        return plan.eval_run_s if part == "eval" else plan.export_s
    return FINISH_FACTOR * measured_s


def finish_reserve_s(ref: Reference, plan: Plan) -> tuple[float, str]:
    """(seconds, why): what one launch leaves at the stage's end for the evaluation and the
    export, measured (FINISH_FACTOR, FINISH_MARGIN_S) once both have been, else the plan's
    estimates and ONE_LAUNCH_MARGIN_S."""
    done = ref.finish_s
    if done.eval is not None and done.export is not None:
        s = FINISH_FACTOR * (done.eval + done.export) + FINISH_MARGIN_S
        why = (
            f"this model's evaluation and export measured {done.eval:.0f} + "
            f"{done.export:.0f} s, x {FINISH_FACTOR:g} + {FINISH_MARGIN_S:.0f} s"
        )
        return s, why
    s = plan.eval_run_s + plan.export_s + ONE_LAUNCH_MARGIN_S
    why = (
        f"not yet measured: the plan's {plan.eval_run_s:.0f} s evaluation + "
        f"{plan.export_s:.0f} s export + {ONE_LAUNCH_MARGIN_S:.0f} s"
    )
    return s, why


def _measured_finish(ref: Reference, part: str, seconds: float) -> None:
    setattr(ref.finish_s, part, round(seconds, 1))


def val_every(ref: Reference, train_s: float) -> int:
    """Steps between validations of one launch stopped for time: VALIDATIONS_PER_LAUNCH over
    the steps it is expected to train (the last launch's steps per second, its start-up
    included, times `train_s`), at least MIN_VAL_EVERY; VAL_EVERY_ONE_LAUNCH when no launch
    has been measured."""
    rates = [la.steps / la.seconds for la in ref.launches if la.steps and la.seconds]
    if not rates:
        return VAL_EVERY_ONE_LAUNCH
    expected = rates[-1] * max(train_s, 0.0)
    return max(MIN_VAL_EVERY, int(expected // VALIDATIONS_PER_LAUNCH))


def train_cmd(
    config: Path,
    run_dir: Path,
    steps: int,
    one_launch: bool = False,
    init_from: str | None = None,
    every: int | None = None,
    trust_cache: bool = False,
) -> list[str]:
    """`vat train` of the reference (started in OUT_DIR/work: its config's data paths are
    relative to it), `--init-from` the model it continues (choose_start) when given, and
    `--trust-compile-cache` when the run folder holds a carried compile cache the call trusts
    (vat loads one it did not sign only then)."""
    # one validation, at the end; a launch stopped for time (the short plan) validates
    # `every` steps (val_every), so that its validation KL and NLL exist when it stops
    if every is None:
        every = min(steps, VAL_EVERY_ONE_LAUNCH) if one_launch else steps
    every = min(steps, every)
    return [
        sys.executable, "-m", "vat", "train", "-c", str(config), "--run_dir", str(run_dir),
        "--trainer.max_steps", str(steps),
        "--trainer.max_time", "null",
        "--trainer.val_check_interval", str(every),
        # a SIGKILL (not the SIGINT a stop sends, which saves) loses at most a tenth
        "--checkpoint.every_n_train_steps", str(max(1, steps // 10)),
        "--ckpt_path", "last",
        *(["--init-from", init_from] if init_from else []),
        *(["--trust-compile-cache"] if trust_cache else []),
    ]  # fmt: skip


def _last_is_the_stop(run_dir: Path) -> None:
    """A run stopped by a signal writes last.ckpt at the end of the step it was in
    (vat.train.interrupt); an older vat, and an error, left on_exception.ckpt instead, which
    `--ckpt_path last` resumes (find_last) but which the evaluation and the export, reading
    checkpoints/last.ckpt, would miss: when it is the newer, it becomes last.ckpt (copied,
    then renamed into place)."""
    from vat.runs.run_dir import find_last

    newest = find_last(run_dir / "checkpoints")
    if newest is not None and newest.name != "last.ckpt":
        copy_atomic(newest, newest.with_name("last.ckpt"))


def _training(run_dir: Path, name: str = "last.ckpt") -> dict[str, Any]:
    """The training record of the run's checkpoint `name` (tokens_seen: the non-pad tokens
    this run trained on; tokens_total: with those behind the model it started from, for a
    run started `--init-from`); {} when unreadable."""
    from vat.share.checkpoint import read_checkpoint

    try:
        ckpt = read_checkpoint(run_dir / "checkpoints" / name)
    except VatError:
        return {}
    return dict((ckpt.get("vat") or {}).get("training") or {})


def suggested_name(plan: Plan) -> str:
    """The registry name the report suggests, for what the model is: English of WMT's news
    test sets 2008-2017 and Tatoeba (with Multi30k), at width d."""
    d = plan.config_overrides.get("model.arch.d_model", 128)
    return f"wmt-tatoeba-en-d{d}"


def export(call: Call, ckpt: Path) -> Export:
    """`vat export CKPT FOLDER --evaluate STS12,STSBenchmark` (the folder's own features
    scored, on its card), the suite's measurements added to the card, the folder packed as
    OUT_DIR/reference.tar; and the line that adds it to the registry, or replaces the
    shipped model of its name when it is better (registry_lines)."""
    from vat.cli.export import main as export_main

    name = suggested_name(call.plan)
    folder = (call.work / "export" / name).resolve()
    argv = [str(ckpt), str(folder), "--overwrite", "--evaluate", EXPORT_TASKS]
    argv += ["--data-dir", str(call.data_dir / "senteval")]
    with contextlib.redirect_stdout(io.StringIO()):
        run_vat(export_main, argv, f"vat export {' '.join(argv)}")
    e = call.state.reference.eval
    assert e is not None  # the stage exports what it evaluated
    evaluation = _folder_config(folder).get("evaluation", [])
    scores = {s["task"]: measured(s["value"] / 100) for s in evaluation}
    e.extra_sts["default_spec"] = ExtraSts(
        # the folder's own features: vat export's default spec, as --features gives it
        options=["--features", DEFAULT_EXPORT_SPEC],
        sts12=scores.get("STS12"),
        stsb=scores.get("STSBenchmark"),
    )
    write_json_atomic(call.work / RUN / "suite_eval.json", schema.write(e))
    _add_to_card(folder, call.state)
    tar = call.out / "reference.tar"
    pack(tar, folder, arcname=name)
    size = tar.stat().st_size
    return Export(
        name=name,
        folder=str(folder),
        file=tar.name,
        folder_in_tar=name,
        bytes=size,
        within_16_mib=size <= MAX_OUT_FILE,
        **registry_lines(name, folder, tar.name, e.bleu, e.bleu_lines),
    )


def registry_lines(
    name: str, folder: Path, tar_name: str, bleu: float, lines: int
) -> dict[str, Any]:
    """The line that adds the exported folder to the registry when vat ships no model of
    its name; when it ships one, the line that replaces it (`--overwrite`) only if this
    newstest2019 BLEU is higher than every BLEU its config.json records on as many lines
    (measurements: the suite's, and any measured since, e.g. with the shipped float16
    weights); else why it stays, or why the two cannot be compared. `compare` says which."""
    from vat.share.pretrained import shipped_model

    built = registry_commands(name, folder, tar_name, False)
    assert built is not None  # the plan's name and reference.tar
    add, from_tar = built
    none = {"registry_command": None, "registry_command_from_tar": None, "shipped_bleu": None}
    try:
        entry = shipped_model(name)
        config = entry.config if entry is not None else None
    except VatError as e:
        return {**none, "compare": f"cannot compare with the shipped {name}: {e}"}
    if config is None:
        return {"registry_command": add, "registry_command_from_tar": from_tar,
                "shipped_bleu": None, "compare": f"vat ships no {name} yet: add it"}  # fmt: skip
    recorded = recorded_bleu(config)
    same = [b for b, n in recorded if n == lines]
    if not same:
        why = (
            f"its BLEU is over {recorded[0][1]} newstest2019 lines, this one over {lines}"
            if recorded
            else "its config.json records no newstest2019 BLEU (measurements)"
        )
        return {**none, "compare": f"cannot compare with the shipped {name}: {why}; it stays"}
    old = max(same)
    if round(bleu, 2) > old:
        return {"registry_command": f"{add} --overwrite",
                "registry_command_from_tar": f"{from_tar} --overwrite", "shipped_bleu": old,
                "compare": f"newstest2019 BLEU {bleu:.2f} > the shipped {name}'s {old:.2f}: "
                "replace it"}  # fmt: skip
    return {**none, "shipped_bleu": old, "compare": f"newstest2019 BLEU {bleu:.2f}, not above "
            f"the shipped {name}'s {old:.2f}: the shipped model stays"}  # fmt: skip


def recorded_bleu(config: dict[str, Any]) -> list[tuple[float, int]]:
    """(BLEU, lines) of every newstest2019 row an exported folder's config.json records in
    its measurements (rows that hold no number, "n/a", are left out)."""
    found = []
    for m in config.get("measurements") or []:
        for row in (m.get("rows") or []) if isinstance(m, dict) else []:
            if not (isinstance(row, list | tuple) and len(row) == 2):
                continue
            hit = BLEU_ROW_RE.fullmatch(str(row[0]))
            try:
                if hit:
                    found.append((float(row[1]), int(hit.group(1))))
            except ValueError:
                continue
    return found


def _folder_config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def _add_to_card(folder: Path, state: Report) -> None:
    """The suite's measurements (BLEU, the rate, STS with each pooling, the budget and the
    device) go into the folder's config.json and its card (vat.share.folder
    .record_measurements), so that `python scripts/add_pretrained.py` and a Hub upload keep them."""
    ref = state.reference
    f = ref.device or state.facts
    e = ref.eval
    assert e is not None  # the card records what the stage evaluated
    budget = ""
    if ref.tokens and ref.basis:
        budget = f" ({tokens_text(ref.tokens)} non-pad tokens, {ref.basis.replace('_', ' ')})"
    starts = [la.start for la in ref.launches if (la.round or 1) == ref.round and la.how]
    began = f"; {starts[0]}" if starts else ""
    total = ref.tokens_total
    behind = f"; {tokens_text(total)} non-pad tokens behind the model" if total else ""
    device, torch_, cuda = (f.device, f.torch, f.cuda) if f else ("n/a", "n/a", None)
    text = (
        f"`bench/gpu_suite.sh` (stage `reference`, {now_iso()}) on {device}, "
        f"torch {torch_}, CUDA {cuda or 'none'}: {ref.config} with "
        f"{ref.key} {ref.target_kl:g}, {e.step:,} steps{budget}{began}{behind}."
    )
    rows = [
        (BLEU_ROW.format(n=e.bleu_lines), fmt(e.bleu)),
        (f"BLEU, lines of at most {LONG_OVER} subwords", fmt(e.bleu_short)),
        (f"BLEU, the {e.lines_long} longer lines", fmt(e.bleu_long)),
        ("validation KL (nats per token) / NLL", f"{fmt(e.val_kl)} / {fmt(e.val_nll, '.3f')}"),
        ("active units", str(e.active_units)),
    ]
    for pooling, s in e.sts.items():
        rows.append((f"STS12 / STS-B Spearman x 100, {pooling} pooling of mu",
                     f"{fmt(s.sts12, '.2f', 100)} / {fmt(s.stsb, '.2f', 100)}"))  # fmt: skip
    d = e.extra_sts.get("default_spec")
    if d:
        rows.append(("STS12 / STS-B Spearman x 100, this folder's features",
                     f"{fmt(d.sts12, '.2f', 100)} / {fmt(d.stsb, '.2f', 100)}"))  # fmt: skip
    record_measurements(folder, "Measured by vat's GPU suite", text, rows)


def check_reference_files(call: Call) -> None:
    """A report carried to a fresh machine: a reference trained (or half trained) there but
    not exported has lost its checkpoints, so it is trained again (same steps), unless the
    call that trained it returned its checkpoint (the stage joins the parts, or falls back
    to the newest weights when they are unusable)."""
    ref, st = call.state.reference, call.state.stages["reference"]
    if st.status not in ("done", "partial") or ref.export is not None:
        return
    if not (call.work / RUN).is_dir() and not ref.checkpoint_parts:
        st.status, st.seconds = "pending", 0.0
        ref.trained, ref.eval, ref.bleu_reached = False, None, None
        call.note("reference", "its checkpoints are gone (a fresh machine): retraining")
