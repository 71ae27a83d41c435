"""What every field of OUT_DIR/gpu_report.json holds, checked when a report is read back.

A report is read back by the next call on the same OUT_DIR, and by `--seed` on a fresh
machine. Every stage and the Markdown report then read its fields as the suite wrote them: a
report of the right schema whose fields were broken since (by hand, by a tool, by a partial
copy) stopped a call mid-way with a KeyError or TypeError, or rendered NaN seconds and
negative step counts as if measured. So each field is checked here, before any stage runs,
and the first broken one is one line naming the file and the field's path in the report
(`report.reference.launches[0].seconds`). Fields a stage adds later are listed as optional:
a report written by an earlier call that stopped anywhere passes.

The spec is the suite's own record of what it writes: a stage that writes a new field adds
it here (the smoke suite's test checks a full report against it)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from bench.gpu_suite.carry import CACHE_PACK, PART_RE

SHA256_RE = re.compile(r"[0-9a-f]{64}")


class Broken(Exception):
    """`field` (its path in the report) is not `expected`."""

    def __init__(self, field: str, expected: str) -> None:
        super().__init__(f"'{field}' must be {expected}")
        self.field, self.expected = field, expected


class Spec:
    """One field's kind; check() raises Broken for a value that is not of it."""

    def check(self, value: Any, field: str) -> None:
        raise NotImplementedError


class Any_(Spec):
    def check(self, value: Any, field: str) -> None:
        return None


class Str(Spec):
    def check(self, value: Any, field: str) -> None:
        if not isinstance(value, str):
            raise Broken(field, "a string")


class Bool(Spec):
    def check(self, value: Any, field: str) -> None:
        if not isinstance(value, bool):
            raise Broken(field, "true or false")


class Num(Spec):
    """A finite number (JSON allows NaN and Infinity; the suite never writes them) in
    [low, high] (above low when `strict`); `whole`: an integer."""

    def __init__(
        self,
        low: float | None = None,
        high: float | None = None,
        strict: bool = False,
        whole: bool = False,
    ) -> None:
        self.low, self.high, self.strict, self.whole = low, high, strict, whole

    def check(self, value: Any, field: str) -> None:
        kinds = int if self.whole else int | float
        ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
        if ok and self.low is not None:
            ok = value > self.low if self.strict else value >= self.low
        if ok and self.high is not None:
            ok = value <= self.high
        if not ok:
            what = "a whole number" if self.whole else "a finite number"
            if self.low is not None and self.high is not None:
                what += f" in [{self.low:g}, {self.high:g}]"
            elif self.low is not None:
                what += f" {'>' if self.strict else '>='} {self.low:g}"
            raise Broken(field, what)


class OneOf(Spec):
    def __init__(self, *values: str) -> None:
        self.values = values

    def check(self, value: Any, field: str) -> None:
        if value not in self.values or not isinstance(value, str):
            raise Broken(field, f"one of {', '.join(self.values)}")


class Match(Spec):
    """A string the whole of which `pattern` (a compiled regex) matches; `what` says it."""

    def __init__(self, pattern: Any, what: str) -> None:
        self.pattern, self.what = pattern, what

    def check(self, value: Any, field: str) -> None:
        if not isinstance(value, str) or not self.pattern.fullmatch(value):
            raise Broken(field, self.what)


class Null(Spec):
    """null, or `spec`."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def check(self, value: Any, field: str) -> None:
        if value is not None:
            self.spec.check(value, field)


class List(Spec):
    def __init__(self, item: Spec, nonempty: bool = False) -> None:
        self.item, self.nonempty = item, nonempty

    def check(self, value: Any, field: str) -> None:
        if not isinstance(value, list) or (self.nonempty and not value):
            raise Broken(field, "a non-empty list" if self.nonempty else "a list")
        for i, x in enumerate(value):
            self.item.check(x, f"{field}[{i}]")


class Each(Spec):
    """An object whose keys are names (runs, variants, stages) and whose values are `item`."""

    def __init__(self, item: Spec) -> None:
        self.item = item

    def check(self, value: Any, field: str) -> None:
        if not isinstance(value, dict):
            raise Broken(field, "an object")
        for key, x in value.items():
            self.item.check(x, f"{field}.{key}")


class Obj(Spec):
    """An object with `required` keys, `optional` ones (a stage adds them later), others
    checked as `rest` (ignored when None), and `rules`: checks across its fields, each
    (field, expected, ok(value))."""

    def __init__(
        self,
        required: dict[str, Spec],
        optional: dict[str, Spec] | None = None,
        rest: Spec | None = None,
        rules: Sequence[tuple[str, str, Callable[[dict[str, Any]], bool]]] = (),
    ) -> None:
        self.required, self.optional, self.rest = required, optional or {}, rest
        self.rules = rules

    def check(self, value: Any, field: str) -> None:
        if not isinstance(value, dict):
            raise Broken(field, "an object")
        for key, spec in self.required.items():
            if key not in value:
                raise Broken(f"{field}.{key}", "present")
            spec.check(value[key], f"{field}.{key}")
        for key, x in value.items():
            spec = self.optional.get(key, self.rest if key not in self.required else None)
            if spec is not None:
                spec.check(x, f"{field}.{key}")
        for sub, expected, ok in self.rules:
            if not ok(value):
                raise Broken(f"{field}.{sub}", expected)


STR, BOOL, ANY = Str(), Bool(), Any_()
NON_NEGATIVE = Num(0)
POSITIVE = Num(0, strict=True)
COUNT = Num(0, whole=True)
SECONDS = NON_NEGATIVE
LOSS = Null(NON_NEGATIVE)
"""A measured KL or NLL (nats per token); null when not measured."""
SPEARMAN = Null(Num(-1, 1))
"""A measured Spearman correlation; null when not measured, or when it came out NaN (a
constant encoder: frontier_eval records it as null)."""
BLEU = Num(0, 100)

STATUSES = ("pending", "done", "partial", "skipped", "failed")
"""A stage's status (state.py's runner, each stage's run())."""

