"""What each mode runs (the GPU suite, or --smoke on CPU), and the data and packages it needs.

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

from vat.errors import VatError

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the suite runs from it (nothing installed)."""
BASE_CONFIG = ROOT / "configs" / "corpus_gpu.yaml"
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
