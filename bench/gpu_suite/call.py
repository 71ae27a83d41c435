"""What a stage works with: one call of the suite on OUT_DIR.

OUT_DIR holds at most 8 files (OUT_FILES: the report, its Markdown, the plot, three exported
models, the logs), each under 16 MiB; the runs, caches and logs live in OUT_DIR/work/. The
state (the report, a dict) is saved as OUT_DIR/gpu_report.json as the stages go (after each
stage, throughput variant and evaluated run), so that the next call continues from there."""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

import yaml

from bench.gpu_suite.plan import BASE_CONFIG, REFERENCE_CONFIG, SHARED_PREFIX, Plan
from vat.io import atomic_write, write_json_atomic

REPORT = "gpu_report.json"
OUT_FILES = (
    "gpu_report.json",
    "gpu_report.md",
    "frontier.png",
    "best_sts.tar",
    "best_bleu.tar",
    "reference.tar",
    "logs.tar.gz",
)
"""Everything the suite writes at OUT_DIR's top level (at most 8 files, each <= 16 MiB)."""
MAX_OUT_FILE = 16 * 2**20


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tokens_text(n: float | None) -> str:
    """600.0M, or 6,000 below a million (the smoke run's budgets)."""
    if n is None:
        return "n/a"
    return f"{n / 1e6:,.1f}M" if n >= 1e6 else f"{n:,.0f}"


def pack(dest: Path, folder: Path, arcname: str, gz: bool = False) -> None:
    """A folder as one tar file (atomically: a temporary file renamed into place)."""
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    with tarfile.open(tmp, "w:gz" if gz else "w") as tf:
        tf.add(folder, arcname=arcname)
    os.replace(tmp, dest)


def copy_atomic(src: Path, dest: Path) -> None:
    """`src` copied to `dest` through vat.io.atomic_write (a fresh temporary file renamed
    into place: a link at `dest` is replaced, never written through)."""

    def write(f) -> None:
        with open(src, "rb") as s:
            shutil.copyfileobj(s, f)

    atomic_write(dest, write, binary=True)


class Call:
    """OUT_DIR and its work folder, the train config, the plan, the data folder, the state
    (gpu_report.json's content) and the notes of one call; every stage's `run` gets one."""

    def __init__(
        self, out: Path, plan: Plan, data_dir: Path, steps: int | None, state: dict[str, Any]
    ) -> None:
        self.out, self.plan, self.data_dir, self.state = out, plan, data_dir, state
        self.work = out / "work"
        self.logs = self.work / "logs"
        self.config = self.work / "suite_config.yaml"
        self.reference_config = self.work / "reference_config.yaml"
        self.steps_override = steps

    def write_config(self) -> None:
        """The train configs the stages use, with the data folder's paths and the mode's
        overrides: configs/corpus_gpu.yaml (throughput, frontier) and
        configs/reference_gpu.yaml (the reference)."""
        self.work.mkdir(parents=True, exist_ok=True)
        for base, dest in ((BASE_CONFIG, self.config), (REFERENCE_CONFIG, self.reference_config)):
            self._write_config(base, dest)

    def _write_config(self, base: Path, dest: Path) -> None:
        cfg = yaml.safe_load(base.read_text(encoding="utf-8"))
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
        text = f"# Written by bench/gpu_suite from configs/{base.name}\n"
        dest.write_text(text + yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")

    def save(self) -> None:
        write_json_atomic(self.out / REPORT, self.state)

    def note(self, stage: str, text: str) -> None:
        self.state["stages"][stage]["notes"].append(f"[{now_iso()}] {text}")
        print(f"gpu_suite: {stage}: {text}", file=sys.stderr)