# where a launch's seconds went (vat.callbacks.time_split, runs.launch_split)
TIME_SPLIT = Obj(
    {
        "total_s": SECONDS,
        "setup_s": SECONDS,
        "compile_s": SECONDS,
        "training_s": SECONDS,
        "validation_s": SECONDS,
        "checkpoint_s": SECONDS,
        "other_s": SECONDS,
    },
    {
        "first_step_s": Null(SECONDS),
        "steps": COUNT,
        "validations": COUNT,
        "checkpoint_saves": COUNT,
        "ended": OneOf("finished", "stopped", "failed"),
    },
)
# each `vat train` a call launched (runs.record_launch)
CALL_LAUNCH = Obj(
    {
        "stage": STR,
        "run": STR,
        "seconds": SECONDS,
        "step": Null(COUNT),
        "status": OneOf("trained", "interrupted", "failed"),
        "time_split": Null(TIME_SPLIT),
    }
)
CALL = Obj(
    {"started": STR, "command": STR, "allotted_s": Each(SECONDS), "used_s": Each(SECONDS)},
    {
        "budget_min": NON_NEGATIVE,
        "stages": List(STR),
        "exit": Null(Num(whole=True)),
        "launches": List(CALL_LAUNCH),
    },
)
STAGE = Obj({"status": OneOf(*STATUSES), "seconds": SECONDS, "notes": List(STR)})
FACTS = Obj(
    {
        "device": STR,
        "torch": STR,
        "cuda": Null(STR),
        "bf16_matmul_tflops": Null(NON_NEGATIVE),
        "bf16_matmul": STR,
    },
    {
        "cudnn": Null(COUNT),
        "python": STR,
        "gpu_memory_gib": Null(NON_NEGATIVE),
        "cpu_count": Null(COUNT),
    },  # fmt: skip
)

