"""What OUT_DIR/gpu_report.json holds: the report and each stage's records, as typed fields.

The types are the schema (schema.py reads and writes them): a stage that writes a new field
declares it here, with a default or `absent()` so that a report written before it still
loads (the smoke suite's test checks a full report against these types). The JSON keys are
the field names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from bench.gpu_suite.schema import Matches, NonEmpty, Range, Record, absent

NonNegative = Annotated[float, Range(0)]
Seconds = NonNegative
Positive = Annotated[float, Range(0, strict=True)]
Count = Annotated[int, Range(0)]
FromOne = Annotated[int, Range(1)]
"""A step budget, a round, a vocabulary size: a whole number from 1."""
Loss = NonNegative | None
"""A measured KL or NLL (nats per token); null when not measured."""
Spearman = Annotated[float, Range(-1, 1)] | None
"""A measured Spearman correlation; null when not measured, or when it came out NaN (a
constant encoder: frontier_eval records it as null)."""
Bleu = Annotated[float, Range(0, 100)]
SHA256_RE = re.compile(r"[0-9a-f]{64}")
Sha256 = Annotated[str, Matches(SHA256_RE, "64 hex digits")]

# A checkpoint part's name (carry.py), numbered from 1: only these names pass in a manifest,
# so that a hand-edited report cannot make the suite read or write outside OUT_DIR. The names
# live in out_files.py, which the wrapper's copy reads without vat.
from bench.gpu_suite.out_files import CACHE_PACK, PART_PREFIX, PART_RE  # noqa: E402, F401

StageStatus = Literal["pending", "done", "partial", "skipped", "failed"]
"""A stage's status (state.py's runner, each stage's run())."""
LaunchStatus = Literal["trained", "interrupted", "failed"]


# -- the calls ------------------------------------------------------------------------------
@dataclass(kw_only=True)
class TimeSplit(Record):
    """Where a launch's seconds went (vat.callbacks.time_split, runs.launch_split)."""

    total_s: Seconds
    setup_s: Seconds
    compile_s: Seconds
    training_s: Seconds
    validation_s: Seconds
    checkpoint_s: Seconds
    other_s: Seconds
    first_step_s: Seconds | None = None
    steps: Count | None = absent()
    validations: Count | None = absent()
    checkpoint_saves: Count | None = absent()
    ended: Literal["finished", "stopped", "failed"] | None = absent()


@dataclass(kw_only=True)
class CallLaunch(Record):
    """Each `vat train` a call launched (runs.record_launch)."""

    stage: str
    run: str
    seconds: Seconds
    step: Count | None
    status: LaunchStatus
    time_split: TimeSplit | None


@dataclass(kw_only=True)
class CallRecord(Record):
    """One call of the suite on OUT_DIR (state.Suite.run)."""

    started: str
    budget_min: NonNegative | None = absent()
    stages: list[str] | None = absent()
    command: str
    allotted_s: dict[str, Seconds]
    used_s: dict[str, Seconds]
    exit: int | None = None
    """None: not recorded (the call was killed, or is running)."""
    launches: list[CallLaunch] | None = absent()


@dataclass(kw_only=True)
class StageRecord(Record):
    status: StageStatus
    seconds: Seconds
    """Spent on the stage over every call (of this round, for the reference)."""
    notes: list[str]


@dataclass(kw_only=True)
class Facts(Record):
    """The device (facts.py)."""

    device: str
    torch: str
    cuda: str | None
    cudnn: Count | None = None
    python: str | None = absent()
    gpu_memory_gib: NonNegative | None = None
    cpu_count: Count | None = None
    bf16_matmul_tflops: NonNegative | None
    bf16_matmul: str


# -- throughput (bench/bench_train_side_by_side.py's result, per variant) ---------------------
@dataclass(kw_only=True)
class LoopResult(Record):
    """One loop's figures in a vocabulary's result (the bench's other figures kept as read)."""

    tokens_per_s: Positive
    mfu: NonNegative | None
    hours_for_3e9_tokens: NonNegative
    recompiles: list[Count | None] | None = None
    compiled_graphs: Any = absent()
    first_recompile_reasons: list[str] | None = absent()


@dataclass(kw_only=True)
class VocabResult(Record):
    vocab_size: FromOne
    compile: bool
    fused_cross_entropy: bool
    timed_nonpad_tokens: NonNegative
    ratio_vat_over_plain: NonNegative
    vat: LoopResult
    plain: LoopResult


@dataclass(kw_only=True)
class VariantResult(Record):
    timed_steps: FromOne
    vocabs: Annotated[list[VocabResult], NonEmpty()]


@dataclass(kw_only=True)
class VariantRecord(Record):
    """One throughput variant (throughput.run)."""

    status: Literal["done", "skipped", "timed_out", "failed"]
    note: str | None = absent()
    final: bool | None = absent()
    """A variant stopped after FINAL_TIMEOUT_S: not tried again."""
    seconds: Seconds | None = absent()
    result: VariantResult | None = absent()

    def broken(self) -> tuple[str, str] | None:
        if self.status == "done" and self.result is None:
            return "result", "present for a finished variant"
        return None


