"""A feature spec `SOURCE/WEIGHTING/POST` (e.g. `mu/mean/none`, `firstlast/sif/pc1`; see
docs/features.md) and its fitted statistics, one safetensors file checked as weights are."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vat.errors import CheckpointError, VatError, check, did_you_mean, finite
from vat.io import atomic_write, regular_file, writable_target

if TYPE_CHECKING:
    from vat.model import VATConfig

WEIGHTINGS = ("mean", "sum", "start", "precision", "sif")
DEFAULT_SIF_A = 1e-3
STATS_FORMAT = "vat-features"
STATS_VERSION = "1"
FOLDER_STATS_NAME = "features.safetensors"  # the statistics of an exported folder's own spec
# The spec `vat export` gives a folder: the best on STS (RESULTS.md, "The default for exported
# models"), and it needs only the training token counts
DEFAULT_EXPORT_SPEC = "layer0/sif/none"


@dataclass(frozen=True)
class FeatureSpec:
    source: str = "mu"  # "mu" | "layerK" | "firstlast" | "sentence" (the sentence latent's mean)
    weighting: str = "mean"
    post: str = "none"  # "none" | "pcK" | "whiten" | "whitenK"
    sif_a: float = DEFAULT_SIF_A

    def __post_init__(self) -> None:
        named = ("mu", "firstlast", "sentence")
        if not (self.source in named or re.fullmatch(r"layer\d+", self.source)):
            raise VatError(
                f"feature source must be mu, layerK (K = 0..layers), firstlast or sentence, "
                f"got {self.source!r}{did_you_mean(self.source, (*named, 'layer0'))}"
            )
        if self.weighting not in WEIGHTINGS:
            raise VatError(
                f"feature weighting must be one of {', '.join(WEIGHTINGS)}, got "
                f"{self.weighting!r}{did_you_mean(self.weighting, WEIGHTINGS)}"
            )
        if self.weighting == "precision" and self.source != "mu":
            raise VatError("precision weighting uses the variances of mu: it needs source mu")
        if self.source == "sentence" and self.weighting != "mean":
            raise VatError("the sentence latent is one vector per sentence: its weighting is mean")
        if not re.fullmatch(r"none|pc[1-9]\d*|whiten(?:[1-9]\d*)?", self.post):
            raise VatError(
                f"feature post-processing must be none, pcK or whiten[K] (K >= 1), "
                f"got {self.post!r}{did_you_mean(self.post, ('none', 'pc1', 'whiten'))}"
            )
        a = self.sif_a  # a / (a + p(w)) is a weight in (0, 1] only for a finite a > 0
        check(finite(a) and a > 0, "the SIF constant a", "a finite number > 0", a)

    @classmethod
    def parse(cls, text: str | FeatureSpec | None) -> FeatureSpec:
        """`SOURCE[/WEIGHTING[/POST]]`, e.g. `mu`, `mu/sif`, `firstlast/mean/whiten`."""
        if isinstance(text, FeatureSpec):
            return text
        if text is None or not str(text).strip():
            return cls()
        parts = [p.strip() for p in str(text).strip().split("/")]
        if len(parts) > 3 or not all(parts):
            raise VatError(
                f"a feature spec is SOURCE/WEIGHTING/POST (e.g. mu/mean/whiten), got {text!r}"
            )
        source = parts[0]
        weighting = parts[1] if len(parts) > 1 else "mean"
        post = parts[2] if len(parts) > 2 else "none"
        a = DEFAULT_SIF_A
        if weighting.startswith("sif="):
            try:
                a = float(weighting[4:])
            except ValueError:
                raise VatError(f"sif=A needs a number A, got {weighting!r}") from None
            weighting = "sif"
        return cls(source, weighting, post, a)

    def __str__(self) -> str:
        w = self.weighting
        if w == "sif" and self.sif_a != DEFAULT_SIF_A:
            w = f"sif={self.sif_a:g}"
        return f"{self.source}/{w}/{self.post}"

    @property
    def slug(self) -> str:
        return str(self).replace("/", "-").replace("=", "")

    @property
    def needs_fit(self) -> bool:
        return self.weighting == "sif" or self.post != "none"

    @property
    def pcs(self) -> int:
        return int(self.post[2:]) if self.post.startswith("pc") else 0

    @property
    def whiten_dim(self) -> int | None:
        """Output dimension of whitening (None: all dimensions, or no whitening)."""
        return int(self.post[6:]) if self.post.startswith("whiten") and self.post[6:] else None

    def width(self, config: VATConfig) -> int:
        """The dimension of the pooled vectors (before whitening) for a model of `config`."""
        if self.source != "sentence":
            return config.d_model
        if not config.sentence_dim:
            raise VatError(
                "feature source sentence: this model has no sentence latent (it was trained "
                "without model.sentence_latent.dim)"
            )
        return config.sentence_dim

    def layer(self, n_layers: int) -> int | None:
        """The layer index of a `layerK` source, checked against the encoder's depth."""
        if not self.source.startswith("layer"):
            return None
        k = int(self.source[5:])
        if k > n_layers:
            raise VatError(
                f"feature source {self.source}: the encoder has layers 0..{n_layers} "
                f"(0 = embeddings)"
            )
        return k


