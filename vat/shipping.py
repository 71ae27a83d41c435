"""Adding a model to the models that ship with vat (`vat pretrained add DIR --name NAME`,
or `add_pretrained(vat.load(DIR), NAME)`). It sits above the registry (vat.share.pretrained,
files only) because it runs the model: `precision_match` measures how far the half-precision
weights move encode and generate from float32, and the entry records it."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vat.api import PretrainedVAT, require_loaded
from vat.errors import (
    OptionError,
    check_choice,
    check_optional_text,
    check_path,
    check_sentences,
)
from vat.features.choice import features_for
from vat.features.encoder import FeatureEncoder
from vat.generate.generator import TruncationWarning, VATGenerator
from vat.share.loaded import LoadedVAT, takes_loaded
from vat.share.pretrained import ShippedModel, check_shipping, write_shipped

_sentences = check_sentences  # add_pretrained's argument `check_sentences` shadows the name

CHECK_SENTENCES = (
    "A man is playing a guitar.",
    "The children ran across the field after school.",
    "She poured the coffee and sat down by the window.",
    "He sequestered himself in his study to write a book.",
    "The committee will announce its decision next week.",
    "They said the car would break down and indeed it did.",
    "Prices rose sharply in the first quarter of the year.",
    "A dog is chasing a red ball in the park.",
    "The old bridge was closed for repairs all summer.",
    "Give me any peaches you don't want.",
    "The museum opens at nine and closes at five.",
    "Nobody expected the small team to win the final.",
    "The mastery of fire was a huge advance in human technology.",
    "Two women are talking on a bench near the river.",
    "The train was delayed by heavy snow in the mountains.",
    "Scientists found water ice in a crater near the pole.",
)
"""What `add_pretrained` compares the half-precision weights on when given no sentences:
short, everyday English of the kinds vat's models are trained on."""

MAX_ABS_FEATURE = 1e-3
MIN_COSINE = 0.9999
MIN_SAME_SHARE = 0.99
"""The tolerance docs/sharing.md states for a shipped model's stored weights against float32
(`precision_match`): sentence features within 1e-3, every cosine above 0.9999, and at least
99 % of greedy reconstructions identical."""


def _outside_tolerance(match: dict[str, Any]) -> list[str]:
    """What of a `precision_match` measurement lies outside the stated tolerance, each with
    its bar, in words (empty: within it)."""
    same, n = match["same_reconstructions"], match["sentences"]
    found = []
    if same < MIN_SAME_SHARE * n:
        found.append(
            f"{same} of {n} greedy reconstructions identical ({100 * same / n:.1f} %; the bar "
            f"is at least {100 * MIN_SAME_SHARE:g} %)"
        )
    if not match["max_abs_feature"] <= MAX_ABS_FEATURE:  # NaN is outside too
        found.append(
            f"sentence features within {match['max_abs_feature']:.2e} (the bar is "
            f"{MAX_ABS_FEATURE:g})"
        )
    if not match["min_cosine"] > MIN_COSINE:
        found.append(f"lowest cosine {match['min_cosine']:.6f} (the bar is above {MIN_COSINE:g})")
    return found


