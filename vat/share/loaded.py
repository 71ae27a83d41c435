"""A model read from disk, once (`vat.share.resolve.load_model`): everything downstream code
asks of a model, in one object that travels instead of a path."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

import numpy as np
import torch

from vat.errors import OptionError
from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.model import VAT, VATConfig
from vat.tokenizer import VATTokenizer

Kind = Literal["checkpoint", "folder", "hub", "shipped"]


@dataclass(frozen=True)
class ModelSource:
    """Where a model came from: what its model argument named, resolved once."""

    kind: Kind
    location: str
    """The .ckpt file, the exported folder, the Hub repo id, or the shipped model's name."""
    run_dir: str | None = None
    """The run folder the checkpoint was chosen from (its best, else last.ckpt), if any."""
    folder: str | None = None
    """The local folder holding an exported model (a Hub repo's download in the Hub cache, a
    shipped model's folder in the package)."""

    @property
    def path(self) -> Path:
        """The local file or folder the model was read from."""
        return Path(self.folder if self.folder is not None else self.location)

    @property
    def name(self) -> str:
        """A short name for tables and reports: the run folder's, the file's or the folder's
        name, the Hub id or the shipped name."""
        if self.kind in ("hub", "shipped"):
            return self.location
        return Path(self.run_dir or self.location).name

    @property
    def writable_home(self) -> Path | None:
        """Where statistics fitted for this model may be stored: beside a checkpoint, inside
        an exported folder; None for a Hub download or a shipped model (vat never writes into
        the Hub cache or its own package)."""
        return None if self.kind in ("hub", "shipped") else Path(self.location)


@dataclass
class LoadedVAT:
    """A VAT with everything its files record, read once (`vat.share.resolve.load_model`)."""

    model: VAT
    """The model, in eval mode, on the device it was loaded to."""
    tokenizer: VATTokenizer
    prior_std: float
    """s of the prior N(0, s^2 I) (the paper)."""
    length_histogram: list[int]
    """Counts of training sequence lengths (</s> included), for prior samples' lengths."""
    source: ModelSource
    training: dict[str, Any] = field(default_factory=dict)
    """What the model records of its training (`vat.share.training_record.training_facts`
    for a checkpoint, config.json's `training` for a folder): steps, tokens, data, metrics."""
    token_counts: np.ndarray | None = None
    """Subword counts of the training split (SIF weights), when recorded."""
    fit_sample: list[list[int]] | None = None
    """A training checkpoint's sample of its training sentences as subword ids, which
    features are fitted on (vat.data.token_counts.fit_sample); an exported folder carries
    no training text."""
    feature_spec: FeatureSpec | None = None
    """An exported folder's own feature spec (what its users' vectors are), else None."""
    feature_stats: FittedFeatures | None = None
    """The statistics stored with an exported folder (features.safetensors), else None."""
    card: dict[str, Any] = field(default_factory=dict)
    """An exported folder's card settings (license, language, name, repo_id)."""
    evaluation: list[dict[str, Any]] = field(default_factory=list)
    """An exported folder's recorded scores (`vat.eval.task_scores` entries) for its own spec."""

    @property
    def config(self) -> VATConfig:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def path(self) -> Path:
        """The local file or folder the model was read from (ModelSource.path)."""
        return self.source.path

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def own_features(self) -> FittedFeatures | None:
        """The folder's own spec with its stored statistics, when they are complete (a spec
        that needs nothing is complete without a file); None otherwise."""
        spec = self.feature_spec
        if spec is None:
            return None
        if not spec.needs_fit:
            return FittedFeatures(spec)
        stats = self.feature_stats
        return stats if stats is not None and stats.spec == spec else None


def check_loaded(model: object, function: str) -> LoadedVAT:
    """`model` if it is a LoadedVAT; a path (or anything else) is refused in one line."""
    if isinstance(model, LoadedVAT):
        return model
    raise OptionError(
        "model",
        f"{function} takes a loaded model (vat.share.resolve.load_model(path), or "
        f"vat.load(path).loaded), got {type(model).__name__} {str(model)[:80]!r}",
    )


P = ParamSpec("P")
R = TypeVar("R")


def takes_loaded(entry: Callable[P, R]) -> Callable[P, R]:
    """A public entry whose first argument is a loaded model (`check_loaded` before the body
    runs, so the body and everything it calls take the model as it is)."""

    @functools.wraps(entry)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        check_loaded(args[0] if args else kwargs.get("loaded"), entry.__name__)
        return entry(*args, **kwargs)

    return checked