@dataclass
class FittedFeatures:
    """A spec with its arrays; `fit` says how they were obtained, `origin` the file errors name."""

    spec: FeatureSpec
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    fit: dict = field(default_factory=dict)
    origin: str | None = field(default=None, compare=False)

    def check(self, model_config: VATConfig | None = None) -> FittedFeatures:
        """Self, if `stats_problem` finds nothing; else a VatError (CheckpointError for a file)."""
        problem = stats_problem(self.spec, self.arrays, self.fit, model_config)
        if problem is None:
            return self
        if self.origin is not None:
            raise CheckpointError(f"{self.origin}: {problem}")
        raise VatError(f"feature statistics for {self.spec}: {problem}")

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically, never over a file that is not a vat feature file."""
        from safetensors.numpy import save

        path = writable_target(path, "feature statistics file")  # a FIFO would hang _is_ours
        self.check()
        if path.exists() and not _is_ours(path):
            raise VatError(f"{path} exists and is not a vat feature file; not overwriting it")
        meta = {
            "format": STATS_FORMAT,
            "version": STATS_VERSION,
            "spec": str(self.spec),
            "fit": json.dumps(self.fit),
        }
        tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in self.arrays.items()}
        if not tensors:  # safetensors needs no tensor, but keep the file self-describing
            tensors = {"empty": np.zeros(0, dtype=np.float32)}
        blob = save(tensors, metadata=meta)
        atomic_write(path, lambda f: f.write(blob), binary=True)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, model_config: VATConfig | None = None) -> FittedFeatures:
        """The statistics in `path`, checked; every problem is a CheckpointError naming it."""
        try:
            path = regular_file(path, "feature statistics file")
        except VatError as e:
            raise CheckpointError(str(e)) from None
        return cls.read(path, model_config)

    @classmethod
    def read(cls, path: Path, model_config: VATConfig | None = None) -> FittedFeatures:
        """`load` of a path the caller knows is a regular file."""
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="numpy") as f:
                meta = f.metadata() or {}
                arrays = {k: f.get_tensor(k) for k in f.keys() if k != "empty"}
        except (SafetensorError, OSError, ValueError, TypeError) as e:
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            raise CheckpointError(f"{path} is not a readable safetensors file ({first})") from None
        if meta.get("format") != STATS_FORMAT:
            raise CheckpointError(f"{path} is not a vat feature file (no format={STATS_FORMAT})")
        if not meta.get("spec"):
            raise CheckpointError(f"{path}: its metadata names no feature spec")
        try:
            spec = FeatureSpec.parse(meta["spec"])
        except VatError as e:
            raise CheckpointError(f"{path}: its spec metadata is unusable ({e})") from None
        try:
            fit = json.loads(meta.get("fit", "{}"))
        except (json.JSONDecodeError, RecursionError):
            fit = None
        if not isinstance(fit, dict):
            raise CheckpointError(f"{path}: its 'fit' metadata is not a JSON object") from None
        for name, a in arrays.items():  # `save` writes float32
            if a.dtype != np.float32:
                raise CheckpointError(
                    f"{path}: {name} has dtype {a.dtype}, expected float32 (what vat writes)"
                )
        return cls(spec, arrays, fit, origin=str(path)).check(model_config=model_config)


def stats_problem(
    spec: FeatureSpec,
    arrays: dict[str, object],
    fit: object = None,
    model_config: VATConfig | None = None,
) -> str | None:
    """What is wrong with `arrays` as the statistics of `spec` (for the model), else None."""
    if fit is not None and not isinstance(fit, dict):
        return f"'fit' is {type(fit).__name__}, expected a dict"
    vocab = None if model_config is None else int(model_config.vocab_size)
    width = None if model_config is None else spec.width(model_config)
    mean = arrays.get("mean")
    if width is None and isinstance(mean, np.ndarray) and mean.ndim == 1:
        width = int(mean.shape[0])  # no model: the other arrays must agree with the mean
    want: dict[str, tuple[int | None, ...]] = {}  # None: a size not known without the model
    if spec.weighting == "sif":
        want["sif_weights"] = (vocab,)
    if spec.pcs:
        want |= {"mean": (width,), "components": (spec.pcs, width)}
    elif spec.post.startswith("whiten"):
        want |= {"mean": (width,), "matrix": (width, spec.whiten_dim or width)}
    missing = [k for k in want if k not in arrays]
    if missing:
        return f"the spec {spec} needs {', '.join(missing)}, which it lacks"
    by = f"the spec {spec} and this model need" if model_config is not None else None
    for name, shape in want.items():
        a = arrays[name]
        if not isinstance(a, np.ndarray):
            return f"{name} is {type(a).__name__}, expected a numpy array"
        if a.dtype.kind != "f":
            return f"{name} has dtype {a.dtype}, expected floating point (float32)"
        if a.ndim != len(shape) or any(w is not None and g != w for g, w in zip(a.shape, shape)):
            shown = "(" + ", ".join("?" if w is None else str(w) for w in shape)
            shown += ",)" if len(shape) == 1 else ")"
            needs = by or f"the spec {spec} needs"
            return f"{name} has shape {tuple(a.shape)}, {needs} {shown}"
    if width is not None and (spec.pcs or spec.whiten_dim or 0) > width:
        k = spec.pcs or spec.whiten_dim
        return f"the spec {spec} needs {k} dimensions of {width}-wide vectors, more than there are"
    for name in want:
        a = np.asarray(arrays[name])
        nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        if nan or inf:
            parts = [f"{what} at {n} {'entry' if n == 1 else 'entries'}"
                     for what, n in (("NaN", nan), ("inf", inf)) if n]  # fmt: skip
            return f"{name} has {' and '.join(parts)}"
    sif = arrays.get("sif_weights") if "sif_weights" in want else None
    if sif is not None:
        bad = (sif <= 0) | (sif > 1)  # a / (a + p(w)) with a > 0, 0 <= p(w) <= 1
        if bad.any():
            n = int(bad.sum())
            return (
                f"sif_weights has {n} {'entry' if n == 1 else 'entries'} outside (0, 1] "
                f"(e.g. {float(sif[bad][0]):g}); SIF weights a / (a + p(w)) lie in (0, 1]"
            )
    return None


def is_feature_file(path: str | os.PathLike) -> bool:
    """True for a regular file holding vat feature statistics."""
    p = Path(path)
    return p.is_file() and not p.is_symlink() and _is_ours(p)


def _is_ours(path: Path) -> bool:
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            return (f.metadata() or {}).get("format") == STATS_FORMAT
    except Exception:  # not safetensors at all: not ours
        return False


def check_token_counts(
    value: object, where: str | os.PathLike, model_config: VATConfig | None = None
) -> np.ndarray | None:
    """A model's recorded token counts (for SIF weights) as a (V,) int64 array, or None."""
    if value is None or (isinstance(value, list) and not value):
        return None
    if not isinstance(value, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**63 for c in value
    ):
        raise CheckpointError(f"{where}: 'token_counts' must be a list of counts (integers >= 0)")
    if model_config is not None and len(value) > model_config.vocab_size:
        raise CheckpointError(
            f"{where}: 'token_counts' holds {len(value)} counts for a "
            f"{model_config.vocab_size}-token model"
        )
    return np.asarray(value, dtype=np.int64)
