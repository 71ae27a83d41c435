"""Export: a loaded model into an exported folder with its card (files only)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.share.folder import save_folder
from vat.share.loaded import LoadedVAT, takes_loaded
from vat.share.model_card import DEFAULT_LANGUAGE, DEFAULT_LICENSE, scored_spec
from vat.share.training_record import check_portable, portable_fit, portable_training


def same_vectors(loaded: LoadedVAT, features: FittedFeatures | None) -> bool:
    """True when `features` is an exported source's own spec with its own statistics."""
    if features is None or features.spec != loaded.feature_spec:
        return False
    if not features.spec.needs_fit:
        return True
    held = loaded.feature_stats
    return (
        held is not None
        and held.spec == features.spec
        and held.arrays.keys() == features.arrays.keys()
        and all(np.array_equal(held.arrays[k], v) for k, v in features.arrays.items())
    )


@takes_loaded
def export_model(
    loaded: LoadedVAT,
    output_dir: str | os.PathLike,
    *,
    features: FittedFeatures | None = None,
    evaluation: list[dict[str, Any]] | None = None,
    overwrite: bool = False,
    license: str | None = None,
    language: str | None = None,
    repo_id: str | None = None,
    space: bool = False,
    train_data_dir: str | os.PathLike | None = None,
) -> Path:
    """Write `loaded` as an exported folder; with `repo_id`, for the Hub (portable records)."""
    spec = str(features.spec if features is not None else FeatureSpec())
    if evaluation is None:
        kept = loaded.evaluation if same_vectors(loaded, features) else []
        evaluation = [s for s in kept if scored_spec(s, loaded.feature_spec) == spec]
    # each score names the spec it measured, so a later card still says which vectors they are
    evaluation = [{**s, "features": s.get("features") or spec} for s in evaluation]
    card = {  # the arguments, else an exported source's own, else the defaults
        **loaded.card,
        "license": license or loaded.card.get("license") or DEFAULT_LICENSE,
        "language": language or loaded.card.get("language") or DEFAULT_LANGUAGE,
        "name": Path(output_dir).name,  # the model-index's name, unless a repo id is given
        **({"repo_id": repo_id} if repo_id else {}),
    }
    if repo_id:
        # the same weights and files; only the record of the training data changes
        loaded = dataclasses.replace(
            loaded, training=portable_training(loaded.training, train_data_dir)
        )
        if features is not None:  # where a fit's files were, named as the records are
            features = dataclasses.replace(features, fit=portable_fit(features.fit, train_data_dir))
        # before writing: what config.json and the statistics would carry to the Hub
        config = {"training": loaded.training, "card": card, "evaluation": evaluation}
        fit = {"fit": features.fit} if features is not None else {}
        check_portable(
            {"config.json": config, "features.safetensors": fit}, f"cannot export for {repo_id}"
        )
    return save_folder(output_dir, loaded, features=features, card=card, evaluation=evaluation,
                       overwrite=overwrite, space=space)  # fmt: skip