@dataclass(kw_only=True)
class ThroughputRow(Record):
    """One finished variant's loop, a row of the report's table (throughput.throughput_rows)."""

    variant: str
    vocab: FromOne
    compile: bool
    fused_cross_entropy: bool
    loop: Literal["vat", "plain"]
    tokens_per_s: Positive
    vat_over_plain: NonNegative | None
    mfu: NonNegative | None
    hours_for_3e9_tokens: NonNegative | None
    recompiles: list[Count | None] | None
    compiled_graphs: Any
    first_recompile_reasons: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Target(Record):
    target: NonNegative
    measured: NonNegative | None
    variant: str | None
    reached: bool | None


@dataclass(kw_only=True)
class ProfiledOp(Record):
    op: str
    calls_per_step: NonNegative
    device_ms_per_step: NonNegative
    cpu_ms_per_step: NonNegative


@dataclass(kw_only=True)
class ProfiledLoop(Record):
    """One loop's profile (bench_train_side_by_side.StepProfiler): its figures, or `error`."""

    error: str | None = absent()
    steps: Count | None = absent()
    wall_ms_per_step: NonNegative | None = absent()
    device_ms_per_step: NonNegative | None = absent()
    syncs_per_step: NonNegative | None = None
    sync_sites: dict[str, NonNegative] | None = absent()
    cuda_sync_calls_per_step: dict[str, NonNegative] | None = absent()
    aten_calls_per_step: NonNegative | None = absent()
    top_ops: list[ProfiledOp] | None = absent()


@dataclass(kw_only=True)
class Profile(Record):
    """Both loops profiled in the first eager variant (throughput.profile_record)."""

    status: Literal["done", "skipped", "stopped", "failed"]
    variant: str
    note: str | None = absent()
    warmup_steps: Count | None = absent()
    steps: Count | None = absent()
    sync_debug_mode: bool | None = absent()
    vat: ProfiledLoop | None = absent()
    log_every_n_steps: Count | None = absent()
    plain: ProfiledLoop | None = absent()


@dataclass(kw_only=True)
class Throughput(Record):
    variants: dict[str, VariantRecord]
    not_run: dict[str, str]
    targets: dict[str, Target]
    rows: list[ThroughputRow] | None = absent()
    compile_diagnosis: list[str] | None = absent()
    profile: Profile | None = absent()


# -- a trained run's evaluation (frontier_eval.evaluate_run), the reference's and each run's --
@dataclass(kw_only=True)
class Sts(Record):
    sts12: Spearman
    stsb: Spearman


@dataclass(kw_only=True)
class ExtraSts(Record):
    """STS with further `vat evaluate` options (a feature spec)."""

    options: list[str]
    sts12: Spearman
    stsb: Spearman


@dataclass(kw_only=True)
class Evaluation(Record):
    """A trained run's record (also its folder's suite_eval.json)."""

    run: str
    target_kl: NonNegative
    step: Count
    checkpoint: str
    val_kl: Loss
    val_nll: Loss
    val_step: Count | None = None
    """The step of the last validation, where val_kl and val_nll come from (a run stopped for
    time validated before its last step)."""
    active_units: Count | None
    kl_per_token_probe: Loss = None
    sts: dict[str, Sts]
    """By pooling: the table prints mean and precision; a further one is compared too."""
    extra_sts: dict[str, ExtraSts]
    bleu: Bleu
    bleu_lines: Count
    bleu_short: Bleu | None
    bleu_long: Bleu | None
    lines_long: Count

    def broken(self) -> tuple[str, str] | None:
        missing = [p for p in ("mean", "precision") if p not in self.sts]
        return (f"sts.{missing[0]}", "present") if missing else None


# -- the reference --------------------------------------------------------------------------
@dataclass(kw_only=True)
class Launch(Record):
    """One launch of the reference (reference._launch_record)."""

    started: str
    seconds: Seconds
    steps: Count
    step: Count | None
    overhead_s: Seconds | None
    status: LaunchStatus
    logged_tokens_per_s: NonNegative | None = None
    """vat's own train/tokens_per_s over the launch's second half (its log): vat's loop speed
    with the reference's recipe (compiled, bf16) when the throughput stage has not run."""
    round: FromOne | None = absent()
    how: Literal["resumed", "init_from", "scratch"] | None = absent()
    """Where it started (reference.choose_start); None: nowhere, vat train refused to resume
    the checkpoint an earlier call returned (`start` says why)."""
    start: str | None = absent()
    from_step: Count | None = absent()
    tokens_total: NonNegative | None = None
    """The tokens behind the model after it."""
    time_split: TimeSplit | None = None


@dataclass(kw_only=True)
class Export(Record):
    """The reference's exported folder (reference.export)."""

    name: str
    folder: str
    file: str
    folder_in_tar: str
    bytes: Count
    within_16_mib: bool
    registry_command: str | None
    """None: vat ships a model of that name that this one does not beat (`compare` says)."""
    registry_command_from_tar: str | None
    shipped_bleu: Bleu | None = None
    compare: str | None = absent()


