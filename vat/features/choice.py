"""Which vectors a model gives, and the statistics behind them: found, fitted or stored.

Which vectors a model gives when nobody names a spec is one rule, `default_features`
(docs/features.md, "Which vectors a model gives"): a model's sentence vectors follow its
feature spec. An exported folder's is its own (sentence_vat_config.json). A training run or
checkpoint (or a folder from before specs) has the spec `vat export` would give it,
DEFAULT_EXPORT_SPEC, whose SIF weights come from the training token counts the checkpoint
records, so a model and its export give the same vectors. Where that spec cannot be had (no
recorded counts), the vectors are the mean of mu, and `ChosenFeatures.why` says so. Naming
a spec (`features`) or a pooling of mu (`pooling`) replaces the rule.

A named spec's statistics are resolved in small steps a caller may compose:
`stored_features` (what the model already has), the fit of vat.features.fitting, and
`store_features` (the file beside a checkpoint). `resolve_features` composes them.
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
    fit_sentences_for,
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
    """The fitted features a caller gets, and why (`default_features`, `chosen_features`)."""

    fitted: FittedFeatures
    why: str
    """Why this spec, in a few words (for tables, results files and warnings)."""
    fallback: bool = False
    """True when the default rule's spec could not be had and the vectors are the mean of mu."""

    @property
    def spec(self) -> FeatureSpec:
        return self.fitted.spec


