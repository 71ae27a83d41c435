"""Sentence vectors by a feature spec (vat.feature_spec): sources, weightings, fitted
post-processing, and fitting on unlabeled text, for a loaded model (vat.share.loaded).

One code path makes the vectors for `vat evaluate`, `vat.load(...).encode`, the
sentence-transformers module and the MTEB encoder: `FeatureEncoder.pool_ids` (source and
weighting of one padded batch) then `FeatureEncoder.post` (the fitted post-processing, in
float64 numpy). `resolve_features` finds a spec's statistics (an exported folder's own, the
file beside a checkpoint) or fits them. Fitting reads only the sentences it is given: by
default a sample of the model's own training files, never evaluation data.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from vat.data.corpus import expand_files, iter_files
from vat.errors import OptionError, VatError
from vat.feature_spec import DEFAULT_EXPORT_SPEC, FeatureSpec, FittedFeatures, stats_path_for
from vat.features.pooling import length_sorted_batches, pool
from vat.features.postprocess import (
    apply_pc_removal,
    apply_whitening,
    fit_pc_removal,
    fit_whitening,
    sif_weights,
)
from vat.model import VAT
from vat.runtime import eval_mode
from vat.share.loaded import LoadedVAT, check_loaded
from vat.tokenizer import VATTokenizer, make_batch

DEFAULT_FIT_SENTENCES = 20_000
Combo = tuple[str, str]  # (source, weighting)


# -- sources -----------------------------------------------------------------------------------
@torch.no_grad()
def encoder_states(
    model: VAT, src_ids: torch.Tensor, layers: Iterable[int] = ()
) -> tuple[dict[int, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """({layer: (B, T, d)}, mu, logvar, mask) of one batch, in one encoder pass.

    Layer 0 is the scaled embeddings plus positions, layer k the output of encoder layer k;
    the last layer is taken after the final norm (pre-LN), i.e. the input of the mu and
    log-variance heads. mu and logvar are `VAT.encode`'s (the same steps, in eval mode).
    """
    want = set(layers)
    n = len(model.encoder)
    mask = src_ids != model.config.pad_id  # (B, T)
    h = model._embed(src_ids)  # (B, T, d)
    states: dict[int, torch.Tensor] = {}
    if 0 in want:
        states[0] = h
    for k, layer in enumerate(model.encoder, start=1):
        h = layer(h, mask)
        if k in want and k < n:
            states[k] = h
    h = model.enc_norm(h)
    if n in want:
        states[n] = h
    mu = model.mu_head(h)
    logvar = model.logvar_head(h).clamp(model.config.logvar_min, model.config.logvar_max)
    return states, mu, logvar, mask


def _layers_of(sources: Iterable[str], n_layers: int) -> set[int]:
    out: set[int] = set()
    for s in sources:
        if s == "firstlast":
            out |= {1, n_layers}
        elif s != "mu":
            k = FeatureSpec(source=s).layer(n_layers)
            out.add(int(k))
    return out


def source_tensor(
    source: str, states: dict[int, torch.Tensor], mu: torch.Tensor, n_layers: int
) -> torch.Tensor:
    if source == "mu":
        return mu
    if source == "firstlast":
        return (states[1] + states[n_layers]) / 2
    return states[int(source[5:])]


# -- weighting ---------------------------------------------------------------------------------
def weighted_pool(
    x: torch.Tensor,
    lengths: torch.Tensor,
    weighting: str,
    logvar: torch.Tensor | None = None,
    token_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, d) pooled x (B, T, d) over the first `lengths` subwords. `sif` is the mean of
    token_weights (B, T) times x (Arora et al.'s (1/|s|) sum a / (a + p(w)) v_w); the other
    weightings are `vat.features.pool`'s."""
    if weighting != "sif":
        return pool(x, lengths, weighting, logvar)  # type: ignore[arg-type]
    if token_weights is None:
        raise ValueError("sif weighting needs token weights")
    n = lengths.clamp_min(1)
    keep = torch.arange(x.shape[1], device=x.device)[None, :] < n[:, None]  # (B, T)
    w = token_weights * keep  # (B, T)
    return (w[..., None] * x).sum(1) / n[:, None].to(x.dtype)


