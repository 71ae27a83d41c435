"""Which vectors a model gives, and the statistics behind them: `features_for`, the one entry."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vat.errors import CheckpointError, OptionError, VatError, check_count
from vat.feature_spec import DEFAULT_EXPORT_SPEC, FOLDER_STATS_NAME, FeatureSpec, FittedFeatures
from vat.features.fitting import FitOptions, count_tokens, fit_features, fit_ids_for
from vat.io import regular_file
from vat.share.folder import ST_MODULE_CONFIG_NAME
from vat.share.loaded import LoadedVAT, takes_loaded


def check_pooling(pooling: str | None, features: object) -> None:
    """A feature spec names its own weighting, so `pooling` with `features` is refused, never
    ignored; "mean" passes (the old default, which old folders hold beside a spec)."""
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
    why: str  # why this spec, for tables, results files and warnings
    fallback: bool = False  # the default rule's spec could not be had: the mean of mu

    @property
    def spec(self) -> FeatureSpec:
        return self.fitted.spec


def _own_features(loaded: LoadedVAT, quiet: bool = False) -> ChosenFeatures:
    """Every loader's rule for a model's default vectors; it never reads text nor writes. An
    exported folder's own spec; else DEFAULT_EXPORT_SPEC, the spec its export gets, so a model
    and its export give the same vectors; else the mean of mu, said on stderr unless `quiet`."""
    if (own := loaded.own_features) is not None:
        return ChosenFeatures(own, "the folder's own spec")
    spec = loaded.feature_spec or FeatureSpec.parse(DEFAULT_EXPORT_SPEC)
    stored = _stored(loaded, spec)  # an earlier fit's (on count_files, say)
    if loaded.feature_spec is not None:
        if stored is None:  # its sentence_vat_config.json changed after export
            held = loaded.feature_stats
            holds = "is absent" if held is None else f"holds {held.spec}'s"
            raise OptionError(
                "features",
                f"{loaded.path}: its {ST_MODULE_CONFIG_NAME} names the feature spec {spec}, "
                f"whose statistics the folder does not hold ({FOLDER_STATS_NAME} {holds}); "
                f"name {spec} here to fit them, and they are stored in the folder",
            )
        return ChosenFeatures(stored, "the folder's own spec, fitted after export")
    if stored is not None:
        return ChosenFeatures(stored, "vat's default for a checkpoint; the statistics beside it")
    if loaded.token_counts is not None:  # layer0/sif/none needs only the counts: no text read
        why = "vat's default for a checkpoint; SIF weights from its recorded token counts"
        return ChosenFeatures(_fit(loaded, spec, FitOptions(), 128), why)
    why = (
        f"the mean of mu, not {spec}: no training token counts are recorded, which its SIF "
        "weights need (count_files: the training text to count them in)"
    )
    if not quiet:
        print(f"warning: {loaded.name}: sentence vectors are {why}", file=sys.stderr)
    return ChosenFeatures(FittedFeatures(FeatureSpec()), why, fallback=True)


def parse_spec(features: object, name: str = "features") -> FeatureSpec:
    """A FeatureSpec, or its text ("mu/sif/pc1"); a bad or empty one is an OptionError."""
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
    """Where vat keeps the statistics of `spec` fitted for a model: beside it, or in its folder."""
    p = Path(home)
    if p.is_dir():
        return p / f"features-{spec.slug}.safetensors"
    return p.with_name(f"{p.name}.features-{spec.slug}.safetensors")


def _stored(loaded: LoadedVAT, spec: FeatureSpec) -> FittedFeatures | None:
    """Statistics of `spec` the model already has: a folder's own, or an earlier fit's."""
    if (stats := loaded.feature_stats) is not None and stats.spec == spec:
        return stats
    home = loaded.source.writable_home
    path = None if home is None else stats_path_for(home, spec)
    if path is None or not (path.exists() or path.is_symlink()):
        return None
    try:  # a FIFO or folder there is named, never skipped as "no file" (nor read: it blocks)
        regular_file(path, "feature statistics file")
    except VatError as e:
        raise CheckpointError(str(e)) from None
    fitted = FittedFeatures.read(path, model_config=loaded.config)
    return fitted if fitted.spec == spec else None


def _store(loaded: LoadedVAT, fitted: FittedFeatures, quiet: bool) -> None:
    """Keep fitted statistics beside the model, unless vat never writes there (a Hub download,
    a shipped model); a failed write is a warning, as the statistics are in hand."""
    if (home := loaded.source.writable_home) is None:
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
    """A fresh fit of what `spec` needs, recording where its counts and sentences came from."""
    counts = loaded.token_counts if spec.weighting == "sif" else None
    if spec.weighting == "sif" and options.count_files:
        counts = count_tokens(loaded.tokenizer, options.count_files, loaded.config.vocab_size)
    elif spec.weighting == "sif" and counts is None:
        raise OptionError(
            "count_files",
            f"{loaded.path} stores no token frequencies (needed by sif weighting): "
            "give its training text to count them",
        )
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
    """The features of this model for an optional spec and data to fit on, and why. Without a
    spec: the model's own vectors, or its own spec fitted on the data named. A spec needing a
    fit: the statistics the model has (unless `fit` names data, which always fits anew), else
    a fit, stored beside the model unless `save` is off."""
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
    if not fit.names_data and (found := _stored(loaded, spec)) is not None:
        return ChosenFeatures(found, why)
    fitted = _fit(loaded, spec, fit, batch_size)
    if save:
        _store(loaded, fitted, quiet)
    return ChosenFeatures(fitted, why)