def default_features(loaded: LoadedVAT, quiet: bool = False) -> ChosenFeatures:
    """THE rule of every loader (vat.load(...).encode, AutoModel, sentence-transformers, MTEB,
    `vat evaluate`, `vat score`, `vat export`) for which vectors a model gives by default. It
    never fits and never writes: a model's own vectors are those its files hold.

    - an exported folder's own spec (sentence_vat_config.json), with the statistics it
      stores (read and checked when the folder was loaded: vat.share.folder), or those an
      earlier fit of that spec stored in it (`stored_features`); a folder holding neither
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
    stored = stored_features(loaded, spec)  # an earlier fit's (on count_files, say)
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


def chosen_spec(
    loaded: LoadedVAT,
    pooling: str | None = None,
    features: str | FeatureSpec | FittedFeatures | None = None,
    quiet: bool = False,
) -> str | FeatureSpec | FittedFeatures | None:
    """Which vectors a caller gets: `features` if given; else for an explicit `pooling`,
    None, meaning that pooling of the token means mu (vat.features.pool); else the model's
    own (`default_features`, the one rule). `pooling` other than "mean" with `features` is
    refused (`check_pooling`)."""
    check_pooling(pooling, features)
    if features is not None:
        return features
    if pooling is not None:
        return None
    return default_features(loaded, quiet=quiet).fitted


def spec_name(
    features: str | FeatureSpec | FittedFeatures | None, pooling: str | None = None
) -> str:
    """The spec a choice of `chosen_spec` stands for, as tables and results files name it:
    pooling P of mu is the spec mu/P/none."""
    if isinstance(features, FittedFeatures):
        return str(features.spec)
    if features is None:
        return str(FeatureSpec("mu", pooling or "mean"))
    return str(FeatureSpec.parse(features))


def stats_path_for(home: str | os.PathLike, spec: FeatureSpec) -> Path:
    """Where vat keeps the statistics of `spec` fitted for a model (`store_features`), and
    finds them again (`stored_features`): beside a checkpoint, or inside an exported folder
    by slug (its `features.safetensors` holds the folder's own spec)."""
    p = Path(home)
    if p.is_dir():
        return p / f"features-{spec.slug}.safetensors"
    return p.with_name(f"{p.name}.features-{spec.slug}.safetensors")


def stored_features(loaded: LoadedVAT, spec: FeatureSpec) -> FittedFeatures | None:
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


def store_features(loaded: LoadedVAT, fitted: FittedFeatures, quiet: bool = False) -> Path | None:
    """Keep fitted statistics beside the model (`stats_path_for`), where a later call finds
    them (`stored_features`): the file written, or None for a model vat never writes into
    (a Hub download, a shipped model) or when the write failed (a warning, never an error:
    the statistics are in hand)."""
    home = loaded.source.writable_home
    if home is None:
        return None
    out = stats_path_for(home, fitted.spec)
    try:
        fitted.save(out)
    except (VatError, OSError) as e:
        print(f"warning: could not store the feature statistics ({e})", file=sys.stderr)
        return None
    if not quiet:
        print(
            f"vat: fitted {fitted.spec} on {fitted.fit['sentences']} sentences, "
            f"{fitted.fit['seconds']} s; wrote {out}",
            file=sys.stderr,
        )
    return out


def fit_for(
    loaded: LoadedVAT, spec: FeatureSpec, options: FitOptions, batch_size: int = 128
) -> FittedFeatures:
    """A fresh fit of what `spec` needs for `loaded`: token counts (`token_counts_for`) for
    SIF weights, sentences (`fit_sentences_for`) for post-processing; the fit's record says
    where each came from (the model card reports it)."""
    counts = token_counts_for(loaded, options) if spec.weighting == "sif" else None
    info = dict(options.info)
    sentences: list[str] = []
    if spec.post != "none":
        sentences, found = fit_sentences_for(loaded, options)
        for key, value in found.items():  # the caller's record wins, but not over the seed
            info[key] = value if key == "seed" else info.get(key, value)
    if options.count_files:
        info["count_files"] = options.count_files
    if counts is not None:  # where the SIF weights came from, for the model card
        info["counts_from"] = "count_files" if options.count_files else "training"
        info["count_tokens"] = int(np.asarray(counts).sum())
    return fit_features(loaded.model, loaded.tokenizer, spec, sentences, counts, batch_size, info)


def resolve_features(
    loaded: LoadedVAT,
    spec: str | FeatureSpec | None = None,
    fit: FitOptions | None = None,
    *,
    save: bool = True,
    batch_size: int = 128,
    quiet: bool = False,
) -> FittedFeatures:
    """The fitted statistics of `spec` for `loaded`. Without `spec`: the model's own
    (`default_features`, the one rule), or, when `fit` names files or sentences, an exported
    folder's own spec else DEFAULT_EXPORT_SPEC fitted on them.

    In order: a spec with nothing to fit; statistics the model already has
    (`stored_features`); else a fit (`fit_for`) on what `fit` names, by default on up to
    n_fit of the model's own training sentences, stored beside the model (`store_features`,
    unless `save` is off). Naming files or sentences always fits anew (and replaces only a
    file vat wrote).
    """
    fit = fit or FitOptions()
    check_count(batch_size, "batch_size")
    if spec is None:
        if not fit.names_data:
            return default_features(loaded, quiet=quiet).fitted
        spec = loaded.feature_spec or DEFAULT_EXPORT_SPEC
    spec = parse_spec(spec)
    try:
        spec.layer(len(loaded.model.encoder))  # a layerK beyond the encoder fails here
    except VatError as e:
        raise OptionError("features", str(e)) from None
    if not spec.needs_fit:
        return FittedFeatures(spec)
    if not fit.names_data:
        found = stored_features(loaded, spec)
        if found is not None:
            return found
    fitted = fit_for(loaded, spec, fit, batch_size)
    if save:
        store_features(loaded, fitted, quiet)
    return fitted


@takes_loaded
def chosen_features(
    loaded: LoadedVAT,
    features: str | FeatureSpec | FittedFeatures | None = None,
    fit: FitOptions | None = None,
    *,
    save: bool = True,
    batch_size: int = 128,
    quiet: bool = False,
) -> ChosenFeatures:
    """The fitted features a caller's choice stands for, and why: a FittedFeatures as given;
    a named spec resolved (`resolve_features`: found, else fitted on what `fit` names and
    stored unless `save` is off); none, the model's own (`default_features`). The first of
    the two steps `vat evaluate` composes; `vat.eval.encoders.vat_encoder(loaded,
    features=chosen)` is the second, and never fits."""
    if not isinstance(features, str | FeatureSpec):
        return given_features(loaded, features, quiet)
    fitted = resolve_features(loaded, features, fit, save=save, batch_size=batch_size, quiet=quiet)
    return ChosenFeatures(fitted, "as named")


def given_features(
    loaded: LoadedVAT, features: ChosenFeatures | FittedFeatures | None, quiet: bool = False
) -> ChosenFeatures:
    """Features that need no resolving: chosen ones as they are, fitted ones "as named",
    none the model's own (`default_features`). Nothing here fits."""
    if isinstance(features, ChosenFeatures):
        return features
    if isinstance(features, FittedFeatures):
        return ChosenFeatures(features, "as named")
    return default_features(loaded, quiet=quiet)


def export_features(
    loaded: LoadedVAT, features: str | FeatureSpec | None = None, fit: FitOptions | None = None
) -> FittedFeatures:
    """The feature spec an exported folder carries, with its statistics: `features` if given
    (fitted as `resolve_features` does, on what `fit` names or the model's training
    sentences, with token counts from `fit.count_files` or the model's own), else the model's
    own vectors (`default_features`, the one rule: an exported source's own spec, else
    DEFAULT_EXPORT_SPEC, else the mean of mu with a warning), so the folder gives the
    vectors its source gave. Nothing is stored beside the model: the folder holds the
    statistics. Files the caller named that cannot be read are an error, never a fallback."""
    fit = fit or FitOptions()
    if features is not None or fit.fit_files is not None or fit.count_files is not None:
        spec = parse_spec(
            loaded.feature_spec or DEFAULT_EXPORT_SPEC if features is None else features
        )
        return resolve_features(loaded, spec, fit, save=False)
    chosen = default_features(loaded, quiet=True)
    if chosen.fallback:
        print(f"warning: exporting {chosen.why}", file=sys.stderr)
    return chosen.fitted
