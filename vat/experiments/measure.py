"""Measure one trained sweep run: final val losses, latent geometry, STS, BLEU and (when
asked) the feature-spec comparison, all from one read of its checkpoint."""

from __future__ import annotations

import itertools
from functools import partial
from pathlib import Path
from typing import Any

from vat.errors import VatError, finite
from vat.eval.engine import EvalSettings, evaluate
from vat.experiments.config import Point, SweepConfig, run_name
from vat.feature_spec import DEFAULT_EXPORT_SPEC
from vat.features import sentence_features, token_vectors
from vat.features.compare import BASELINE
from vat.generate.generator import VATGenerator
from vat.geometry.metrics import geometry_report
from vat.geometry.probes import iter_lines, load_probe_sentences
from vat.runtime import resolve_device
from vat.share.resolve import load_model

# record field -> TensorBoard scalar (the last value logged is the final one)
VAL_TAGS = {f"val_{k}": f"val/{k}" for k in ("nll", "kl", "kl_weighted", "loss")}

# GeometryReport fields copied into each record (prefixed with `geometry_`)
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
CURVE_TAGS = ("train/loss", "val/loss")
FEATURE_COMPARE_DIR = "feature_compare"
# select_* is the selection score (mean of STS12's sets and STS-B dev), *_best the winner's
# scores; all Spearman x 100 already
FEATURE_COMPARE_FIELDS = (
    "select_mu_mean",
    "select_layer0_sif",
    "best_contextual_spec",
    "select_best_contextual",
    "best_sentence_spec",
    "select_best_sentence",
    "best_spec",
    "select_best",
    "sts12_best",
    "stsb_dev_best",
    "stsb_test_best",
)
STS_COLUMNS = {"STSBenchmark": "stsb_spearman", "SICKRelatedness": "sickr_spearman"}


def sts_column(task: str) -> str:
    return STS_COLUMNS.get(task, f"{task.lower()}_spearman")


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """All TensorBoard scalars of a run: {tag: [(step, value), ...]} in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    return {t: sorted((e.step, e.value) for e in ea.Scalars(t)) for t in ea.Tags()["scalars"]}


def measure_run(cfg: SweepConfig, point: Point, run_dir: Path) -> dict[str, Any]:
    ckpt_path = run_dir / "checkpoints" / "last.ckpt"
    loaded = load_model(ckpt_path, resolve_device(cfg.device))  # the only read of it
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
    if cfg.feature_compare:
        record.update(_feature_compare(cfg, loaded, run_dir))
    record["curves"] = {tag: scalars.get(tag, []) for tag in CURVE_TAGS}
    return record


def _geometry(cfg: SweepConfig, loaded) -> dict[str, Any]:
    probe = Path(cfg.probe)
    kind = {"senteval_dir": probe} if probe.is_dir() else {"probe_file": probe}
    sentences = load_probe_sentences(**kind, max_sentences=cfg.probe_max_sentences)
    tv = token_vectors(loaded.model, loaded.tokenizer, sentences)
    try:
        rep = geometry_report(
            tv.vectors, tv.token_ids, tv.sentence_ids, tv.logvar, loaded.prior_std, cfg.min_count
        )
    except ValueError as e:
        raise VatError(f"geometry on probe {cfg.probe} failed: {e}") from None
    fields = (*GEOMETRY_FIELDS, "num_sentences", "num_tokens")
    return {f"geometry_{k}": getattr(rep, k) for k in fields}


def _sts(cfg: SweepConfig, loaded) -> dict[str, float | None]:
    """Cosine Spearman of mean-pooled mu on each of cfg.sts_tasks (None when skipped)."""
    columns = {t: sts_column(t) for t in cfg.sts_tasks}
    if cfg.senteval_dir is None or not cfg.sts_tasks:
        return dict.fromkeys(columns.values())

    encode = partial(sentence_features, loaded.model, loaded.tokenizer, pooling="mean")
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


def _feature_compare(cfg: SweepConfig, loaded, run_dir: Path) -> dict[str, Any]:
    """`vat features compare` on the run's model into <run_dir>/feature_compare/; its fields."""
    from vat.features import compare

    out = compare.check_output_set(str(run_dir / FEATURE_COMPARE_DIR), overwrite=True)
    tasks = compare.load_sts_tasks(cfg.senteval_dir)
    comparison = compare.compare_sts(
        loaded,
        tasks,
        cfg.fit_files,  # checked against senteval_dir with the config; None: the run's sample
        compare.CompareSettings(fit_sentences=cfg.fit_sentences),
        name=str(run_dir / "checkpoints" / "last.ckpt"),
    )
    compare.write_compare_set(out, comparison)
    return compare_fields(comparison.rows)


def baseline_records(cfg: SweepConfig) -> list[dict[str, Any]]:
    """A table row per same-data baseline of `cfg.baselines`, scored on the comparison's STS
    tasks as every run's specs are (vat.features.compare.baseline_row)."""
    if not cfg.baselines:
        return []
    from vat.eval.word_vectors import word_vector_baselines
    from vat.features import compare

    tasks = compare.load_sts_tasks(cfg.senteval_dir)
    pairs = [(b["vectors"], b.get("counts")) for b in cfg.baselines]
    records = []
    for (vectors, _), (name, encode) in zip(pairs, word_vector_baselines(pairs)):
        row = compare.baseline_row(name, encode, tasks)
        best = {"select_best": compare.SELECT, "sts12_best": "STS12"}
        best |= {"stsb_dev_best": "STS-B dev", "stsb_test_best": "STS-B test"}
        scores = {field: row.get(column) for field, column in best.items()}
        records.append({"run": name, "baseline": str(vectors), "best_spec": name, **scores})
    return records


def compare_fields(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The `FEATURE_COMPARE_FIELDS` of a comparison's rows (best first)."""
    from vat.feature_spec import FeatureSpec
    from vat.features.compare import SELECT

    def score(row: dict[str, Any] | None, column: str = SELECT) -> float | None:
        value = None if row is None else row.get(column)
        return float(value) if finite(value) else None

    def contextual(spec: str) -> bool:
        source = FeatureSpec.parse(spec).source
        return source == "firstlast" or (source.startswith("layer") and source != "layer0")

    by_spec = {r["spec"]: r for r in rows}
    best_contextual = next((r for r in rows if contextual(r["spec"])), None)
    best_sentence = next((r for r in rows if r["spec"].startswith("sentence/")), None)
    best = rows[0] if rows else None
    return {
        "select_mu_mean": score(by_spec.get(BASELINE)),
        "select_layer0_sif": score(by_spec.get(DEFAULT_EXPORT_SPEC)),
        "best_contextual_spec": None if best_contextual is None else best_contextual["spec"],
        "select_best_contextual": score(best_contextual),
        "best_sentence_spec": None if best_sentence is None else best_sentence["spec"],
        "select_best_sentence": score(best_sentence),
        "best_spec": None if best is None else best["spec"],
        "select_best": score(best),
        "sts12_best": score(best, "STS12"),
        "stsb_dev_best": score(best, "STS-B dev"),
        "stsb_test_best": score(best, "STS-B test"),
    }
