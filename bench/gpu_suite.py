"""The GPU suite (issue 22): one command turns a GPU into every figure vat is missing.

    bench/gpu_suite.sh [--budget-min 24] [--stages facts,throughput,...] OUT_DIR
    bench/gpu_suite.sh --smoke OUT_DIR            # every stage on CPU, tiny shapes, < 2 min

Stages, in this order (each reuses vat's own commands; this module only orchestrates):

1. `facts`: GPU name, torch, CUDA, and a measured bf16 matmul peak (TFLOP/s); MFU elsewhere
   in the report is over this measured peak, not a datasheet figure.
2. `throughput`: bench/bench_train_side_by_side.py, vat's loop against a plain loop, bf16, at
   8k and 32k vocabulary, compiled and eager, and the cross-entropy variants at 32k
   (`model.loss.fused_cross_entropy` off and on); tokens/s, vat / plain, MFU, hours for 3e9
   tokens, and torch._dynamo's recompiles and their first failed guards. Each variant is
   one child process with the stage's remaining time as its timeout: a compile that never
   settles is reported as such instead of eating the budget.
3. `frontier_train`: one `vat train` per `model.loss.target_kl` value (5, 10, 15, 20, 30, 45
   nats per token), all at once on the one GPU: the paper-shaped model of
   configs/corpus_gpu.yaml (8k vocabulary, max_len 256, token batches, bf16, compiled) on
   the shared corpus, the same step (and so token) budget each, sized from the throughput
   stage to fill the stage's share. At the end of a call's budget the runs are interrupted
   (each saves its state) and the next call resumes them (`--ckpt_path last`).
4. `frontier_eval`: each run: validation KL and NLL, active units (`vat sweep`'s
   measure_run), STS12 and STS-B Spearman with mean and precision pooling (`vat evaluate`),
   newstest2019 BLEU of greedy mu-decoding with the lines over 63 subwords apart
   (`vat generate bleu --long-over 63`). The table and plot give BLEU and STS-B against the
   rate and name the best STS-B among runs with BLEU >= 95 (or say that none reached it).
5. `artefacts`: the best-STS and the best-BLEU runs exported (`vat export`), each folder
   packed as one .tar in OUT_DIR.

Budget and resume: the state lives in OUT_DIR/gpu_report.json. A call runs the stages asked
for (`--stages`, default all) that are not finished, in order, inside `--budget-min`
minutes: a stage starts only if its minimum fits in what is left, gets at most its share,
and a stage that would overrun is skipped with a note. Running the same command again on
the same OUT_DIR skips finished stages and continues the rest (the frontier's runs from
their checkpoints, the evaluation run by run). OUT_DIR holds at most 8 files (the report,
its Markdown, the plot, two exported models, the logs), each under 16 MiB; the runs,
caches and logs live in OUT_DIR/work/.

Recipes (README, "Offline GPU nodes and the GPU suite"; the bundle installed first):

- one call, a cluster user with 25 minutes:  bench/gpu_suite.sh --budget-min 24 results/gpu
- a lent GPU with 10-minute commands and 30 minutes in all, three calls back to back (the
  machine keeps OUT_DIR while it is warm; each call copies OUT_DIR's files to $OUT):
    1. bench/gpu_suite.sh --budget-min 8.5 --stages facts,throughput runs/gpu
    2. bench/gpu_suite.sh --budget-min 9 --stages frontier_train runs/gpu
    3. bench/gpu_suite.sh --budget-min 8.5 runs/gpu     (the rest of the training, then
       the evaluation and the artefacts)

Exit codes: 0 when every stage that ran finished or was skipped for time, 1 when a stage
failed (named on stderr and in the report), 2 with one line when a prerequisite is missing
(no CUDA without --smoke, a Python package, a data file).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as _dt
import glob
import importlib.util
import io
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from vat.errors import VatError, run_cli  # noqa: E402
from vat.io import write_json_atomic  # noqa: E402

SCHEMA = 1
STAGES = ("facts", "throughput", "frontier_train", "frontier_eval", "artefacts")
BASE_CONFIG = ROOT / "configs" / "corpus_gpu.yaml"
BLEU_MIN = 95.0
"""The issue's reconstruction bar: the best STS-B is named among runs at least this good."""
LONG_OVER = 63
"""newstest2019 lines of more than this many subwords are scored apart."""
TARGET_KL_KEY = "model.loss.target_kl"
REPORT = "gpu_report.json"
OUT_FILES = (
    "gpu_report.json",
    "gpu_report.md",
    "frontier.png",
    "best_sts.tar",
    "best_bleu.tar",
    "logs.tar.gz",
)
"""Everything the suite writes at OUT_DIR's top level (at most 8 files, each <= 16 MiB)."""
MAX_OUT_FILE = 16 * 2**20
STOP_GRACE_S = 30.0
"""Children stopped for time get SIGINT (vat saves its state) and this long before SIGKILL;
they are stopped this long before their stage's time is up."""
FINAL_TIMEOUT_S = 240.0
"""A throughput variant stopped after this long is reported, not retried by a later call."""
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


def _config_data_patterns(cfg: dict) -> list[str]:
    data = cfg.get("data", {})
    out = []
    for p in [*data.get("train_files", []), *data.get("val_files", [])]:
        if not p.startswith(SHARED_PREFIX):
            raise VatError(f"{BASE_CONFIG}: data file {p} is not under {SHARED_PREFIX}")
        out.append(p[len(SHARED_PREFIX) :])
    return out


def data_patterns() -> list[str]:
    """Glob patterns (relative to the data folder) of every file or folder the suite reads."""
    cfg = yaml.safe_load(BASE_CONFIG.read_text(encoding="utf-8"))
    return [*_config_data_patterns(cfg), NEWSTEST2019, *STS_DIRS]


def check_data(data_dir: Path) -> None:
    """One-line error naming the first data file the suite needs and does not find."""
    for pattern in data_patterns():
        if not glob.glob(str(data_dir / pattern)):
            raise VatError(
                f"--data-dir {data_dir}: {pattern} is missing (the suite reads the shared data "
                "from --data-dir, $VAT_DATA_DIR or ../shared/data; on an offline node install "
                "the bundle: scripts/offline_bundle.sh --install DIR)"
            )