@dataclass(kw_only=True)
class Part(Record):
    name: Annotated[str, Matches(PART_RE, "reference.ckpt.partN (N from 1)")]
    bytes: Count
    sha256: Sha256


@dataclass(kw_only=True)
class CheckpointParts(Record):
    """The reference's checkpoint as returned parts (carry.split)."""

    file: Literal["last.ckpt", "on_exception.ckpt"]
    step: Count
    bytes: Count
    sha256: Sha256
    parts: Annotated[list[Part], NonEmpty()]


@dataclass(kw_only=True)
class CacheRecord(Record):
    """The machine a compile cache was saved on (vat.train.compile_cache.MATCHED)."""

    torch: str
    cuda: str | None
    triton: str | None
    python: str
    device: str


@dataclass(kw_only=True)
class CompileCachePack(Record):
    """The reference's compile cache as one returned file (carry.pack_compile_cache)."""

    file: Literal[CACHE_PACK]  # type: ignore[valid-type]  # one name only
    bytes: Count
    sha256: Sha256
    record: CacheRecord


@dataclass(kw_only=True)
class RoundRecord(Record):
    """A finished round of the reference (reference.begin_round)."""

    round: FromOne
    step: Count
    tokens_total: NonNegative | None
    bleu: Bleu
    ended: str | None = absent()


@dataclass(kw_only=True)
class DeviceRecord(Record):
    device: str
    torch: str
    cuda: str | None


@dataclass(kw_only=True)
class FinishSeconds(Record):
    """Seconds this model's evaluation and export took (reference.finish_reserve_s)."""

    eval: Seconds | None = absent()
    export: Seconds | None = absent()


Basis = Literal["floor", "time_share", "default", "time"]


@dataclass(kw_only=True)
class Reference(Record):
    """The reference model (reference.py). The fields with defaults came later, with
    a reference continued across calls (absent in older reports)."""

    config: str
    key: str
    target_kl: NonNegative
    steps: FromOne | None
    tokens: NonNegative | None
    basis: Basis | None
    floor_tokens: NonNegative | None
    why: str | None
    launches: list[Launch]
    trained: bool
    eval: Evaluation | None
    bleu_min: Bleu
    bleu_reached: bool | None
    export: Export | None
    round: FromOne = 1
    rounds: list[RoundRecord] = field(default_factory=list)
    from_step: Count = 0
    tokens_total: NonNegative | None = None
    device: DeviceRecord | None = None
    checkpoint_parts: CheckpointParts | None = None
    compile_cache: CompileCachePack | None = None
    finish_s: FinishSeconds = field(default_factory=FinishSeconds)

    def broken(self) -> tuple[str, str] | None:
        if self.steps is not None and self.basis is None:
            return "basis", "set once the steps are (floor, time_share, default or time)"
        if self.steps is not None and self.why is None:
            return "why", "set once the steps are"
        return None


# -- the frontier ----------------------------------------------------------------------------
@dataclass(kw_only=True)
class Brief(Record):
    """A run named best (frontier_eval.pick_best)."""

    run: str
    bleu: Bleu
    stsb: Spearman
    pooling: str
    why: str | None = absent()


@dataclass(kw_only=True)
class BestExports(Record):
    best_sts: Brief | None = absent()
    best_bleu: Brief | None = absent()


@dataclass(kw_only=True)
class Best(Record):
    bleu_min: Bleu
    best_sts_at_bleu_min: Brief | None
    verdict: str | None = absent()
    export: BestExports


@dataclass(kw_only=True)
class FrontierRun(Record):
    seconds: Seconds | None = absent()
    trained: bool | None = absent()
    eval: Evaluation | None = absent()


@dataclass(kw_only=True)
class Frontier(Record):
    key: str
    values: list[NonNegative]
    steps: FromOne | None
    steps_from: str | None
    runs: dict[str, FrontierRun]
    best: Best | None
    plot: str | None = absent()

    def broken(self) -> tuple[str, str] | None:
        """The runs the best names are runs the frontier evaluated (artefacts exports their
        checkpoints)."""
        export = self.best.export if self.best else BestExports()
        for brief in (export.best_sts, export.best_bleu):
            run = self.runs.get(brief.run) if brief else None
            if brief and (run is None or run.eval is None):
                return "best.export", "runs the frontier evaluated"
        return None


@dataclass(kw_only=True)
class Artefact(Record):
    """An exported frontier run (artefacts.py): its brief, then its file."""

    run: str
    bleu: Bleu | None = absent()
    stsb: Spearman = None
    pooling: str | None = absent()
    why: str
    file: str
    folder_in_tar: str
    bytes: Count
    within_16_mib: bool | None = absent()


# -- the report ------------------------------------------------------------------------------
@dataclass(kw_only=True)
class Report(Record):
    """OUT_DIR/gpu_report.json (state.new_state; each stage fills in its part)."""

    schema: int
    mode: Literal["smoke", "gpu"]
    calls: list[CallRecord]
    stages: dict[str, StageRecord]
    """By stage, in the order they run (state.STAGES; state.read_report checks each is here)."""
    facts: Facts | None
    throughput: Throughput
    reference: Reference
    frontier: Frontier
    artefacts: dict[str, Artefact]