def add_pretrained(
    model: PretrainedVAT,
    name: str,
    *,
    summary: str | None = None,
    good_for: str | None = None,
    not_for: str | None = None,
    rebuild: str | None = None,
    dtype: str = "float16",
    check_sentences: Sequence[str] | None = None,
    check_from: str | None = None,
    registry: str | os.PathLike | None = None,
    overwrite: bool = False,
    train_data_dir: str | os.PathLike | None = None,
    allow_outside_tolerance: bool = False,
) -> ShippedModel:
    """Add an exported folder (`vat.load(DIR)`) to the shipped models as `name`: its weights
    stored in `dtype`, with what it is (`summary`, `good_for`, `not_for`; without a summary the
    card states shape, data and rate), how to rebuild it, and how far the stored weights move
    encode and generate from float32 on `check_sentences` (named `check_from` on the card;
    default CHECK_SENTENCES). `registry` defaults to $VAT_SHIPPED_DIR, else the package's
    vat/shipped/; training files are named by their path inside `train_data_dir` (default
    $VAT_DATA_DIR) or by name. Weights beyond the stated tolerance are refused, nothing
    written, unless `allow_outside_tolerance` (one's own registry, recorded as measured)."""
    require_loaded(model, "add_pretrained")
    if summary is not None and (not isinstance(summary, str) or not summary.strip()):
        raise OptionError("summary", "must be one non-empty line saying what the model is")
    for option, value in (
        ("good_for", good_for),
        ("not_for", not_for),
        ("rebuild", rebuild),
        ("check_from", check_from),
    ):
        check_optional_text(value, option)
    if not isinstance(name, str):
        raise OptionError("name", f"must be a string, got {type(name).__name__} {name!r:.60}")
    check_path(registry, "registry", optional=True)
    check_path(train_data_dir, "train_data_dir", optional=True)
    if check_sentences is None:
        sentences, origin = list(CHECK_SENTENCES), "vat's built-in check sentences"
    else:  # a single string is one sentence (vat.errors.check_sentences)
        given, _ = _sentences(check_sentences, "check_sentences")
        sentences = [s for s in given if s.strip()]
        origin = check_from or "given sentences"
        if not sentences:
            raise OptionError("check_sentences", "holds no non-empty sentence to compare on")
    info = {
        "summary": summary.strip() if summary else None,
        "good_for": good_for,
        "not_for": not_for,
        "rebuild": rebuild,
        "fp32_match": {"from": origin},
    }
    # before the measurement, which takes minutes for a long check file
    check_shipping(model.loaded, name, dtype, registry, info, train_data_dir, overwrite)
    info["fp32_match"] = precision_match(model.loaded, dtype, sentences, origin)
    outside = _outside_tolerance(info["fp32_match"])
    if outside and not allow_outside_tolerance:
        raise OptionError(
            "allow_outside_tolerance",
            f"is off, and the {dtype} weights of {name} move its outputs from float32 beyond "
            f"the tolerance of shipped models (docs/sharing.md): {'; '.join(outside)}; nothing "
            "was written (turn it on to add the model anyway, as measured)",
        )
    return write_shipped(
        model.loaded,
        name,
        {k: v for k, v in info.items() if v},
        dtype=dtype,
        registry=None if registry is None else Path(registry),
        overwrite=overwrite,
        train_data_dir=train_data_dir,
    )


@takes_loaded
def precision_match(
    loaded: LoadedVAT, dtype: str, sentences: Sequence[str], origin: str
) -> dict[str, Any]:
    """How far weights stored in `dtype` (and computed in float32, as a shipped model is
    loaded) move `loaded`'s outputs on `sentences`: the folder's sentence features (largest
    absolute difference, lowest cosine), the token means mu (largest absolute difference),
    and how many greedy reconstructions stay identical."""
    check_choice(dtype, "dtype", ("float16", "bfloat16"))
    sentences, _ = _sentences(sentences, "sentences")
    if not sentences:
        raise OptionError("sentences", "holds no sentence to compare on")
    check_optional_text(origin, "origin")
    # the stored tensors (the state dict: not the buffers a model rebuilds, such as its
    # positions) rounded to `dtype` and loaded into float32, as a shipped model is loaded
    rounded = {
        k: v.to(getattr(torch, dtype)).to(v.dtype) if v.is_floating_point() else v
        for k, v in loaded.model.state_dict().items()
    }
    half_model = type(loaded.model)(loaded.config).to(loaded.device)
    half_model.load_state_dict(rounded)
    half = dataclasses.replace(loaded, model=half_model.eval())
    fitted = features_for(loaded, quiet=True).fitted  # the vectors encode gives
    full_features = FeatureEncoder(loaded, fitted)(sentences, progress=False)
    half_features = FeatureEncoder(half, fitted)(sentences, progress=False)
    norms = np.linalg.norm(full_features, axis=1) * np.linalg.norm(half_features, axis=1)
    cosines = (full_features * half_features).sum(1) / np.where(norms == 0, 1.0, norms)
    gens = [VATGenerator.from_loaded(x) for x in (loaded, half)]
    with warnings.catch_warnings():  # long lines are cut alike in both: no note per line
        warnings.simplefilter("ignore", TruncationWarning)
        mus = [g.posteriors(sentences) for g in gens]
        texts = [g.reconstruct(sentences) for g in gens]
    max_mu = max(float((a[0] - b[0]).abs().max()) for a, b in zip(*mus))
    return {
        "sentences": len(sentences),
        "from": origin,
        "max_abs_feature": float(np.abs(full_features - half_features).max()),
        "min_cosine": float(cosines.min()),
        "max_abs_mu": max_mu,
        "same_reconstructions": sum(a == b for a, b in zip(*texts)),
    }
