"""Measure one trained sweep run: final val losses, latent geometry, STS and BLEU.

The checkpoint is read once (`vat.share.resolve.load_model`), and that one loaded model
serves the geometry probe, the STS encoder and the reconstruction BLEU.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from vat.errors import VatError
from vat.eval.engine import EvalSettings, evaluate
from vat.experiments.config import Point, SweepConfig, run_name
from vat.features import sentence_features, token_vectors
from vat.generate.generator import VATGenerator
from vat.geometry.metrics import geometry_report
from vat.geometry.probes import iter_lines, load_probe_sentences
from vat.runtime import resolve_device
from vat.share.resolve import load_model

VAL_TAGS = {
    "val_nll": "val/nll",
    "val_kl": "val/kl",
    "val_kl_weighted": "val/kl_weighted",
    "val_loss": "val/loss",
}
"""Record field -> TensorBoard scalar (the last value logged is the final one)."""

GEOMETRY_FIELDS = (
    "anisotropy",
    "self_similarity",
    "self_similarity_adjusted",
    "intra_sentence_similarity",
    "intra_sentence_similarity_adjusted",
    "isoscore",
    "active_units",
    "kl_per_token",
)
"""GeometryReport fields copied into each record (prefixed with `geometry_`)."""

CURVE_TAGS = ("train/loss", "val/loss")

STS_COLUMNS = {"STSBenchmark": "stsb_spearman", "SICKRelatedness": "sickr_spearman"}
"""Record column of each STS task; STS12-16 become sts12_spearman ... sts16_spearman."""


def sts_column(task: str) -> str:
    return STS_COLUMNS.get(task, f"{task.lower()}_spearman")


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """All TensorBoard scalars of a run: {tag: [(step, value), ...]} in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    return {t: sorted((e.step, e.value) for e in ea.Scalars(t)) for t in ea.Tags()["scalars"]}


def measure_device(device: str) -> str:
    """The sweep's `--device` for measuring (`vat.runtime.resolve_device`, the one rule)."""
    return resolve_device(device)


def measure_run(cfg: SweepConfig, point: Point, run_dir: Path) -> dict[str, Any]:
    """The record of one trained run: its point, losses, geometry, STS and BLEU."""

    ckpt_path = run_dir / "checkpoints" / "last.ckpt"
    device = measure_device(cfg.device)
    loaded = load_model(ckpt_path, device)  # the only read of the checkpoint
    record: dict[str, Any] = {
        **point,
        "run": run_name(point),
        "prior_std": loaded.prior_std,
        "step": int(loaded.training.get("global_step", 0)),  # training steps done
        "run_dir": str(run_dir),
        "checkpoint": str(ckpt_path),
    }
    scalars = read_scalars(run_dir)
    for key, tag in VAL_TAGS.items():
        record[key] = scalars[tag][-1][1] if scalars.get(tag) else None
    # where those come from: a run stopped between validations has trained past it
    val = scalars.get(VAL_TAGS["val_nll"])
    record["val_step"] = int(val[-1][0]) if val else None
    record.update(_geometry(cfg, loaded))
    record.update(_sts(cfg, loaded))
    record["bleu"] = _bleu(cfg, loaded)
    record["curves"] = {tag: scalars.get(tag, []) for tag in CURVE_TAGS}
    return record


def _geometry(cfg: SweepConfig, loaded) -> dict[str, Any]:

    probe = Path(cfg.probe)
    kind = {"senteval_dir": probe} if probe.is_dir() else {"probe_file": probe}
    sentences = load_probe_sentences(**kind, max_sentences=cfg.probe_max_sentences)
    tv = token_vectors(loaded.model, loaded.tokenizer, sentences)
    try:
        rep = geometry_report(
            tv.vectors,
            tv.token_ids,
            tv.sentence_ids,
            logvar=tv.logvar,
            prior_std=loaded.prior_std,
            min_count=cfg.min_count,
        )
    except ValueError as e:
        raise VatError(f"geometry on probe {cfg.probe} failed: {e}") from None
    out = {f"geometry_{k}": getattr(rep, k) for k in GEOMETRY_FIELDS}
    out["geometry_num_sentences"] = rep.num_sentences
    out["geometry_num_tokens"] = rep.num_tokens
    return out


def _sts(cfg: SweepConfig, loaded) -> dict[str, float | None]:
    """Cosine Spearman of mean-pooled mu on each of cfg.sts_tasks (None when skipped)."""
    columns = {t: sts_column(t) for t in cfg.sts_tasks}
    if cfg.senteval_dir is None or not cfg.sts_tasks:
        return dict.fromkeys(columns.values())

    def encode(sentences: list[str]):
        return sentence_features(loaded.model, loaded.tokenizer, sentences, pooling="mean")

    results, _ = evaluate(
        encode, cfg.sts_tasks, cfg.senteval_dir, EvalSettings(relatedness="cosine", progress=False)
    )
    out: dict[str, float | None] = {}
    for task, col in columns.items():
        if task in ("STSBenchmark", "SICKRelatedness"):
            out[col] = float(results[f"{task}-cosine"]["test"]["spearman"])
        else:  # SentEval's headline number for STS12-16: the mean over the year's subsets
            out[col] = float(results[task]["all"]["spearman"]["mean"])
    return out


def _bleu(cfg: SweepConfig, loaded) -> float | None:
    if cfg.bleu_file is None:
        return None

    # only the lines asked for are read: bleu_file may be a whole corpus
    lines = list(itertools.islice(iter_lines(cfg.bleu_file), cfg.bleu_lines))
    if not lines:
        raise VatError(f"bleu_file {cfg.bleu_file} has no non-empty lines")
    return float(VATGenerator.from_loaded(loaded).score(lines).bleu)
