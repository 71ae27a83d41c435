"""Which vectors a model gives, and the statistics behind them: `features_for`, the one
entry (docs/features.md, "Which vectors a model gives").

With no spec named, a model's sentence vectors follow its feature spec. An exported folder's
is its own (sentence_vat_config.json). A training run or checkpoint (or a folder from before
specs) has the spec `vat export` would give it, DEFAULT_EXPORT_SPEC, whose SIF weights come
from the training token counts the checkpoint records, so a model and its export give the
same vectors. Where that spec cannot be had (no recorded counts), the vectors are the mean
of mu, and `ChosenFeatures.why` says so. A named spec's statistics are the model's own, those
an earlier fit stored beside it, or fitted (vat.features.fitting) and stored there.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vat.errors import CheckpointError, OptionError, VatError, check_count
from vat.feature_spec import DEFAULT_EXPORT_SPEC, FOLDER_STATS_NAME, FeatureSpec, FittedFeatures
from vat.features.fitting import (
    FitOptions,
    fit_features,
    fit_ids_for,
    recorded_sif_features,
    token_counts_for,
)
from vat.io import regular_file
from vat.share.folder import ST_MODULE_CONFIG_NAME
from vat.share.loaded import LoadedVAT, takes_loaded


def check_pooling(pooling: str | None, features: object) -> None:
    """A feature spec names its own weighting, so `pooling` with `features` is refused, never
    silently ignored. "mean" is let through: it was the default of every `pooling` argument
    and is what old sentence_vat_config.json files hold beside their spec."""
    if features is not None and pooling not in (None, "mean"):
        raise OptionError(
            "pooling",
            f"{pooling!r} cannot be combined with the feature spec "
            f"{str(getattr(features, 'spec', features))!r}, which names its own weighting "
            "(e.g. mu/sum/none is sum pooling of mu); give one of the two",
        )


@dataclass(frozen=True)
class ChosenFeatures:
    """The fitted features a caller gets, and why (`features_for`)."""

    fitted: FittedFeatures
    why: str
    """Why this spec, in a few words (for tables, results files and warnings)."""
    fallback: bool = False
    """True when the default rule's spec could not be had and the vectors are the mean of mu."""

    @property
    def spec(self) -> FeatureSpec:
        return self.fitted.spec


def _own_features(loaded: LoadedVAT, quiet: bool = False) -> ChosenFeatures:
    """THE rule of every loader (vat.load(...).encode, AutoModel, sentence-transformers, MTEB,
    `vat evaluate`, `vat score`, `vat export`) for which vectors a model gives by default. It
    never fits and never writes: a model's own vectors are those its files hold.

    - an exported folder's own spec (sentence_vat_config.json), with the statistics it
      stores (read and checked when the folder was loaded: vat.share.folder), or those an
      earlier fit of that spec stored in it (`_stored`); a folder holding neither
      (its spec changed after export) is an OptionError naming `features`, the way to fit
      them;
    - else (a training run or checkpoint, a folder from before specs) the spec `vat export`
      gives it, DEFAULT_EXPORT_SPEC: layer0/sif/none needs only SIF weights, from the
      statistics an earlier fit stored beside the checkpoint, else made from the training
      token counts it records, so `vat.load(run)` and `vat.load(export of run)` give the
      same vectors;
    - where that spec cannot be had (no recorded counts), the mean of mu, said on stderr
      unless `quiet` (and always in `why`).

    Damaged statistics (a CheckpointError naming their file) are an error, never a reason to
    fall back."""
    own = loaded.own_features
    if own is not None:
        return ChosenFeatures(own, "the folder's own spec")
    spec = loaded.feature_spec or FeatureSpec.parse(DEFAULT_EXPORT_SPEC)
    stored = _stored(loaded, spec)  # an earlier fit's (on count_files, say)
    if loaded.feature_spec is not None:
        if stored is None:
            raise OptionError("features", _unfitted_folder_spec(loaded))
        return ChosenFeatures(stored, "the folder's own spec, fitted after export")
    if stored is not None:
        return ChosenFeatures(stored, "vat's default for a checkpoint; the statistics beside it")
    counts = loaded.token_counts
    if counts is not None:
        why = "vat's default for a checkpoint; SIF weights from its recorded token counts"
        return ChosenFeatures(recorded_sif_features(spec, counts, loaded.config.vocab_size), why)
    why = (
        f"the mean of mu, not {spec}: no training token counts are recorded, which its SIF "
        "weights need (count_files: the training text to count them in)"
    )
    if not quiet:
        print(f"warning: {loaded.name}: sentence vectors are {why}", file=sys.stderr)
    return ChosenFeatures(FittedFeatures(FeatureSpec()), why, fallback=True)