# -- throughput (bench/bench_train_side_by_side.py's result, per variant) ---------------------
_RECOMPILES = Null(List(Null(COUNT)))
LOOP = Obj(
    {"tokens_per_s": POSITIVE, "mfu": Null(NON_NEGATIVE), "hours_for_3e9_tokens": NON_NEGATIVE},
    {"recompiles": _RECOMPILES, "compiled_graphs": ANY, "first_recompile_reasons": List(STR)},
)
VOCAB = Obj(
    {
        "vocab_size": Num(1, whole=True),
        "compile": BOOL,
        "fused_cross_entropy": BOOL,
        "timed_nonpad_tokens": NON_NEGATIVE,
        "ratio_vat_over_plain": NON_NEGATIVE,
        "vat": LOOP,
        "plain": LOOP,
    }
)
VARIANT = Obj(
    {"status": OneOf("done", "skipped", "timed_out", "failed")},
    {
        "note": STR,
        "final": BOOL,
        "seconds": SECONDS,
        "result": Obj({"timed_steps": Num(1, whole=True), "vocabs": List(VOCAB, nonempty=True)}),
    },
    rules=[
        (
            "result",
            "present for a finished variant",
            lambda v: v["status"] != "done" or "result" in v,
        )
    ],  # fmt: skip
)
ROW = Obj(
    {
        "variant": STR,
        "vocab": Num(1, whole=True),
        "compile": BOOL,
        "fused_cross_entropy": BOOL,
        "loop": OneOf("vat", "plain"),
        "tokens_per_s": POSITIVE,
        "vat_over_plain": Null(NON_NEGATIVE),
        "mfu": Null(NON_NEGATIVE),
        "hours_for_3e9_tokens": Null(NON_NEGATIVE),
        "recompiles": _RECOMPILES,
        "compiled_graphs": ANY,
    },
    {"first_recompile_reasons": List(STR)},
)
TARGET = Obj(
    {
        "target": NON_NEGATIVE,
        "measured": Null(NON_NEGATIVE),
        "variant": Null(STR),
        "reached": Null(BOOL),
    }  # fmt: skip
)
# the profile of both loops in the first eager variant (bench_train_side_by_side.StepProfiler)
PROFILED_OP = Obj(
    {
        "op": STR,
        "calls_per_step": NON_NEGATIVE,
        "device_ms_per_step": NON_NEGATIVE,
        "cpu_ms_per_step": NON_NEGATIVE,
    }
)
PROFILED_LOOP = Obj(
    {},
    {
        "error": STR,
        "steps": COUNT,
        "wall_ms_per_step": NON_NEGATIVE,
        "device_ms_per_step": NON_NEGATIVE,
        "syncs_per_step": Null(NON_NEGATIVE),
        "sync_sites": Each(NON_NEGATIVE),
        "cuda_sync_calls_per_step": Each(NON_NEGATIVE),
        "aten_calls_per_step": NON_NEGATIVE,
        "top_ops": List(PROFILED_OP),
    },
)
PROFILE = Obj(
    {"status": OneOf("done", "skipped", "stopped", "failed"), "variant": STR},
    {
        "note": STR,
        "warmup_steps": COUNT,
        "steps": COUNT,
        "sync_debug_mode": BOOL,
        "log_every_n_steps": COUNT,
        "vat": PROFILED_LOOP,
        "plain": PROFILED_LOOP,
    },
)
THROUGHPUT = Obj(
    {"variants": Each(VARIANT), "not_run": Each(STR), "targets": Each(TARGET)},
    {"rows": List(ROW), "compile_diagnosis": List(STR), "profile": PROFILE},
)

# -- a trained run's evaluation (frontier_eval.evaluate_run), the reference's and each run's --
STS = Obj({"sts12": SPEARMAN, "stsb": SPEARMAN})
EVAL = Obj(
    {
        "run": STR,
        "target_kl": NON_NEGATIVE,
        "step": COUNT,
        "checkpoint": STR,
        "val_kl": LOSS,
        "val_nll": LOSS,
        "active_units": Null(COUNT),
        # the table prints both poolings; a further one is compared too (frontier_eval.stsb)
        "sts": Obj({"mean": STS, "precision": STS}, rest=STS),
        "extra_sts": Each(Obj({"options": List(STR), "sts12": SPEARMAN, "stsb": SPEARMAN})),
        "bleu": BLEU,
        "bleu_lines": COUNT,
        "bleu_short": Null(BLEU),
        "bleu_long": Null(BLEU),
        "lines_long": COUNT,
    },
    # the step of the last validation, where val_kl and val_nll come from (a run stopped for
    # time validated before its last step)
    {"kl_per_token_probe": LOSS, "val_step": Null(COUNT)},
)


