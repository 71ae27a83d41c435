"""A model read from disk once (`vat.share.resolve.load_model`), to pass instead of a path."""

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
    location: str  # the .ckpt file, exported folder, Hub repo id or shipped model's name
    run_dir: str | None = None  # the run folder the checkpoint was chosen from
    folder: str | None = None  # the local folder of an exported model (a Hub download too)

    @property
    def path(self) -> Path:
        """The local file or folder the model was read from."""
        return Path(self.folder if self.folder is not None else self.location)

    @property
    def name(self) -> str:
        """A short name for tables: the run folder's or file's name, the Hub id or shipped name."""
        if self.kind in ("hub", "shipped"):
            return self.location
        return Path(self.run_dir or self.location).name

    @property
    def writable_home(self) -> Path | None:
        """Where fitted statistics may be stored; never the Hub cache or vat's own package."""
        return None if self.kind in ("hub", "shipped") else Path(self.location)


@dataclass
class LoadedVAT:
    """A VAT with everything its files record, read once (`vat.share.resolve.load_model`)."""

    model: VAT  # in eval mode, on the device it was loaded to
    tokenizer: VATTokenizer
    prior_std: float  # s of the prior N(0, s^2 I)
    length_histogram: list[int]  # training sequence lengths (</s> included), for prior samples
    source: ModelSource
    training: dict[str, Any] = field(default_factory=dict)  # steps, tokens, data, metrics
    token_counts: np.ndarray | None = None  # training subword counts (SIF weights)
    fit_sample: list[list[int]] | None = None  # a checkpoint's training sentences to fit on
    # an exported folder's own feature spec, stored statistics, card settings and scores
    feature_spec: FeatureSpec | None = None
    feature_stats: FittedFeatures | None = None
    card: dict[str, Any] = field(default_factory=dict)
    evaluation: list[dict[str, Any]] = field(default_factory=list)

    @property
    def config(self) -> VATConfig:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def path(self) -> Path:
        """The local file or folder the model was read from."""
        return self.source.path

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def own_features(self) -> FittedFeatures | None:
        """The folder's own spec with its stored statistics when they are complete, else None."""
        spec, stats = self.feature_spec, self.feature_stats
        if spec is not None and not spec.needs_fit:
            return FittedFeatures(spec)
        return stats if spec is not None and stats is not None and stats.spec == spec else None


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
    """A public entry whose first argument is checked to be a loaded model (`check_loaded`)."""

    @functools.wraps(entry)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        check_loaded(args[0] if args else kwargs.get("loaded"), entry.__name__)
        return entry(*args, **kwargs)

    return checked
