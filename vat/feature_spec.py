"""What a sentence vector is made of: a feature spec, and its fitted statistics on disk.

A spec names three choices, written `SOURCE/WEIGHTING/POST` (e.g. `mu/mean/none`, today's
default and the paper's VAT-mean; `firstlast/sif/pc1`; `mu/mean/whiten64`):

- SOURCE: `mu` (the posterior means), `layerK` (the encoder's hidden state after layer K
  before the mu / log-variance heads: layer0 is the embeddings plus positions, the last
  layer is the heads' input, i.e. after the final norm of a pre-LN stack), or `firstlast`
  (the average of layer1 and the last layer, as in Su et al. 2021 / Huang et al. 2021).
- WEIGHTING over the sentence's subwords: `mean`, `sum`, `start` (the first subword),
  `precision` (mu weighted by exp(-logvar), mu only), `sif` (mean of a / (a + p(w)) x,
  Arora et al. 2017; `sif=A` sets a, default 1e-3).
- POST, fitted on unlabeled sentences: `none`, `pcK` (remove the mean and the top K
  principal components), `whiten` or `whitenK` (whitening to K dimensions).

The statistics a spec needs (SIF weights, means, components, whitening matrices) are one
safetensors file whose metadata holds the spec and how it was fitted (`FittedFeatures`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vat.errors import VatError
from vat.io import atomic_write

WEIGHTINGS = ("mean", "sum", "start", "precision", "sif")
DEFAULT_SIF_A = 1e-3
STATS_FORMAT = "vat-features"
STATS_VERSION = "1"
FOLDER_STATS_NAME = "features.safetensors"  # the statistics of an exported folder's own spec
# The spec `vat export` gives a folder: the best by the mean of STS12 (5 sets) and STS-B dev
# on both CPU models of RESULTS.md ("Sentence features", 2026-11-24): the SIF-weighted mean
# of the encoder's input layer (embeddings + positions), +11.2 (demo) and +5.4 (corpus)
# over mean-of-mu. It needs only the training token counts; a checkpoint without them is
# exported with mean-of-mu (vat.share.export.export_features warns).
DEFAULT_EXPORT_SPEC = "layer0/sif/none"


@dataclass(frozen=True)
class FeatureSpec:
    source: str = "mu"  # "mu" | "layerK" | "firstlast"
    weighting: str = "mean"
    post: str = "none"  # "none" | "pcK" | "whiten" | "whitenK"
    sif_a: float = DEFAULT_SIF_A

    def __post_init__(self) -> None:
        if not (self.source in ("mu", "firstlast") or re.fullmatch(r"layer\d+", self.source)):
            raise VatError(
                f"feature source must be mu, layerK (K = 0..layers) or firstlast, "
                f"got {self.source!r}"
            )
        if self.weighting not in WEIGHTINGS:
            raise VatError(
                f"feature weighting must be one of {', '.join(WEIGHTINGS)}, got {self.weighting!r}"
            )
        if self.weighting == "precision" and self.source != "mu":
            raise VatError("precision weighting uses the variances of mu: it needs source mu")
        if not re.fullmatch(r"none|pc[1-9]\d*|whiten(?:[1-9]\d*)?", self.post):
            raise VatError(
                f"feature post-processing must be none, pcK or whiten[K] (K >= 1), "
                f"got {self.post!r}"
            )
        if not (isinstance(self.sif_a, float | int) and self.sif_a > 0):
            raise VatError(f"the SIF constant a must be > 0, got {self.sif_a!r}")

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
        """A file-name-safe form: mu-mean-none."""
        return str(self).replace("/", "-").replace("=", "")

    @property
    def needs_fit(self) -> bool:
        """True when the spec needs statistics: SIF weights or a fitted post-processing."""
        return self.weighting == "sif" or self.post != "none"

    @property
    def pcs(self) -> int:
        return int(self.post[2:]) if self.post.startswith("pc") else 0

    @property
    def whiten_dim(self) -> int | None:
        """Output dimension of whitening (None: all dimensions, or no whitening)."""
        return int(self.post[6:]) if self.post.startswith("whiten") and self.post[6:] else None

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
    """A spec with the arrays it needs; `fit` records how they were obtained (plain JSON)."""

    spec: FeatureSpec
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    fit: dict = field(default_factory=dict)

    def check(self, where: str = "feature statistics") -> FittedFeatures:
        s = self.spec
        need = (["sif_weights"] if s.weighting == "sif" else []) + (
            ["mean", "components"] if s.pcs else ["mean", "matrix"] if s.post != "none" else []
        )
        missing = [k for k in need if k not in self.arrays]
        if missing:
            raise VatError(f"{where}: spec {s} needs {', '.join(missing)}, which it lacks")
        return self

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically. Refuses to replace a file that is not a vat feature file."""
        from safetensors.numpy import save

        path = Path(path)
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
    def load(cls, path: str | os.PathLike) -> FittedFeatures:
        from safetensors import SafetensorError, safe_open

        path = Path(path)
        if not path.is_file():
            raise VatError(f"feature statistics file {path} does not exist")
        try:
            with safe_open(str(path), framework="numpy") as f:
                meta = f.metadata() or {}
                arrays = {k: f.get_tensor(k) for k in f.keys() if k != "empty"}
        except (SafetensorError, OSError, ValueError) as e:
            raise VatError(f"{path} is not a readable safetensors file ({e})") from None
        if meta.get("format") != STATS_FORMAT:
            raise VatError(f"{path} is not a vat feature file (no format={STATS_FORMAT})")
        try:
            fit = json.loads(meta.get("fit", "{}"))
        except json.JSONDecodeError:
            raise VatError(f"{path}: its 'fit' metadata is not JSON") from None
        return cls(FeatureSpec.parse(meta.get("spec")), arrays, fit).check(str(path))


def _is_ours(path: Path) -> bool:
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            return (f.metadata() or {}).get("format") == STATS_FORMAT
    except Exception:  # not safetensors at all: not ours
        return False


def stats_path_for(ckpt: str | os.PathLike, spec: FeatureSpec) -> Path:
    """Where the statistics of `spec` live beside a checkpoint (or inside an exported folder:
    `features.safetensors` holds the folder's own spec, others sit beside it by slug)."""
    p = Path(ckpt)
    if p.is_dir():
        return p / f"features-{spec.slug}.safetensors"
    return p.with_name(f"{p.name}.features-{spec.slug}.safetensors")