LAUNCH = Obj(
    {
        "started": STR,
        "seconds": SECONDS,
        "steps": COUNT,
        "step": Null(COUNT),
        "overhead_s": Null(SECONDS),
        "status": OneOf("trained", "interrupted", "failed"),
    },
    {
        # vat's own train/tokens_per_s over the launch's second half (its log): vat's loop
        # speed with the reference's recipe (compiled, bf16) when the throughput stage has
        # not run
        "logged_tokens_per_s": Null(NON_NEGATIVE),
        # where it started (reference.choose_start) and the tokens behind the model after it
        "round": Num(1, whole=True),
        "how": OneOf("resumed", "init_from", "scratch"),
        "start": STR,
        "from_step": COUNT,
        "tokens_total": Null(NON_NEGATIVE),
        "time_split": Null(TIME_SPLIT),  # where its seconds went (vat.callbacks.time_split)
    },
)
EXPORTED = Obj(
    {
        "name": STR,
        "folder": STR,
        "file": STR,
        "folder_in_tar": STR,
        "bytes": COUNT,
        "within_16_mib": BOOL,
        # null: vat ships a model of that name that this one does not beat (`compare` says)
        "registry_command": Null(STR),
        "registry_command_from_tar": Null(STR),
    },
    {"compare": STR, "shipped_bleu": Null(BLEU)},
)
# The checkpoint's parts (carry.py): their names are read and written in OUT_DIR, so only the
# suite's own names pass (never a path)
PART = Obj(
    {
        "name": Match(PART_RE, "reference.ckpt.partN (N from 1)"),
        "bytes": COUNT,
        "sha256": Match(SHA256_RE, "64 hex digits"),
    }
)
PARTS = Obj(
    {
        "file": OneOf("last.ckpt", "on_exception.ckpt"),
        "step": COUNT,
        "bytes": COUNT,
        "sha256": Match(SHA256_RE, "64 hex digits"),
        "parts": List(PART, nonempty=True),
    }
)
# The compile cache's pack (carry.py): one name only, and the record it is checked against
COMPILE_CACHE = Obj(
    {
        "file": OneOf(CACHE_PACK),
        "bytes": COUNT,
        "sha256": Match(SHA256_RE, "64 hex digits"),
        "record": Obj(
            {"torch": STR, "cuda": Null(STR), "triton": Null(STR), "python": STR, "device": STR}
        ),
    }
)
ROUND = Obj(
    {"round": Num(1, whole=True), "step": COUNT, "tokens_total": Null(NON_NEGATIVE),
     "bleu": BLEU},
    {"ended": STR},
)  # fmt: skip
DEVICE = Obj({"device": STR, "torch": STR, "cuda": Null(STR)})
REFERENCE = Obj(
    {
        "config": STR,
        "key": STR,
        "target_kl": NON_NEGATIVE,
        "steps": Null(Num(1, whole=True)),
        "tokens": Null(NON_NEGATIVE),
        "basis": Null(OneOf("floor", "time_share", "default", "time")),
        "floor_tokens": Null(NON_NEGATIVE),
        "why": Null(STR),
        "launches": List(LAUNCH),
        "trained": BOOL,
        "eval": Null(EVAL),
        "bleu_min": BLEU,
        "bleu_reached": Null(BOOL),
        "export": Null(EXPORTED),
    },
    {  # reference.begin_round, choose_start, _carry_checkpoint (absent in older reports)
        "round": Num(1, whole=True),
        "rounds": List(ROUND),
        "from_step": COUNT,
        "tokens_total": Null(NON_NEGATIVE),
        "device": Null(DEVICE),
        "checkpoint_parts": Null(PARTS),
        "compile_cache": Null(COMPILE_CACHE),
        # seconds this model's evaluation and export took (reference.finish_reserve_s)
        "finish_s": Obj({}, {"eval": SECONDS, "export": SECONDS}),
    },
    rules=[
        ("basis", "set once the steps are (floor, time_share, default or time)",
         lambda r: r["steps"] is None or r["basis"] is not None),
        ("why", "set once the steps are", lambda r: r["steps"] is None or r["why"] is not None),
    ],
)  # fmt: skip

# -- the frontier --------------------------------------------------------------------------
BRIEF = Obj({"run": STR, "bleu": BLEU, "stsb": SPEARMAN, "pooling": STR}, {"why": STR})
BEST = Obj(
    {
        "bleu_min": BLEU,
        "best_sts_at_bleu_min": Null(BRIEF),
        "export": Obj({}, {"best_sts": BRIEF, "best_bleu": BRIEF}),
    },
    {"verdict": STR},
)


def _best_runs_evaluated(fr: dict[str, Any]) -> bool:
    """The runs the best names are runs the frontier evaluated (artefacts exports their
    checkpoints)."""
    named = ((fr["best"] or {}).get("export") or {}).values()
    return all("eval" in fr["runs"].get(b["run"], {}) for b in named)


FRONTIER = Obj(
    {
        "key": STR,
        "values": List(NON_NEGATIVE),
        "steps": Null(Num(1, whole=True)),
        "steps_from": Null(STR),
        "runs": Each(Obj({}, {"seconds": SECONDS, "trained": BOOL, "eval": EVAL})),
        "best": Null(BEST),
    },
    {"plot": STR},
    rules=[("best.export", "runs the frontier evaluated", _best_runs_evaluated)],
)
ARTEFACT = Obj(
    {"run": STR, "why": STR, "file": STR, "folder_in_tar": STR, "bytes": COUNT},
    {"bleu": BLEU, "stsb": SPEARMAN, "pooling": STR, "within_16_mib": BOOL},
)


def report_spec(stages: Sequence[str]) -> Obj:
    """The whole report (state.new_state's fields, each as the stages fill it in)."""
    return Obj(
        {
            "calls": List(CALL),
            "stages": Obj(dict.fromkeys(stages, STAGE)),
            "facts": Null(FACTS),
            "throughput": THROUGHPUT,
            "reference": REFERENCE,
            "frontier": FRONTIER,
            "artefacts": Each(ARTEFACT),
        }
    )