def _unfitted_folder_spec(loaded: LoadedVAT) -> str:
    """The one line for a folder whose own spec lacks its statistics (its
    sentence_vat_config.json changed after export): what it holds, and the one step that
    fits them, naming the spec as the `features` the error is about (a command shows
    --features): the default rule never fits."""
    spec, held = loaded.feature_spec, loaded.feature_stats
    holds = "is absent" if held is None else f"holds {held.spec}'s"
    return (
        f"{loaded.path}: its {ST_MODULE_CONFIG_NAME} names the feature spec {spec}, whose "
        f"statistics the folder does not hold ({FOLDER_STATS_NAME} {holds}); name {spec} "
        "here to fit them, and they are stored in the folder"
    )


def parse_spec(features: object, name: str = "features") -> FeatureSpec:
    """A feature spec a caller named: a FeatureSpec, or its text ("mu/sif/pc1"). A bad or
    empty one is an OptionError naming `name` (a command shows its flag, --features); the
    spec's own checks (vat.feature_spec) say what is wrong with it."""
    if isinstance(features, FeatureSpec):
        return features
    if not isinstance(features, str):
        raise OptionError(
            name,
            "expected a feature spec such as 'mu/sif/pc1' (its text or a FeatureSpec), got "
            f"{type(features).__name__} {features!r:.60}",
        )
    if not features.strip():  # FeatureSpec.parse("") is mu/mean/none: never what "" meant
        raise OptionError(name, "is empty; name a spec such as 'mu/sif/pc1', or none at all")
    try:
        return FeatureSpec.parse(features)
    except VatError as e:
        raise OptionError(name, str(e)) from None


def stats_path_for(home: str | os.PathLike, spec: FeatureSpec) -> Path:
    """Where vat keeps the statistics of `spec` fitted for a model (`_store`), and
    finds them again (`_stored`): beside a checkpoint, or inside an exported folder
    by slug (its `features.safetensors` holds the folder's own spec)."""
    p = Path(home)
    if p.is_dir():
        return p / f"features-{spec.slug}.safetensors"
    return p.with_name(f"{p.name}.features-{spec.slug}.safetensors")


def _stored(loaded: LoadedVAT, spec: FeatureSpec) -> FittedFeatures | None:
    """Statistics of `spec` the model already has: an exported folder's own (checked against
    the model when it was loaded), or the file vat wrote beside the model (`stats_path_for`)
    when an earlier fit stored them."""
    stats = loaded.feature_stats
    if stats is not None and stats.spec == spec:
        return stats
    home = loaded.source.writable_home
    if home is None:
        return None
    path = stats_path_for(home, spec)
    if not (path.exists() or path.is_symlink()):
        return None
    try:  # a FIFO or folder there is named, never skipped as "no file" (nor read: it blocks)
        regular_file(path, "feature statistics file")
    except VatError as e:
        raise CheckpointError(str(e)) from None
    fitted = FittedFeatures.read(path, model_config=loaded.config)
    return fitted if fitted.spec == spec else None