@torch.no_grad()
def pool_batch(
    model: VAT,
    src_ids: torch.Tensor,
    lengths: torch.Tensor,
    combos: Sequence[Combo],
    sif: torch.Tensor | None = None,
) -> dict[Combo, torch.Tensor]:
    """{(source, weighting): (B, d) float32} for one padded batch, from one encoder pass.
    `sif` (V,) holds a / (a + p(w)) for every token id (needed by `sif` weighting)."""
    n_layers = len(model.encoder)
    states, mu, logvar, _ = encoder_states(
        model, src_ids, _layers_of({s for s, _ in combos}, n_layers)
    )
    tw = None
    if any(w == "sif" for _, w in combos):
        if sif is None:
            raise VatError("sif weighting needs token frequencies (SIF weights)")
        tw = sif.to(src_ids.device)[src_ids]  # (B, T)
    out = {}
    for source, weighting in combos:
        x = source_tensor(source, states, mu, n_layers).float()
        out[(source, weighting)] = weighted_pool(x, lengths, weighting, logvar.float(), tw)
    return out


def tokenize(tokenizer: VATTokenizer, sentences: Sequence[str], max_len: int) -> list[list[int]]:
    """Subword ids cut to max_len - 1 (the cut of vat.features.iter_encoded)."""
    return [s[: max_len - 1] for s in tokenizer.encode_batch(list(sentences))]


def pooled_features(
    model: VAT,
    tokenizer: VATTokenizer,
    sentences: Sequence[str],
    combos: Sequence[Combo],
    sif: np.ndarray | torch.Tensor | None = None,
    batch_size: int = 128,
    progress: bool = False,
) -> dict[Combo, np.ndarray]:
    """{(source, weighting): (N, d) float32} in input order, before post-processing; with
    `progress` a bar over the batches on stderr (as `vat.features.sentence_features`)."""
    ids = tokenize(tokenizer, sentences, model.config.max_len)
    d = model.config.d_model
    out = {c: np.zeros((len(ids), d), dtype=np.float32) for c in combos}
    device = next(model.parameters()).device
    sif_t = None if sif is None else torch.as_tensor(np.asarray(sif), dtype=torch.float32)
    with eval_mode(model):
        batches = list(length_sorted_batches([len(x) for x in ids], batch_size))
        for index in tqdm(
            batches, desc="encoding", unit="batch", disable=not progress, leave=False
        ):
            batch = [ids[i] for i in index]
            src = make_batch(batch)["src"].to(device)
            lengths = torch.tensor([len(x) for x in batch], device=device)
            for c, v in pool_batch(model, src, lengths, combos, sif_t).items():
                out[c][index] = v.cpu().numpy()
    return out