def check_packages(names: Sequence[str] = REQUIRED_PACKAGES) -> None:
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise VatError(
                f"Python package {name!r} is missing (on an offline node install the bundle: "
                "scripts/offline_bundle.sh --install DIR; README, 'Offline GPU nodes')"
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
    """Shapes and time shares of one mode (the GPU suite, or --smoke on CPU)."""

    smoke: bool
    shares_s: dict[str, float]
    """Most seconds each stage may take in all (the 24-minute plan)."""
    min_s: dict[str, float]
    """Least seconds worth starting a stage with; less left in the call: skipped with a note."""
    variants: list[Variant]
    variants_not_run: dict[str, str]
    bench_args: list[str]
    target_kls: list[float]
    frontier_steps_default: int
    bleu_limit: int | None
    probe_max_sentences: int
    matmul_n: int
    config_overrides: dict[str, Any] = field(default_factory=dict)
    poll_s: float = 1.0


def gpu_plan() -> Plan:
    v = [
        Variant("8k_compiled", 8192, True, False),
        Variant("8k_eager", 8192, False, False),
        Variant("32k_eager", 32768, False, False),
        Variant("32k_compiled", 32768, True, False),
        Variant("32k_eager_fused_ce", 32768, False, True),
        Variant("32k_compiled_fused_ce", 32768, True, True),
    ]
    return Plan(
        smoke=False,
        shares_s={
            "facts": 30,
            "throughput": 7 * 60,
            "frontier_train": 12 * 60,
            "frontier_eval": 4 * 60,
            "artefacts": 30,
        },
        min_s={
            "facts": 15,
            "throughput": 90,
            "frontier_train": 90,
            "frontier_eval": 60,
            "artefacts": 20,
        },
        variants=v,
        variants_not_run={},
        bench_args=["--device", "cuda", "--precision", "bf16-mixed"]
        + ["--warmup", "30", "--steps", "150", "--rounds", "1"],
        target_kls=[5.0, 10.0, 15.0, 20.0, 30.0, 45.0],
        frontier_steps_default=2000,
        bleu_limit=None,
        probe_max_sentences=2000,
        matmul_n=8192,
    )


def smoke_plan() -> Plan:
    """Every stage on CPU with tiny shapes: the same code paths and the same report schema."""
    return Plan(
        smoke=True,
        shares_s={  # generous: a busy CI machine must not turn the smoke run partial
            "facts": 60,
            "throughput": 300,
            "frontier_train": 300,
            "frontier_eval": 300,
            "artefacts": 60,
        },
        min_s={
            "facts": 1,
            "throughput": 5,
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
        target_kls=[5.0, 20.0],
        frontier_steps_default=4,
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


# -- the state: OUT_DIR/gpu_report.json ----------------------------------------------------
def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_state(smoke: bool) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "mode": "smoke" if smoke else "gpu",
        "calls": [],
        "stages": {s: {"status": "pending", "seconds": 0.0, "notes": []} for s in STAGES},
        "facts": None,
        "throughput": {"variants": {}, "not_run": {}, "targets": {}},
        "frontier": {
            "key": TARGET_KL_KEY,
            "values": [],
            "steps": None,
            "steps_from": None,
            "runs": {},
            "best": None,
        },
        "artefacts": {},
    }


def load_state(out: Path, smoke: bool) -> dict[str, Any]:
    path = out / REPORT
    if not path.exists():
        return new_state(smoke)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise VatError(f"{path} is not a gpu_report.json ({e}); use another OUT_DIR") from None
    if not isinstance(state, dict) or state.get("schema") != SCHEMA:
        raise VatError(f"{path}: not a schema-{SCHEMA} gpu_report.json; use another OUT_DIR")
    mode = "smoke" if smoke else "gpu"
    if state.get("mode") != mode:
        raise VatError(
            f"{path} holds a {state.get('mode')} report and this is a {mode} call; "
            "use another OUT_DIR"
        )
    return state


class Budget:
    """This call's deadline, and what a stage may spend of it."""

    def __init__(self, minutes: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + 60.0 * minutes

    def left(self) -> float:
        return self.deadline - self.clock()

    def allot(self, share_left: float, reserve: float) -> float:
        """Seconds a stage may run: its remaining share, less what later stages need to start."""
        return max(0.0, min(share_left, self.left() - reserve))


# -- stage 1: device facts -----------------------------------------------------------------
def device_facts(plan: Plan) -> dict[str, Any]:
    import torch

    cuda = not plan.smoke
    dev = torch.device("cuda" if cuda else "cpu")
    n = plan.matmul_n
    gen = torch.Generator(device=dev).manual_seed(0)
    # two input pairs, alternated, so repeated products do not all read one cached pair
    pairs = [
        tuple(torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(2))
        for _ in range(2)
    ]
    for a, b in pairs * 3:  # warm-up: handles, kernels chosen
        a @ b
    times = []
    for i in range(20 if cuda else 5):
        a, b = pairs[i % 2]
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
    secs = sorted(times)[len(times) // 2]
    facts = {
        "device": torch.cuda.get_device_name(dev) if cuda else (platform.processor() or "cpu"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": platform.python_version(),
        "gpu_memory_gib": round(torch.cuda.get_device_properties(dev).total_memory / 2**30, 1)
        if cuda
        else None,
        "cpu_count": os.cpu_count(),
        "bf16_matmul_tflops": float(f"{2.0 * n**3 / secs / 1e12:.4g}"),
        "bf16_matmul": f"{n}x{n} @ {n}x{n}, median of {len(times)} "
        + ("(CUDA events)" if cuda else "(wall clock)"),
    }
    return facts


# -- stage 2: throughput side by side ------------------------------------------------------
def _child_env(plan: Plan) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    if plan.smoke:
        env["OMP_NUM_THREADS"] = "1"
    return env


def run_child(cmd: list[str], log: Path, timeout_s: float, plan: Plan) -> tuple[int | None, float]:
    """Run one child to completion or `timeout_s` (then SIGINT, then kill): (rc, seconds).

    rc is None when it was stopped for time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=_child_env(plan)
        )
        try:
            # stopped STOP_GRACE_S before its time, so that stopping it fits in that time
            rc: int | None = proc.wait(timeout=max(timeout_s - STOP_GRACE_S, 0.1))
        except subprocess.TimeoutExpired:
            stop([proc])
            rc = None
    return rc, time.monotonic() - t0


def stop(procs: Sequence[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """SIGINT (vat saves its state on Ctrl-C), then SIGKILL after `grace_s`."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    end = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def variant_cmd(plan: Plan, v: Variant, config: Path, peak: float | None, out: Path) -> list[str]:
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
    return cmd


def throughput_rows(variants: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per finished variant and loop (vat, plain), for the report's table."""
    rows = []
    for name, v in variants.items():
        if v.get("status") != "done":
            continue
        for voc in v["result"]["vocabs"]:
            for loop in ("vat", "plain"):
                s = voc[loop]
                rows.append(
                    {
                        "variant": name,
                        "vocab": voc["vocab_size"],
                        "compile": voc["compile"],
                        "fused_cross_entropy": voc["fused_cross_entropy"],
                        "loop": loop,
                        "tokens_per_s": s["tokens_per_s"],
                        "vat_over_plain": voc["ratio_vat_over_plain"] if loop == "vat" else None,
                        "mfu": s["mfu"],
                        "hours_for_3e9_tokens": s["hours_for_3e9_tokens"],
                        "recompiles": s.get("recompiles"),
                        "compiled_graphs": s.get("compiled_graphs"),
                        "first_recompile_reasons": s.get("first_recompile_reasons", []),
                    }
                )
    return rows


TARGETS = {
    "tokens_per_s_8k": 1_200_000,
    "vat_over_plain": 0.95,
    "tokens_per_s_32k": 800_000,
    "hours_for_3e9_tokens": 1.0,
}


def judge_targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's throughput targets against the best measured vat row of each vocabulary."""

    def best(vocab: int) -> dict[str, Any] | None:
        cand = [r for r in rows if r["loop"] == "vat" and r["vocab"] == vocab]
        return max(cand, key=lambda r: r["tokens_per_s"]) if cand else None

    b8, b32 = best(8192), best(32768)
    out: dict[str, Any] = {}
    for key, row, field_, higher in (
        ("tokens_per_s_8k", b8, "tokens_per_s", True),
        ("vat_over_plain", b8, "vat_over_plain", True),
        ("tokens_per_s_32k", b32, "tokens_per_s", True),
        ("hours_for_3e9_tokens", b8, "hours_for_3e9_tokens", False),
    ):
        measured = row[field_] if row else None
        reached = None
        if measured is not None:
            reached = measured >= TARGETS[key] if higher else measured <= TARGETS[key]
        out[key] = {
            "target": TARGETS[key],
            "measured": measured,
            "variant": row["variant"] if row else None,
            "reached": reached,
        }
    return out


def compile_diagnosis(rows: list[dict[str, Any]]) -> list[str]:
    """Where a compiled vat step is below its eager twin or recompiled: say so, with why."""
    notes = []
    for r in rows:
        if r["loop"] != "vat" or not r["compile"]:
            continue
        twin = [
            e
            for e in rows
            if e["loop"] == "vat"
            and not e["compile"]
            and e["vocab"] == r["vocab"]
            and e["fused_cross_entropy"] == r["fused_cross_entropy"]
        ]
        slower = twin and r["tokens_per_s"] < twin[0]["tokens_per_s"]
        recompiles = sum(x or 0 for x in (r["recompiles"] or []))
        if slower or recompiles:
            why = "; ".join(r["first_recompile_reasons"][:2]) or "no recompile logged"
            notes.append(
                f"{r['variant']}: compiled vat {r['tokens_per_s']:,.0f} tokens/s"
                + (f" < eager {twin[0]['tokens_per_s']:,.0f}" if slower else "")
                + f", {recompiles} recompiles, graphs {r['compiled_graphs']}: {why}"
            )
    return notes


# -- stages 3 and 4: the rate frontier -----------------------------------------------------
def run_name(value: float) -> str:
    from vat.experiments.config import run_name as sweep_run_name

    return sweep_run_name({TARGET_KL_KEY: value})


def frontier_steps(state: dict[str, Any], plan: Plan, override: int | None) -> tuple[int, str]:
    """The step budget of every frontier run: the same token budget each, sized so that the
    runs, all at once, fill the frontier_train share at the measured 8k throughput (80% of a
    single run's tokens/s, shared between the runs)."""
    if override:
        return override, "--frontier-steps"
    variants = state["throughput"]["variants"]
    for name in ("8k_compiled", "8k_eager"):
        v = variants.get(name)
        if not v or v.get("status") != "done":
            continue
        voc = v["result"]["vocabs"][0]
        tokens_per_step = voc["timed_nonpad_tokens"] / v["result"]["timed_steps"]
        tok_s = voc["vat"]["tokens_per_s"]
        runs = len(plan.target_kls)
        steps = int(0.8 * tok_s * plan.shares_s["frontier_train"] / (runs * tokens_per_step))
        return max(100, min(steps, 50_000)), (
            f"{name}: {tok_s:,.0f} tokens/s x 0.8, {runs} runs, "
            f"{tokens_per_step:,.0f} tokens/step, {plan.shares_s['frontier_train']:.0f} s"
        )
    return plan.frontier_steps_default, "default (no 8k throughput measured)"


def train_cmd(config: Path, run_dir: Path, value: float, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vat",
        "train",
        "-c",
        str(config),
        "--run_dir",
        str(run_dir),
        "--trainer.max_steps",
        str(steps),
        "--trainer.max_time",
        "null",
        "--trainer.val_check_interval",
        str(steps),  # one validation, at the end: val/kl and val/nll
        "--checkpoint.every_n_train_steps",
        str(max(1, steps // 4)),
        f"--{TARGET_KL_KEY}",
        str(value),
        "--model.loss.free_bits",
        "0.0",  # the controller holds the rate (configs/corpus_gpu.yaml's alternative)
        "--ckpt_path",
        "last",  # resumes an interrupted run; starts fresh in an empty run directory
    ]


def sts_option_sets() -> list[tuple[str, list[str]]]:
    """The `vat evaluate` options every frontier run is measured with (STS12 and STS-B)."""
    return [("mean", ["--pooling", "mean"]), ("precision", ["--pooling", "precision"])]


def best_run_option_sets(
    ckpt: Path, data_dir: Path, work: Path, fit_sentences: int
) -> list[tuple[str, list[str]]]:
    """Issue 23's feature specs, evaluated on the frontier's best-STS run: the default spec
    of exported models (vat.features.spec.DEFAULT_EXPORT_SPEC) and the best spec of
    `vat features compare` on that run (by the mean of STS12's five sets and STS-B dev,
    fitted on the run's own training sentences). Each is (name, [vat evaluate options]); its
    STS12 / STS-B Spearman land in the run's `extra_sts[name]`."""
    from vat.cli.features import main as features_main
    from vat.features.spec import DEFAULT_EXPORT_SPEC

    out = work / "feature_compare"
    argv = ["compare", "--model", str(ckpt), "--output-dir", str(out), "--overwrite"]
    argv += ["--data-dir", str(data_dir / "senteval"), "--fit-sentences", str(fit_sentences)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = features_main(argv)
    if rc != 0:
        raise VatError(f"vat features {' '.join(argv)} failed (exit {rc})")
    with open(out / "compare.csv", encoding="utf-8") as f:
        best = next(csv.DictReader(f))["spec"]  # rows are sorted by the selection score
    return [
        ("default_spec", ["--features", DEFAULT_EXPORT_SPEC]),
        ("best_spec", ["--features", best]),
    ]


def _evaluate_sts(ckpt: Path, data_dir: Path, opts: list[str], out: Path) -> dict[str, float]:
    from vat.cli.evaluate import main as evaluate_main

    argv = ["--ckpt", str(ckpt), "--tasks", "STS12,STSBenchmark"]
    argv += ["--data-dir", str(data_dir / "senteval"), *opts]
    argv += ["--output", str(out), "--overwrite", "--quiet"]
    with contextlib.redirect_stdout(io.StringIO()):
        rc = evaluate_main(argv)
    if rc != 0:
        raise VatError(f"vat evaluate {' '.join(argv)} failed (exit {rc})")
    res = json.loads(out.read_text(encoding="utf-8"))
    return {
        "sts12": float(res["STS12"]["all"]["spearman"]["mean"]),
        "stsb": float(res["STSBenchmark-cosine"]["test"]["spearman"]),
    }


def _bleu(ckpt: Path, data_dir: Path, limit: int | None, out: Path) -> dict[str, Any]:
    from vat.cli.generate import main as generate_main

    argv = ["bleu", "--ckpt", str(ckpt), "--input", str(data_dir / NEWSTEST2019)]
    argv += ["--long-over", str(LONG_OVER), "--json", "--output", str(out), "--overwrite"]
    argv += ["--quiet", "--no-progress"] + (["--limit", str(limit)] if limit else [])
    rc = generate_main(argv)
    if rc != 0:
        raise VatError(f"vat generate {' '.join(argv)} failed (exit {rc})")
    return json.loads(out.read_text(encoding="utf-8").strip().splitlines()[-1])


def evaluate_run(
    run_dir: Path, value: float, config: Path, data_dir: Path, plan: Plan
) -> dict[str, Any]:
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
    record = {
        "run": rec["run"],
        "target_kl": value,
        "step": rec["step"],
        "checkpoint": str(ckpt),
        "val_kl": rec["val_kl"],
        "val_nll": rec["val_nll"],
        "active_units": rec["geometry_active_units"],
        "kl_per_token_probe": rec["geometry_kl_per_token"],
        "sts": {},
        "extra_sts": {},
    }
    for name, opts in sts_option_sets():
        record["sts"][name] = _evaluate_sts(ckpt, data_dir, opts, run_dir / f"sts_{name}.json")
    b = _bleu(ckpt, data_dir, plan.bleu_limit, run_dir / "bleu_newstest2019.json")
    record["bleu"] = b["bleu"]
    record["bleu_lines"] = b["n"]
    record["bleu_short"] = b["short"].get("bleu")
    record["bleu_long"] = b["long"].get("bleu")
    record["lines_long"] = b["long"]["n"]
    return record


def stsb(record: dict[str, Any]) -> tuple[float, str]:
    """A run's best STS-B Spearman over the poolings measured, and that pooling."""
    best = max(record["sts"].items(), key=lambda kv: kv[1]["stsb"])
    return best[1]["stsb"], best[0]


def pick_best(records: Sequence[dict[str, Any]], bleu_min: float = BLEU_MIN) -> dict[str, Any]:
    """The issue's question: the best STS-B among runs with BLEU >= bleu_min (or none), and
    the runs the artefacts stage exports (best STS-B of those, else of all; best BLEU)."""
    if not records:
        return {"bleu_min": bleu_min, "best_sts_at_bleu_min": None, "export": {}}
    good = [r for r in records if r["bleu"] >= bleu_min]
    best_good = max(good, key=lambda r: stsb(r)[0]) if good else None
    best_sts = best_good or max(records, key=lambda r: stsb(r)[0])
    best_bleu = max(records, key=lambda r: r["bleu"])

    def brief(r: dict[str, Any]) -> dict[str, Any]:
        s, pooling = stsb(r)
        return {"run": r["run"], "bleu": r["bleu"], "stsb": s, "pooling": pooling}

    if best_good:
        verdict = (
            f"{best_good['run']}: STS-B {100 * stsb(best_good)[0]:.2f} ({stsb(best_good)[1]} "
            f"pooling) at BLEU {best_good['bleu']:.2f}, the best STS-B of the "
            f"{len(good)} runs with BLEU >= {bleu_min:g}"
        )
    else:
        verdict = (
            f"no run reached BLEU {bleu_min:g} (best BLEU {best_bleu['bleu']:.2f}, "
            f"{best_bleu['run']})"
        )
    return {
        "bleu_min": bleu_min,
        "best_sts_at_bleu_min": brief(best_good) if best_good else None,
        "verdict": verdict,
        "export": {
            "best_sts": {
                **brief(best_sts),
                "why": f"best STS-B among BLEU >= {bleu_min:g}"
                if best_good
                else "best STS-B of all runs (none reached the BLEU bar)",
            },
            "best_bleu": {**brief(best_bleu), "why": "best newstest2019 BLEU"},
        },
    }


# -- the suite -----------------------------------------------------------------------------
class Suite:
    def __init__(
        self, out: Path, plan: Plan, data_dir: Path, budget: Budget, steps: int | None
    ) -> None:
        self.out, self.plan, self.data_dir, self.budget = out, plan, data_dir, budget
        self.work = out / "work"
        self.logs = self.work / "logs"
        self.config = self.work / "suite_config.yaml"
        self.steps_override = steps
        self.state = load_state(out, plan.smoke)
        self.failed: list[str] = []

    # the train config every stage uses: configs/corpus_gpu.yaml with the data folder's paths
    def write_config(self) -> None:
        cfg = yaml.safe_load(BASE_CONFIG.read_text(encoding="utf-8"))
        data = cfg["data"]
        for key in ("train_files", "val_files"):
            data[key] = [str(self.data_dir / p[len(SHARED_PREFIX) :]) for p in data[key]]
        data["cache_dir"] = str(self.work / "cache")
        cfg["trainer"].pop("callbacks", None)  # samples and geometry: measured after training
        cfg["trainer"]["enable_progress_bar"] = False
        for dotted, value in self.plan.config_overrides.items():
            node = cfg
            *parents, leaf = dotted.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        self.work.mkdir(parents=True, exist_ok=True)
        text = "# Written by bench/gpu_suite.py from configs/corpus_gpu.yaml\n"
        self.config.write_text(text + yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")

    def save(self) -> None:
        write_json_atomic(self.out / REPORT, self.state)

    def note(self, stage: str, text: str) -> None:
        self.state["stages"][stage]["notes"].append(f"[{now_iso()}] {text}")
        print(f"gpu_suite: {stage}: {text}", file=sys.stderr)

    def check_frontier_files(self) -> None:
        """A report carried to a fresh machine: runs trained (or half trained) there but not
        evaluated have lost their checkpoints, so the frontier is trained again."""
        fr, st = self.state["frontier"], self.state["stages"]["frontier_train"]
        if st["status"] not in ("done", "partial"):
            return
        lost = [
            run_name(v)
            for v in fr["values"]
            if "eval" not in fr["runs"].get(run_name(v), {})
            and not (self.work / "frontier" / run_name(v) / "checkpoints").is_dir()
        ]
        if lost:
            st.update(status="pending", seconds=0.0)
            self.state["stages"]["frontier_eval"]["status"] = "pending"
            self.note("frontier_train", f"checkpoints of {', '.join(lost)} are gone: retraining")

    def run(self, stages: Sequence[str]) -> int:
        if self.plan.smoke:  # tiny shapes: a second thread only spins on a shared CPU
            import torch

            torch.set_num_threads(1)
        self.write_config()
        self.check_frontier_files()
        self.state["calls"].append(
            {
                "started": now_iso(),
                "budget_min": round((self.budget.deadline - self.budget.clock()) / 60, 2),
                "stages": list(stages),
                "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            }
        )
        self.save()
        todo = [s for s in STAGES if s in stages]
        for i, stage in enumerate(todo):
            st = self.state["stages"][stage]
            if st["status"] == "done":
                continue
            reserve = sum(
                self.plan.min_s[s]
                for s in todo[i + 1 :]
                if self.state["stages"][s]["status"] != "done"
            )
            # its share less what earlier calls spent on it (frontier training: about 12
            # minutes in all, however many calls it takes)
            share_left = self.plan.shares_s[stage] - st["seconds"]
            allot = self.budget.allot(max(share_left, self.plan.min_s[stage]), reserve)
            if allot < self.plan.min_s[stage]:
                st["status"] = "skipped" if st["status"] == "pending" else st["status"]
                self.note(
                    stage,
                    f"skipped: needs at least {self.plan.min_s[stage]:.0f} s, "
                    f"{max(self.budget.left(), 0):.0f} s left in this call's budget "
                    f"({reserve:.0f} s kept for the later stages); rerun to continue",
                )
                self.save()
                continue
            t0 = time.monotonic()
            try:
                status = getattr(self, f"stage_{stage}")(allot)
            except VatError as e:
                status = "failed"
                self.note(stage, f"failed: {e}")
            st["seconds"] = round(st["seconds"] + time.monotonic() - t0, 1)
            st["status"] = status
            if status == "failed":
                self.failed.append(stage)
            self.save()
            self.write_outputs()
        self.write_outputs()
        return 1 if self.failed else 0

    def stage_facts(self, allot: float) -> str:
        self.state["facts"] = device_facts(self.plan)
        f = self.state["facts"]
        self.note("facts", f"{f['device']}: bf16 matmul {f['bf16_matmul_tflops']} TFLOP/s")
        return "done"

    def stage_throughput(self, allot: float) -> str:
        t = self.state["throughput"]
        t["not_run"] = dict(self.plan.variants_not_run)
        peak = (self.state.get("facts") or {}).get("bf16_matmul_tflops")
        if not peak:
            self.note("throughput", "no measured peak (facts not run): MFU is over 989 TFLOP/s")
        end = time.monotonic() + allot
        complete = True
        for v in self.plan.variants:
            done = t["variants"].get(v.name, {})
            if done.get("status") == "done" or done.get("final"):
                continue
            left = end - time.monotonic()
            if left < STOP_GRACE_S + self.plan.min_s["throughput"] / 3:
                t["variants"][v.name] = {"status": "skipped", "note": "stage budget spent"}
                complete = False
                continue
            out = self.work / "throughput" / f"{v.name}.json"
            out.unlink(missing_ok=True)
            cmd = variant_cmd(self.plan, v, self.config, peak, out)
            rc, secs = run_child(cmd, self.logs / f"throughput_{v.name}.log", left, self.plan)
            if rc == 0 and out.is_file():
                result = json.loads(out.read_text(encoding="utf-8"))
                t["variants"][v.name] = {"status": "done", "seconds": round(secs), "result": result}
                self.note("throughput", f"{v.name}: done in {secs:.0f} s")
            elif rc is None:
                t["variants"][v.name] = {
                    "status": "timed_out",
                    # a variant given FINAL_TIMEOUT_S that still did not finish is not tried
                    # again (a compile that never settles); a shorter stop is retried
                    "final": secs >= FINAL_TIMEOUT_S,
                    "note": f"stopped after {secs:.0f} s (the stage's time was spent); "
                    f"a compiled step that does not settle shows here: see "
                    f"logs/throughput_{v.name}.log for its recompiles",
                }
                complete = False
                self.note("throughput", f"{v.name}: stopped after {secs:.0f} s")
            else:
                t["variants"][v.name] = {
                    "status": "failed",
                    "note": f"exit {rc}: {_last_line(self.logs / f'throughput_{v.name}.log')}",
                }
                complete = False
                self.note("throughput", f"{v.name}: failed (exit {rc})")
            self.save()
        rows = throughput_rows(t["variants"])
        t["rows"] = rows
        t["targets"] = judge_targets(rows)
        t["compile_diagnosis"] = compile_diagnosis(rows)
        if any(v.get("status") == "failed" for v in t["variants"].values()):
            return "failed"
        return "done" if complete else "partial"

    def stage_frontier_train(self, allot: float) -> str:
        fr = self.state["frontier"]
        if fr["steps"] is None:
            fr["steps"], fr["steps_from"] = frontier_steps(
                self.state, self.plan, self.steps_override
            )
            fr["values"] = list(self.plan.target_kls)
            self.note("frontier_train", f"{fr['steps']} steps per run ({fr['steps_from']})")
        runs_dir = self.work / "frontier"
        pending = [
            v
            for v in fr["values"]
            if not (runs_dir / run_name(v) / ".trained").exists()
            and "eval" not in fr["runs"].get(run_name(v), {})
        ]
        self._prepare_data()
        procs: list[tuple[float, subprocess.Popen, Any]] = []
        end = time.monotonic() + allot - STOP_GRACE_S  # stopping the runs fits in allot
        for v in pending:
            run_dir = runs_dir / run_name(v)
            log = self.logs / f"train_{run_name(v)}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            f = open(log, "a", encoding="utf-8")  # noqa: SIM115 (closed when the child ends)
            cmd = train_cmd(self.config, run_dir, v, fr["steps"])
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            p = subprocess.Popen(
                cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=_child_env(self.plan)
            )
            procs.append((v, p, f))
        while any(p.poll() is None for _, p, _ in procs) and time.monotonic() < end:
            time.sleep(self.plan.poll_s)
        interrupted = [p for _, p, _ in procs if p.poll() is None]
        if interrupted:
            self.note(
                "frontier_train",
                f"{len(interrupted)} runs interrupted at the call's budget (each saves its "
                "state); the next call resumes them",
            )
            stop(interrupted)
        failed = []
        for v, p, f in procs:
            f.close()
            name = run_name(v)
            if p in interrupted:
                continue
            if p.returncode == 0:
                (runs_dir / name / ".trained").write_text("")
                fr["runs"].setdefault(name, {})["trained"] = True
            else:
                failed.append(name)
                self.note(
                    "frontier_train",
                    f"{name} failed (exit {p.returncode}): "
                    f"{_last_line(self.logs / f'train_{name}.log')}",
                )
        if failed:
            return "failed"
        return "partial" if interrupted else "done"

    def _prepare_data(self) -> None:
        """The tokenizer and tokenized cache once, before the parallel runs read them."""
        from vat.cli.train import prepare_data

        with contextlib.redirect_stdout(io.StringIO()):
            rc = prepare_data(["-c", str(self.config), "--run_dir", str(self.work / ".prepare")])
        if rc != 0:
            raise VatError(f"preparing the data of {self.config} failed (exit {rc})")

    def stage_frontier_eval(self, allot: float) -> str:
        fr = self.state["frontier"]
        runs_dir = self.work / "frontier"
        if not fr["values"]:
            self.note("frontier_eval", "skipped: the frontier has not been trained")
            return "skipped"
        end = time.monotonic() + allot
        per_run: list[float] = []
        missing = []
        for v in fr["values"]:
            name = run_name(v)
            rec_path = runs_dir / name / "suite_eval.json"
            if rec_path.is_file():
                fr["runs"].setdefault(name, {})["eval"] = json.loads(rec_path.read_text())
                continue
            if "eval" in fr["runs"].get(name, {}):  # evaluated on a machine since given back
                continue
            if not (runs_dir / name / ".trained").exists():
                missing.append(name)
                continue
            guess = max(per_run) if per_run else self.plan.min_s["frontier_eval"] / 2
            if end - time.monotonic() < guess:
                self.note("frontier_eval", f"{name}: not evaluated, the stage's time is spent")
                missing.append(name)
                continue
            t0 = time.monotonic()
            record = evaluate_run(runs_dir / name, v, self.config, self.data_dir, self.plan)
            write_json_atomic(rec_path, record)
            fr["runs"].setdefault(name, {})["eval"] = record
            per_run.append(time.monotonic() - t0)
            self.note("frontier_eval", f"{name}: evaluated in {per_run[-1]:.0f} s")
            self.save()
        records = [fr["runs"][n]["eval"] for n in fr["runs"] if "eval" in fr["runs"][n]]
        fr["best"] = pick_best(records)
        best = fr["best"]["export"].get("best_sts")
        if best and not missing:
            self._evaluate_best_extra(best["run"], runs_dir)
        if missing:
            self.note("frontier_eval", f"not yet evaluated: {', '.join(missing)}")
            return "partial"
        return "done"

    def _evaluate_best_extra(self, name: str, runs_dir: Path) -> None:
        """Issue 23's feature specs on the best-STS run (best_run_option_sets)."""
        rec = self.state["frontier"]["runs"][name]["eval"]
        if {"default_spec", "best_spec"} <= set(rec["extra_sts"]):
            return
        ckpt = Path(rec["checkpoint"])
        fit_sentences = 2_000 if self.plan.smoke else 20_000
        option_sets = best_run_option_sets(ckpt, self.data_dir, runs_dir / name, fit_sentences)
        for set_name, opts in option_sets:
            if set_name in rec["extra_sts"]:
                continue
            out = runs_dir / name / f"sts_extra_{set_name}.json"
            rec["extra_sts"][set_name] = {
                "options": opts,
                **_evaluate_sts(ckpt, self.data_dir, opts, out),
            }
            write_json_atomic(runs_dir / name / "suite_eval.json", rec)

    def stage_artefacts(self, allot: float) -> str:
        from vat.cli.export import main as export_main

        best = (self.state["frontier"].get("best") or {}).get("export") or {}
        if self.state["stages"]["frontier_eval"]["status"] != "done" or not best:
            self.note("artefacts", "skipped: the frontier is not evaluated yet")
            return "skipped"
        runs = self.state["frontier"]["runs"]
        for kind in ("best_sts", "best_bleu"):
            name = best[kind]["run"]
            folder = self.work / "export" / kind
            ckpt = runs[name]["eval"]["checkpoint"]
            with contextlib.redirect_stdout(io.StringIO()):
                rc = export_main([ckpt, str(folder), "--overwrite"])
            if rc != 0:
                raise VatError(f"vat export {ckpt} {folder} failed (exit {rc})")
            tar = self.out / f"{kind}.tar"
            pack(tar, folder, arcname=f"{kind}_{name}")
            size = tar.stat().st_size
            self.state["artefacts"][kind] = {
                **best[kind],
                "file": tar.name,
                "folder_in_tar": f"{kind}_{name}",
                "bytes": size,
                "within_16_mib": size <= MAX_OUT_FILE,
            }
            self.note("artefacts", f"{tar.name}: {name} ({size / 2**20:.1f} MiB)")
        return "done"

    # -- the report ----------------------------------------------------------------------
    def write_outputs(self) -> None:
        self.save()
        atomic_text(self.out / "gpu_report.md", render_markdown(self.state))
        records = [r["eval"] for r in self.state["frontier"]["runs"].values() if "eval" in r]
        if records:
            try:
                plot_frontier(records, self.out / "frontier.png")
            except ImportError:
                self.state["frontier"]["plot"] = "not drawn: matplotlib is not installed"
                self.save()
        if self.logs.is_dir():
            pack(self.out / "logs.tar.gz", self.logs, arcname="logs", gz=True)


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"


def atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def pack(dest: Path, folder: Path, arcname: str, gz: bool = False) -> None:
    """A folder as one tar file (atomically: a temporary file renamed into place)."""
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    with tarfile.open(tmp, "w:gz" if gz else "w") as tf:
        tf.add(folder, arcname=arcname)
    os.replace(tmp, dest)


def plot_frontier(records: Sequence[dict[str, Any]], path: Path) -> None:
    """BLEU (left axis) and STS-B Spearman x 100 (right, each pooling) against val KL."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    recs = sorted((r for r in records if r["val_kl"] is not None), key=lambda r: r["val_kl"])
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(111)
    x = [r["val_kl"] for r in recs]
    ax.plot(x, [r["bleu"] for r in recs], "o-", color="tab:blue", label="BLEU newstest2019")
    ax.axhline(BLEU_MIN, color="tab:blue", ls=":", lw=0.8)
    for r in recs:
        ax.annotate(f"{r['target_kl']:g}", (r["val_kl"], r["bleu"]), fontsize=7)
    ax.set_xlabel("rate: validation KL (nats per token)")
    ax.set_ylabel("reconstruction BLEU (greedy mu-decoding)")
    ax2 = ax.twinx()
    for pooling, style in (("mean", "s--"), ("precision", "^--")):
        ys = [100 * r["sts"][pooling]["stsb"] for r in recs if pooling in r["sts"]]
        if len(ys) == len(recs):
            ax2.plot(x, ys, style, color="tab:red", label=f"STS-B ({pooling} pooling)")
    ax2.set_ylabel("STS-B Spearman x 100")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
    ax.set_title("The rate frontier (labels: target_kl)")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def _fmt(x: Any, spec: str = ".2f", scale: float = 1.0) -> str:
    return "n/a" if x is None else format(scale * x, spec)


def render_markdown(state: dict[str, Any]) -> str:
    """gpu_report.md: the stages, the device, throughput, the frontier, the artefacts."""
    f = state.get("facts") or {}
    lines = [
        f"# vat GPU suite report ({state['mode']})",
        "",
        f"Device: {f.get('device', 'n/a')}; torch {f.get('torch', 'n/a')}, CUDA "
        f"{f.get('cuda') or 'n/a'}; measured bf16 matmul peak "
        f"{_fmt(f.get('bf16_matmul_tflops'), '.4g')} TFLOP/s "
        f"({f.get('bf16_matmul', 'not measured')}).",
        "",
        "Calls: " + "; ".join(f"{c['started']} `{c['command']}`" for c in state["calls"]),
        "",
        "## Stages",
        "",
        "| stage | status | seconds | last note |",
        "|---|---|---:|---|",
    ]
    for name in STAGES:
        s = state["stages"][name]
        last = s["notes"][-1] if s["notes"] else ""
        lines.append(f"| {name} | {s['status']} | {s['seconds']:.0f} | {last} |")
    t = state["throughput"]
    lines += [
        "",
        "## Throughput (vat's loop and a plain loop, side by side)",
        "",
        "| variant | vocab | loop | non-pad tokens/s | vat / plain | MFU | hours for 3e9 "
        "tokens | recompiles | graphs |",
        "|---|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for r in t.get("rows", []):
        lines.append(
            f"| {r['variant']} | {r['vocab']} | {r['loop']} | {r['tokens_per_s']:,.0f} | "
            f"{_fmt(r['vat_over_plain'], '.3f')} | {_fmt(r['mfu'], '.2%')} | "
            f"{_fmt(r['hours_for_3e9_tokens'])} | {r['recompiles']} | {r['compiled_graphs']} |"
        )
    for name, v in t.get("variants", {}).items():
        if v.get("status") != "done":
            lines.append(f"\n- {name}: {v['status']}: {v.get('note', '')}")
    for key, why in t.get("not_run", {}).items():
        lines.append(f"\n- {key}: {why}")
    for note in t.get("compile_diagnosis", []):
        lines.append(f"\n- compile: {note}")
    if t.get("targets"):
        lines += ["", "Targets (the issue's; judged only on a GPU):", ""]
        for key, j in t["targets"].items():
            verdict = (
                "n/a (smoke run, CPU)"
                if state["mode"] == "smoke"
                else {True: "reached", False: "not reached", None: "not measured"}[j["reached"]]
            )
            lines.append(f"- {key}: target {j['target']:,}, measured {_fmt(j['measured'], ',.3f')}"
                         f" ({j['variant']}): {verdict}")  # fmt: skip
    fr = state["frontier"]
    lines += [
        "",
        f"## The rate frontier ({fr['key']}, {fr['steps']} steps each: {fr['steps_from']})",
        "",
        "| run | target KL | steps | val KL | val NLL | active units | BLEU | BLEU <= 63 | "
        "BLEU > 63 (lines) | STS12 mean | STS12 precision | STS-B mean | STS-B precision |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    recs = [r["eval"] for r in fr["runs"].values() if "eval" in r]
    for r in sorted(recs, key=lambda r: r["target_kl"]):
        s = r["sts"]
        lines.append(
            f"| {r['run']} | {r['target_kl']:g} | {r['step']} | {_fmt(r['val_kl'])} | "
            f"{_fmt(r['val_nll'], '.3f')} | {r['active_units']} | {_fmt(r['bleu'])} | "
            f"{_fmt(r['bleu_short'])} | {_fmt(r['bleu_long'])} ({r['lines_long']}) | "
            f"{_fmt(s['mean']['sts12'], '.2f', 100)} | {_fmt(s['precision']['sts12'], '.2f', 100)}"
            f" | {_fmt(s['mean']['stsb'], '.2f', 100)} | "
            f"{_fmt(s['precision']['stsb'], '.2f', 100)} |"
        )
    if fr.get("best"):
        lines += ["", f"Best: {fr['best'].get('verdict', 'n/a')}."]
    for r in recs:
        for set_name, x in r.get("extra_sts", {}).items():  # issue 23's feature specs
            lines.append(
                f"- {r['run']}, {set_name} (`{' '.join(x['options'])}`): STS12 "
                f"{_fmt(x['sts12'], '.2f', 100)}, STS-B {_fmt(x['stsb'], '.2f', 100)}"
            )
    if fr.get("plot"):
        lines += ["", f"Plot: {fr['plot']}"]
    elif recs:
        lines += ["", "![frontier](frontier.png)"]
    if state["artefacts"]:
        lines += ["", "## Artefacts", ""]
        for a in state["artefacts"].values():
            lines.append(
                f"- `{a['file']}` ({a['bytes'] / 2**20:.1f} MiB): {a['run']}, {a['why']}; "
                f"`tar xf {a['file']}` gives the vat folder `{a['folder_in_tar']}/` "
                "(vat.load, --ckpt)"
            )
    return "\n".join(lines) + "\n"


# -- command line --------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    from vat.cli.common import Parser

    p = Parser(
        prog="bench/gpu_suite.sh",
        description="The GPU suite (issue 22): device facts, throughput side by side, the rate "
        "frontier and its artefacts, within a time budget, resumable in OUT_DIR.",
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="report, artefacts and state (work/)")
    p.add_argument(
        "--budget-min", type=float, default=24.0, help="minutes this call may take (default 24)"
    )
    p.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated stages to run (default all): {','.join(STAGES)}",
    )
    p.add_argument("--smoke", action="store_true", help="every stage on CPU with tiny shapes")
    p.add_argument(
        "--data-dir",
        default=None,
        help="the shared data folder (default $VAT_DATA_DIR, else ../shared/data)",
    )
    p.add_argument(
        "--frontier-steps",
        type=int,
        default=None,
        help="steps per frontier run (default: sized from the 8k throughput to fill 12 min)",
    )
    p.add_argument("--debug", action="store_true", help="tracebacks for errors")
    return p


def _main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        raise VatError(f"--stages: unknown {', '.join(unknown) or '(none)'}; choose from "
                       f"{', '.join(STAGES)}")  # fmt: skip
    if not (math.isfinite(args.budget_min) and args.budget_min > 0):
        raise VatError(f"--budget-min must be a positive number of minutes, got {args.budget_min}")
    if args.frontier_steps is not None and args.frontier_steps < 1:
        raise VatError(f"--frontier-steps must be at least 1, got {args.frontier_steps}")
    out = Path(args.out_dir)
    if out.exists() and not out.is_dir():
        raise VatError(f"OUT_DIR {out} is a file, expected a folder")
    default_data = os.environ.get("VAT_DATA_DIR") or str(ROOT.parent / "shared" / "data")
    data_dir = Path(args.data_dir or default_data).resolve()
    check_packages()
    if not args.smoke:
        import torch

        if not torch.cuda.is_available():
            raise VatError(
                "no CUDA device here: the GPU suite measures a GPU (--smoke runs every stage "
                "on CPU with tiny shapes, to check the suite itself)"
            )
    check_data(data_dir)
    budget = Budget(args.budget_min)
    out.mkdir(parents=True, exist_ok=True)
    suite = Suite(out.resolve(), smoke_plan() if args.smoke else gpu_plan(), data_dir, budget,
                  args.frontier_steps)  # fmt: skip
    rc = suite.run(stages)
    extra = sorted(p.name for p in out.iterdir() if p.is_file() and p.name not in OUT_FILES)
    if extra:
        print(f"gpu_suite: note: OUT_DIR also holds {', '.join(extra)}", file=sys.stderr)
    print(f"wrote {out / REPORT} and {out / 'gpu_report.md'}", file=sys.stderr)
    if suite.failed:
        print(f"error: stages failed: {', '.join(suite.failed)} (see {out / 'gpu_report.md'})",
              file=sys.stderr)  # fmt: skip
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