def _store(loaded: LoadedVAT, fitted: FittedFeatures, quiet: bool) -> None:
    """Keep fitted statistics beside the model (`stats_path_for`), where a later call finds
    them (`_stored`); nothing for a model vat never writes into (a Hub download, a shipped
    model), and a warning, never an error, when the write fails: the statistics are in hand."""
    home = loaded.source.writable_home
    if home is None:
        return
    out = stats_path_for(home, fitted.spec)
    try:
        fitted.save(out)
    except (VatError, OSError) as e:
        print(f"warning: could not store the feature statistics ({e})", file=sys.stderr)
        return
    if not quiet:
        print(
            f"vat: fitted {fitted.spec} on {fitted.fit['sentences']} sentences, "
            f"{fitted.fit['seconds']} s; wrote {out}",
            file=sys.stderr,
        )


def _fit(
    loaded: LoadedVAT, spec: FeatureSpec, options: FitOptions, batch_size: int
) -> FittedFeatures:
    """A fresh fit of what `spec` needs for `loaded`: token counts (`token_counts_for`) for
    SIF weights, sentences (`fit_ids_for`) for post-processing; the fit's record says
    where each came from (the model card reports it)."""
    counts = token_counts_for(loaded, options) if spec.weighting == "sif" else None
    info = dict(options.info)
    ids: list[list[int]] = []
    if spec.post != "none":
        ids, found = fit_ids_for(loaded, options)
        for key, value in found.items():  # the caller's record wins, but not over the seed
            info[key] = value if key == "seed" else info.get(key, value)
    if options.count_files:
        info["count_files"] = options.count_files
    if counts is not None:  # where the SIF weights came from, for the model card
        info["counts_from"] = "count_files" if options.count_files else "training"
        info["count_tokens"] = int(np.asarray(counts).sum())
    return fit_features(loaded.model, spec, ids, counts, batch_size, info)


@takes_loaded
def features_for(
    loaded: LoadedVAT,
    features: str | FeatureSpec | FittedFeatures | ChosenFeatures | None = None,
    fit: FitOptions | None = None,
    *,
    save: bool = True,
    batch_size: int = 128,
    quiet: bool = False,
) -> ChosenFeatures:
    """The features of this model, given an optional spec (`features`) and optional data to
    fit on (`fit`), and why: vat's one entry for them.

    - fitted features (ChosenFeatures, FittedFeatures) are taken as they are;
    - no spec, and `fit` names no data: the model's own vectors, by the one rule of every
      loader (`_own_features`), which never fits nor writes;
    - no spec, but `fit` names files or sentences: the model's own spec (an exported
      folder's, else DEFAULT_EXPORT_SPEC) fitted on them;
    - a spec: as it is when it needs nothing fitted; else the statistics the model already
      has (unless `fit` names data: that always fits anew); else a fit on what `fit` names,
      by default on a training checkpoint's fitting sample, stored beside the
      model unless `save` is off (an export keeps them in its folder instead).
    """
    if isinstance(features, ChosenFeatures):
        return features
    if isinstance(features, FittedFeatures):
        return ChosenFeatures(features, "as named")
    fit = fit or FitOptions()
    check_count(batch_size, "batch_size")
    why = "as named"
    if features is None:
        if not fit.names_data:
            return _own_features(loaded, quiet)
        features, why = loaded.feature_spec or DEFAULT_EXPORT_SPEC, "fitted on the data named"
    spec = parse_spec(features)
    try:
        spec.layer(len(loaded.model.encoder))  # a layerK beyond the encoder fails here
    except VatError as e:
        raise OptionError("features", str(e)) from None
    if not spec.needs_fit:
        return ChosenFeatures(FittedFeatures(spec), why)
    if not fit.names_data:
        found = _stored(loaded, spec)
        if found is not None:
            return ChosenFeatures(found, why)
    fitted = _fit(loaded, spec, fit, batch_size)
    if save:
        _store(loaded, fitted, quiet)
    return ChosenFeatures(fitted, why)