# -- post-processing -----------------------------------------------------------------------
def fit_post(spec: FeatureSpec, x: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays of spec.post fitted on pooled vectors x (N, d)."""
    try:
        if spec.pcs:
            return fit_pc_removal(x, spec.pcs)
        if spec.post.startswith("whiten"):
            return fit_whitening(x, spec.whiten_dim)
    except ValueError as e:
        raise VatError(f"fitting {spec}: {e}") from None
    return {}


def apply_post(spec: FeatureSpec, arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    if spec.pcs:
        return apply_pc_removal(x, arrays["mean"], arrays["components"])
    if spec.post.startswith("whiten"):
        return apply_whitening(x, arrays["mean"], arrays["matrix"])
    return np.asarray(x, dtype=np.float32)


class FeatureEncoder:
    """A loaded model with a fitted feature spec: `encoder(sentences) -> (N, k)` float32."""

    def __init__(self, loaded: LoadedVAT, fitted: FittedFeatures) -> None:
        model = check_loaded(loaded, "FeatureEncoder").model
        self.model, self.tokenizer, self.fitted = model, loaded.tokenizer, fitted.check()
        spec = fitted.spec
        spec.layer(len(model.encoder))  # a layerK beyond the encoder fails here
        sw = fitted.arrays.get("sif_weights")
        if sw is not None and sw.shape[0] < model.config.vocab_size:
            raise VatError(
                f"feature statistics for {spec}: {sw.shape[0]} SIF weights for a "
                f"{model.config.vocab_size}-token model"
            )
        self._sif = None if sw is None else torch.as_tensor(sw, dtype=torch.float32)

    @property
    def spec(self) -> FeatureSpec:
        return self.fitted.spec

    @property
    def dim(self) -> int:
        m = self.fitted.arrays.get("matrix")
        return int(m.shape[1]) if m is not None else int(self.model.config.d_model)

    def pool_ids(self, src_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, d) source + weighting of one padded batch (no post-processing)."""
        combo = (self.spec.source, self.spec.weighting)
        return pool_batch(self.model, src_ids, lengths, [combo], self._sif)[combo]

    def post(self, x: np.ndarray) -> np.ndarray:
        return apply_post(self.spec, self.fitted.arrays, x)

    def encode_ids(self, src_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, k) final vectors of a padded batch, on the batch's device."""
        with eval_mode(self.model):
            x = self.pool_ids(src_ids, lengths).cpu().numpy()
        return torch.from_numpy(self.post(x)).to(src_ids.device)

    def __call__(
        self, sentences: Sequence[str], batch_size: int = 128, progress: bool = False
    ) -> np.ndarray:
        combo = (self.spec.source, self.spec.weighting)
        x = pooled_features(
            self.model, self.tokenizer, sentences, [combo], self._sif, batch_size, progress
        )
        return self.post(x[combo])


# -- fitting -----------------------------------------------------------------------------------
def count_tokens(
    tokenizer: VATTokenizer, files: Sequence[str | os.PathLike], vocab_size: int
) -> np.ndarray:
    """(vocab_size,) subword counts over text files (one sentence per line, plain or .gz)."""

    counts = np.zeros(vocab_size, dtype=np.int64)
    paths = expand_files([str(f) for f in files], "--count-files")
    for chunk in iter_files(paths, "skip", "--count-files"):
        flat = np.fromiter(
            (i for ids in tokenizer.encode_batch(chunk) for i in ids), dtype=np.int64
        )
        counts += np.bincount(flat, minlength=vocab_size)[:vocab_size]
    return counts


def sample_lines(
    files: Sequence[str | os.PathLike], n: int, seed: int = 0, option: str = "--fit-files"
) -> list[str]:
    """Up to n lines drawn uniformly without replacement (in file order) from text files."""

    paths = expand_files([str(f) for f in files], option)
    lines = [s for chunk in iter_files(paths, "skip", option) for s in chunk]
    if len(lines) <= n:
        return lines
    keep = np.sort(np.random.default_rng(seed).choice(len(lines), size=n, replace=False))
    return [lines[i] for i in keep]


def training_files(loaded: LoadedVAT) -> list[str]:
    """The training files the model records (a checkpoint's data hyperparameters, a folder's
    training data); an error saying so when it records none."""
    if not loaded.train_files:
        raise OptionError(
            "fit_files",
            f"{loaded.path} names no training files to fit the features on; give text files "
            "of unlabeled sentences (one per line)",
        )
    return list(loaded.train_files)


def fit_features(
    model: VAT,
    tokenizer: VATTokenizer,
    spec: FeatureSpec,
    sentences: Sequence[str] = (),
    token_counts: np.ndarray | None = None,
    batch_size: int = 128,
    info: dict | None = None,
) -> FittedFeatures:
    """Fit what `spec` needs: SIF weights from `token_counts`, post-processing on `sentences`."""
    t0 = time.perf_counter()
    arrays: dict[str, np.ndarray] = {}
    if spec.weighting == "sif":
        if token_counts is None:
            raise VatError(
                "sif weighting needs token frequencies: this model has none stored "
                "(checkpoints from before issue 23); pass --count-files with its training text"
            )
        counts = np.zeros(model.config.vocab_size, dtype=np.float64)
        counts[: min(len(token_counts), len(counts))] = token_counts[: len(counts)]
        arrays["sif_weights"] = sif_weights(counts, spec.sif_a)
    if spec.post != "none":
        if len(sentences) < 2:
            raise VatError(f"fitting {spec} needs at least 2 sentences, got {len(sentences)}")
        combo = (spec.source, spec.weighting)
        x = pooled_features(
            model, tokenizer, sentences, [combo], arrays.get("sif_weights"), batch_size
        )[combo]
        arrays.update(fit_post(spec, x))
    fit = {
        **(info or {}),
        "sentences": len(sentences) if spec.post != "none" else 0,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return FittedFeatures(spec, arrays, fit)


def chosen_spec(
    loaded: LoadedVAT, pooling: str = "mean", features: str | FeatureSpec | None = None
) -> str | FeatureSpec | None:
    """The one rule of every loader for which vectors a model gives: `features` if given,
    else for mean pooling an exported folder's own spec (what its card names); None means
    `pooling` of the token means mu (vat.features.pool)."""
    if features is not None:
        return features
    return loaded.feature_spec if pooling == "mean" else None


def stored_features(loaded: LoadedVAT, spec: FeatureSpec) -> FittedFeatures | None:
    """Statistics of `spec` the model already has: an exported folder's own, or the file vat
    wrote beside the model (`stats_path_for`) when an earlier fit stored them."""
    stats = loaded.feature_stats
    if stats is not None and stats.spec == spec:
        return stats
    home = loaded.source.writable_home
    if home is not None:
        path = stats_path_for(home, spec)
        if path.is_file():
            fitted = FittedFeatures.load(path)
            if fitted.spec == spec:
                return fitted
    return None


def resolve_features(
    loaded: LoadedVAT,
    spec: str | FeatureSpec | None = None,
    *,
    fit_files: Sequence[str] | None = None,
    fit_sentences: Sequence[str] | None = None,
    fit_info: dict | None = None,
    count_files: Sequence[str] | None = None,
    n_fit: int = DEFAULT_FIT_SENTENCES,
    seed: int = 0,
    save: bool = True,
    batch_size: int = 128,
    quiet: bool = False,
) -> FittedFeatures:
    """The fitted statistics of `spec` for `loaded` (default spec: an exported folder's own,
    else mu/mean/none).

    In order: a spec with nothing to fit; statistics the model already has
    (`stored_features`); else a fit on `fit_sentences`, on up to n_fit lines of `fit_files`,
    or by default on up to n_fit of the model's own training sentences, stored beside the
    model (unless `save` is off, or the model is a Hub download). Naming fit or count files
    always fits anew (and replaces only a file vat wrote).
    """
    check_loaded(loaded, "resolve_features")
    if spec is None:
        spec = loaded.feature_spec or FeatureSpec()
    spec = FeatureSpec.parse(spec)
    spec.layer(len(loaded.model.encoder))
    if not spec.needs_fit:
        return FittedFeatures(spec)
    explicit = bool(fit_files or fit_sentences or count_files)
    if not explicit:
        found = stored_features(loaded, spec)
        if found is not None:
            return found
    counts = None
    if spec.weighting == "sif":
        if count_files:
            counts = count_tokens(loaded.tokenizer, count_files, loaded.config.vocab_size)
        else:
            counts = loaded.token_counts
            if counts is None:
                raise OptionError(
                    "count_files",
                    f"{loaded.path} stores no token frequencies (needed by sif weighting): "
                    "give its training text to count them",
                )
    info: dict = dict(fit_info or {})
    sentences: list[str] = []
    if spec.post != "none":
        if fit_sentences is not None:
            sentences = list(fit_sentences)
        else:
            files = list(fit_files) if fit_files else training_files(loaded)
            sentences = sample_lines(files, n_fit, seed)
            info.setdefault("files", files)
            info.setdefault("from", "named files" if fit_files else "training files")
        info["seed"] = seed
    if count_files:
        info["count_files"] = [str(f) for f in count_files]
    fitted = fit_features(loaded.model, loaded.tokenizer, spec, sentences, counts, batch_size, info)
    home = loaded.source.writable_home
    if save and home is not None:
        out = stats_path_for(home, spec)
        try:
            fitted.save(out)
            if not quiet:
                print(
                    f"vat: fitted {spec} on {fitted.fit['sentences']} sentences, "
                    f"{fitted.fit['seconds']} s; wrote {out}",
                    file=sys.stderr,
                )
        except (VatError, OSError) as e:
            print(f"warning: could not store the feature statistics ({e})", file=sys.stderr)
    return fitted


def export_features(
    loaded: LoadedVAT,
    features: str | FeatureSpec | None = None,
    *,
    fit_files: Sequence[str] | None = None,
    count_files: Sequence[str] | None = None,
) -> FittedFeatures:
    """The feature spec an exported folder carries, with its statistics: `features` if given
    (fitted as `resolve_features` does, on `fit_files` or the model's training sentences,
    with token counts from `count_files` or the model's own), else an exported source's own
    spec, else DEFAULT_EXPORT_SPEC. A default that cannot be fitted for this model (e.g. a
    checkpoint without token counts) falls back to the mean of mu with a warning; the folder
    and its card name the spec they hold. Nothing is stored beside the model: the folder
    holds the statistics."""
    spec = FeatureSpec.parse(features or loaded.feature_spec or DEFAULT_EXPORT_SPEC)
    try:
        return resolve_features(
            loaded, spec, fit_files=fit_files, count_files=count_files, save=False
        )
    except VatError as e:
        if features is not None:
            raise
        print(f"warning: exporting with mu/mean/none, not {spec} ({e})", file=sys.stderr)
        return FittedFeatures(FeatureSpec())
