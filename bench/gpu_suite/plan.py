"""What each mode runs (the GPU suite, or --smoke on CPU), the time each stage gets, the
three-call recipe for a GPU allocation, and the data and packages the suite needs.

A missing data file or Python package is a one-line error naming the offline bundle
(scripts/offline_bundle.py reads `data_patterns` to know what to copy)."""

from __future__ import annotations

import glob
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the suite runs from it (nothing installed)."""
BASE_CONFIG = ROOT / "configs" / "corpus_gpu.yaml"
"""The throughput variants and the frontier runs train this config (with the data folder's
paths and the mode's overrides: call.Call.write_config)."""
REFERENCE_CONFIG = ROOT / "configs" / "reference_gpu.yaml"
"""The reference model's recipe (the one that reached BLEU 99): the same model and data."""
REQUIRED_PACKAGES = (
    "torch",
    "lightning",
    "jsonargparse",
    "tokenizers",
    "datasets",
    "torchmetrics",
    "tensorboard",
    "numpy",
    "scipy",
    "safetensors",
    "huggingface_hub",
    "yaml",
    "tqdm",
)
"""What the stages import; a missing one is a one-line error naming the offline bundle."""

# Data the suite reads, relative to the data folder ($VAT_DATA_DIR, ../shared/data): the
# training and validation files of configs/corpus_gpu.yaml, newstest2019 for BLEU, and the
# two STS tasks (STS12 also serves as the geometry probe). scripts/offline_bundle.sh copies
# exactly these.
NEWSTEST2019 = "corpus/wmt_newstest_deen/newstest2019.de-en.en"
STS_DIRS = ("senteval/STS/STS12-en-test", "senteval/STS/STSBenchmark")
SHARED_PREFIX = "../shared/data/"


def _error(message: str) -> Exception:
    """A vat.errors.VatError, the class imported only when raised: scripts/offline_bundle.py reads
    data_patterns() and importing vat (torch) would cost it seconds per build."""
    from vat.errors import VatError as _VatError

    return _VatError(message)


def _config_data_patterns(path: Path) -> list[str]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")).get("data", {})
    out = []
    for p in [*data.get("train_files", []), *data.get("val_files", [])]:
        if not p.startswith(SHARED_PREFIX):
            raise _error(f"{path}: data file {p} is not under {SHARED_PREFIX}")
        out.append(p[len(SHARED_PREFIX) :])
    return out


def data_patterns() -> list[str]:
    """Glob patterns (relative to the data folder) of every file or folder the suite reads."""
    configs = [*_config_data_patterns(BASE_CONFIG), *_config_data_patterns(REFERENCE_CONFIG)]
    return [*dict.fromkeys(configs), NEWSTEST2019, *STS_DIRS]


def check_data(data_dir: Path) -> None:
    """One-line error naming the first data file the suite needs and does not find."""
    for pattern in data_patterns():
        if not glob.glob(str(data_dir / pattern)):
            raise _error(
                f"--data-dir {data_dir}: {pattern} is missing (the suite reads the shared data "
                "from --data-dir, $VAT_DATA_DIR or ../shared/data; on an offline node install "
                "the bundle: scripts/offline_bundle.sh --install DIR)"
            )


def check_packages(names: Sequence[str] = REQUIRED_PACKAGES) -> None:
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise _error(
                f"Python package {name!r} is missing (on an offline node install the bundle: "
                "scripts/offline_bundle.sh --install DIR; docs/gpu.md, 'A node without internet')"
            )


# -- what each mode runs -------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One child process of the throughput stage: one vocabulary, compiled or eager, CE."""

    name: str
    vocab: int
    compile: bool
    fused_ce: bool


@dataclass
class Plan:
    """Shapes, time shares and sizing rules of one mode (the GPU suite, or --smoke on CPU)."""

    smoke: bool
    shares_s: dict[str, float]
    """Most seconds each stage may take in all, over every call."""
    min_s: dict[str, float]
    """Least seconds worth starting a stage with; less left in the call: skipped with a note."""
    variants: list[Variant]
    """The throughput variants, most needed first (a stage out of time skips the last)."""
    variants_not_run: dict[str, str]
    bench_args: list[str]
    sizing_variants: tuple[str, ...]
    """Throughput variants whose vat tokens/s size the reference and the frontier (the
    first one measured): the 8k vocabulary of configs/corpus_gpu.yaml."""
    target_kls: list[float]
    """The frontier's `model.loss.target_kl` values in the order they are added: N runs
    train the first N (frontier_train.frontier_size picks N)."""
    frontier_runs_default: int
    """Runs when no throughput was measured."""
    frontier_steps_default: int
    min_run_tokens: float
    """A frontier run gets at least this many non-pad tokens, or the frontier has fewer runs
    (never fewer than two)."""
    max_steps: int
    """Cap on the steps of any run (the frontier and the reference)."""
    reference_min_tokens: float
    """The reference's token floor: the budget that reached BLEU 99 before."""
    reference_steps_default: int
    """The reference's steps when no throughput was measured."""
    reference_launches: int
    """How many calls start the reference (each start pays `startup_s`): the recipe's two."""
    startup_s: float
    """Estimated seconds from launching a `vat train` to its first step (imports, data,
    compile); the reference's measured start-up replaces it when larger."""
    stop_grace_s: float
    """Runs stopped for time get SIGINT (vat saves its state) this long before their stage's
    time is up, then SIGKILL."""
    eval_run_s: float
    """Estimated seconds to evaluate one run (until one has been timed in this call)."""
    extra_eval_s: float
    """Estimated seconds of the best run's feature specs (`vat features compare` and two
    `vat evaluate`)."""
    export_s: float
    """Estimated seconds of `vat export --evaluate STS12,STSBenchmark`."""
    bleu_limit: int | None
    probe_max_sentences: int
    matmul_n: int
    config_overrides: dict[str, Any] = field(default_factory=dict)
    poll_s: float = 1.0


FRONTIER_SHARE_OF_SINGLE = 0.8
"""The frontier's runs train at once on the one GPU; together they are assumed to reach 80%
of one run's measured tokens/s (conservative: the runs finish early rather than late)."""


def gpu_plan() -> Plan:
    v = [  # the 8k variants first: the reference and the frontier are sized from them
        Variant("8k_compiled", 8192, True, False),
        Variant("8k_eager", 8192, False, False),
        Variant("32k_eager", 32768, False, False),
        Variant("32k_eager_fused_ce", 32768, False, True),
        Variant("32k_compiled", 32768, True, False),
        Variant("32k_compiled_fused_ce", 32768, True, True),
    ]
    return Plan(
        smoke=False,
        # The 23.5-minute plan (1,410 s; the arithmetic of each share is in RECIPE's comment).
        # throughput 210 s: the 8k compiled variant (data preparation, two compiles, 180 steps
        # a loop) must fit, since the reference and the frontier are sized from it
        shares_s={
            "facts": 30,
            "throughput": 210,
            "reference": 720,
            "frontier_train": 270,
            "frontier_eval": 150,
            "artefacts": 30,
        },
        min_s={
            "facts": 15,
            "throughput": 90,
            "reference": 120,
            # the frontier is sized to the call it starts in: with 240 s, 2 runs of 75M
            # tokens at 1.2M tokens/s (frontier_size); with less it would measure transients
            "frontier_train": 240,
            "frontier_eval": 60,
            "artefacts": 20,
        },
        variants=v,
        variants_not_run={},
        bench_args=["--device", "cuda", "--precision", "bf16-mixed"]
        + ["--warmup", "30", "--steps", "150", "--rounds", "1"],
        sizing_variants=("8k_compiled", "8k_eager"),
        target_kls=[10.0, 40.0, 20.0, 5.0, 30.0, 15.0],
        frontier_runs_default=3,
        frontier_steps_default=1500,
        # ~1,100 steps of ~69k non-pad tokens: the rate controller (ki 0.01: the weight moves
        # by e^0.001 per step at 10% error) needs several hundred steps to settle, so a
        # shorter run measures its transient, not the rate it was given
        min_run_tokens=75e6,
        max_steps=50_000,
        reference_min_tokens=600e6,
        reference_steps_default=9_400,  # the plain loop's 9,400 steps of ~69k tokens
        reference_launches=2,
        startup_s=60,
        stop_grace_s=20,
        eval_run_s=45,
        extra_eval_s=60,
        export_s=30,
        bleu_limit=None,
        probe_max_sentences=2000,
        matmul_n=8192,
    )


def short_gpu_plan() -> Plan:
    """The plan for a GPU allocation of 15 minutes (RECIPE_SHORT): the reference
    first and alone, in one launch trained until its call's time is spent (a second launch
    would pay the start-up and the compile again), then the device facts and the 8k
    throughput side by side, eager first (its compiled twin needs about 210 s: data, two
    compiles, 180 steps a loop; the reference's own log gives vat's compiled 8k tokens/s).
    The frontier has no time here: a later allocation of 30 minutes runs it (RECIPE)."""
    p = gpu_plan()
    by_name = {v.name: v for v in p.variants}
    p.variants = [by_name["8k_eager"], by_name["8k_compiled"]]
    p.variants_not_run = {
        "32k": "--plan short: the 32k variants are not run (15 minutes of GPU time go to "
        "the reference model first); the full plan runs them",
    }
    p.shares_s = {**p.shares_s, "throughput": 100, "reference": 60 * RECIPE_SHORT[0].budget_min}
    p.reference_launches = 1
    return p


PLANS = {"full": gpu_plan, "short": short_gpu_plan}
"""`bench/gpu_suite.sh --plan NAME`: the full plan (a 30-minute allocation in 10-minute
commands, or one 25-minute allocation) or the short one (a 15-minute allocation)."""


def make_plan(name: str, smoke: bool) -> Plan:
    """PLANS[name], or with --smoke the CPU plan run the same way (the short plan's one
    launch of the reference), so that the smoke suite checks the code a GPU allocation runs."""
    if not smoke:
        return PLANS[name]()
    p = smoke_plan()
    if name == "short":
        p.reference_launches = 1
    return p


def smoke_plan() -> Plan:
    """Every stage on CPU with tiny shapes: the same code paths and the same report schema."""
    return Plan(
        smoke=True,
        shares_s={  # generous: a busy CI machine must not turn the smoke run partial
            "facts": 60,
            "throughput": 300,
            "reference": 300,
            "frontier_train": 300,
            "frontier_eval": 300,
            "artefacts": 60,
        },
        min_s={
            "facts": 1,
            "throughput": 5,
            "reference": 5,
            "frontier_train": 5,
            "frontier_eval": 5,
            "artefacts": 1,
        },
        variants=[Variant("smoke_eager", 320, False, False)],
        variants_not_run={
            "compiled": "--smoke: compiled variants are not run (inductor builds for minutes "
            "on a CPU); the GPU suite runs 8k/32k compiled and eager, CE off and on",
        },
        bench_args=["--device", "cpu", "--precision", "32-true", "--threads", "1"]
        + ["--warmup", "1", "--steps", "2", "--rounds", "1", "--max-train-lines", "1500"],
        sizing_variants=("smoke_eager",),
        target_kls=[5.0, 20.0],
        frontier_runs_default=2,
        frontier_steps_default=8,
        min_run_tokens=2_000,
        max_steps=8,
        reference_min_tokens=6_000,  # about 10 steps of ~600 tokens
        reference_steps_default=8,
        reference_launches=2,
        startup_s=8,
        stop_grace_s=10,
        eval_run_s=20,
        extra_eval_s=20,
        export_s=15,
        bleu_limit=24,
        probe_max_sentences=100,
        matmul_n=256,
        config_overrides={
            "trainer.accelerator": "cpu",
            "trainer.precision": "32-true",
            "trainer.limit_val_batches": 2,
            "trainer.log_every_n_steps": 1,
            "model.compile": False,
            "model.arch.d_model": 16,
            "model.arch.n_heads": 2,
            "model.arch.d_ff": 32,
            "model.arch.n_encoder_layers": 1,
            "model.arch.n_decoder_layers": 1,
            # The GPU's schedule (Noam, 2M-sentence warm-up) and controller gains (the weight
            # moves ~0.1% a step) barely move 8 steps: both targets trained alike (val KL
            # 77.80 twice in the rehearsal). A constant lr and fast gains let 8 steps show
            # the target: target 5 ends below target 20 in val KL.
            "model.optim.schedule": "constant",
            "model.optim.lr": 0.01,
            "model.loss.kl_control_kp": 1.0,
            "model.loss.kl_control_ki": 0.2,
            # and the unclipped relative error: clipped at +-1, both targets (far below the
            # start's KL) would see the same error, +1, and train alike
            "model.loss.kl_control_error": "relative",
            "model.loss.kl_control_max_error": None,
            "data.vocab_size": 320,
            "data.max_train_lines": 1500,
            "data.tokenizer_train_lines": 1500,
            "data.max_len": 64,
            "data.max_tokens": 1024,
            "data.num_workers": 0,
            "data.num_proc": 1,
        },
        poll_s=0.2,
    )


# -- the recipe for a 30-minute GPU allocation whose commands are cut after 10 minutes ---------
@dataclass(frozen=True)
class RecipeCall:
    budget_min: float
    stages: tuple[str, ...]
    """The stages this call runs; () for all that are not done."""
    what: str


DEVICE_S = 30 * 60
"""The allocation's GPU time, counted from the request for the node (its start-up included)
until the node is released, idle time between calls included."""
CALL_LIMIT_S = 600
"""One call's command is killed after this long (and nothing of it comes back unless it has
copied its files: bench/gpu_suite.sh --call-limit-s stops the suite in time)."""
START_S = 120
"""A fresh node's start-up, paid by the first call (and by any call after the node was
released and a fresh one started)."""
CALL_OVERHEAD_S = 40
"""Per call, outside the suite's budget: the tree and `offline` sent (about 20 MiB), the
bundle installed (scripts/offline_bundle.sh --install, ~15 s), imports and CUDA set-up, the
files copied and sent back."""
GAP_S = 25
"""Between calls the node sits idle (counted; an allocation may release a node idle for 30 s)."""
CALL_GUARD_S = 40
"""bench/gpu_suite.sh --call-limit-s stops the suite (SIGINT) this long before the call's
limit: its runs save their state (plan.stop_grace_s, 20 s), the report is written, and a
SIGKILL 28 s after the SIGINT still leaves the files copied before the call is killed."""

# The arithmetic (GPU plan, at the target of 1.2M non-pad tokens/s for vat's loop at 8k; the
# plain loop measured 1.28M on the H100):
#
# - reference, 720 s in two calls: 600M tokens = 500 s of training, + 2 starts (calls 1 and
#   2) x 60 s + 45 s evaluation + 30 s export + 20 s to stop it at the end of call 1 = 695 s.
#   At >= 1.19M tokens/s it gets the 600M floor; slower, the time share:
#   tokens/s x (720 - 2 x 60 - 45 - 30 - 20) s = tokens/s x 505 s (480M at 0.95M).
# - frontier, 270 s in one call (its steps are sized to that call's allotment, so no run
#   restarts and recompiles): 270 - 60 start-up - 20 stop = 190 s of training x 0.8 x 1.2M
#   tokens/s = 182M tokens: 2 runs (target_kl 10 and 40) of 91M each (>= 75M, min_run_tokens);
#   3 runs (10, 20, 40) from 1.48M tokens/s. frontier_eval: 2 runs x 45 s + 60 s for the
#   best run's feature specs = 150 s.
# - throughput, 210 s: the 8k compiled variant first (the data prepared, vat's and the plain
#   loop's steps compiled, 180 steps each), since the two items above are sized from it.
# - the calls (RECIPE): 8.5 + 7.5 + 7.5 = 23.5 min of suite budget, the shares' 1,410 s:
#   call 1 facts 30 + throughput 210 + reference 270; call 2 reference 450; call 3
#   frontier_train 270 + frontier_eval 150 + artefacts 30. GPU time: 120 s start +
#   3 x (40 s overhead + budget) + 2 x 25 s gaps = 1,700 s of 1,800 (100 s to spare). Each
#   call: 15 s install + budget + ~10 s <= 600 s less the 40-s guard.
RECIPE = (
    RecipeCall(
        8.5,
        ("facts", "throughput", "reference"),
        "facts 30 s + throughput 210 s + the reference's first 270 s (started, then stopped "
        "at the call's end with its state saved)",
    ),
    RecipeCall(
        7.5,
        ("reference",),
        "the reference's other 450 s: resumed, trained to its budget, evaluated, exported",
    ),
    RecipeCall(
        7.5,
        (),
        "frontier_train 270 s (every run starts and ends in this call) + frontier_eval "
        "150 s + artefacts 30 s",
    ),
)
RECIPE_SHORT = (
    RecipeCall(
        8.75,
        ("reference",),
        "the reference alone: the data prepared, one launch trained until 75 s + the stop "
        "grace before the call's end (steps at most the 650M-token recipe's 9,400), "
        "evaluated (45 s) and exported (30 s)",
    ),
    RecipeCall(
        2.0,
        ("facts", "throughput"),
        "facts 30 s + the 8k throughput, eager first (90 s)",
    ),
)
"""The recipe for a 15-minute GPU allocation, with the short plan (`--plan short`). GPU
time: 120 s start + 2 x 40 s overhead + (525 + 120) s of suite
budget + 25 s gap = 870 s of 900. Call 1 is the longest the 10-minute limit allows: 15 s
install + 525 s + 10 s <= 600 s less the 40-s guard. If call 1 leaves the reference
unfinished (its report says `partial`), call 2 runs `--stages reference` instead."""
DEVICE_S_SHORT = 15 * 60
RECIPE_CONTINUE = RECIPE_SHORT[0]
"""The call that continues the reference, repeated as the allocation allows, on
whatever node each call gets: it resumes the checkpoint the last call returned (or continues
from the newest weights), trains for the call's time, evaluates and exports (docs/gpu.md,
"The recipes")."""
CONTINUE_OVERHEAD_S = 75
"""A continuation call's seconds outside the suite's budget: the bundle installed (about
15 s), CALL_GUARD_S before the limit, the files copied (about 10 s) and 10 s to spare; with
the 600-s limit, RECIPE_CONTINUE's 8.75 minutes."""


def continue_budget_min(limit_s: float) -> float:
    """--budget-min of a continuation call under a limit of `limit_s` per command."""
    return (limit_s - CONTINUE_OVERHEAD_S) / 60


RECIPE_OUT_DIR = "runs/gpu"
RECIPE_SEED_DIR = "runs/gpu_back"
"""Where you submit from, the files the last call returned are copied into this ignored
folder, sent to the node with the checkout on every later call (never OUT_DIR itself: a copy
would replace the node's own OUT_DIR, whose work/ holds the checkpoints), and passed as
--seed (used only on a fresh node)."""
RECIPE_CARRY = ("offline", RECIPE_SEED_DIR)
"""What each call sends to the node besides the checkout: the offline bundle and the files
the last call returned."""


def recipe_command(call: RecipeCall, plan: str = "full") -> str:
    """One call's command line, as docs/gpu.md gives it: without --trust-compile-cache, since
    the seed folder holds whatever was copied there and the compile cache is code (docs/gpu.md,
    "What in OUT_DIR is code and what is data")."""
    stages = f" --stages {','.join(call.stages)}" if call.stages else ""
    which = "" if plan == "full" else f" --plan {plan}"
    return (
        f'bench/gpu_suite.sh --bundle offline --seed {RECIPE_SEED_DIR} --copy-to "$OUT" '
        f"--call-limit-s {CALL_LIMIT_S}{which} --budget-min {call.budget_min:g}{stages} "
        f"{RECIPE_OUT_DIR}"
    )


def recipe_device_s(recipe: Sequence[RecipeCall] = RECIPE) -> float:
    """GPU time the recipe takes, start and gaps included (the arithmetic above)."""
    suite = sum(60 * c.budget_min for c in recipe)
    return START_S + len(recipe) * CALL_OVERHEAD_S + suite + (len(recipe) - 1) * GAP_S
