"""Sentence vectors by a feature spec (vat.feature_spec): sources, weightings, fitted
post-processing, and fitting on unlabeled text, for a loaded model (vat.share.loaded).

One code path makes the vectors for `vat evaluate`, `vat.load(...).encode`, the
sentence-transformers module and the MTEB encoder: `FeatureEncoder.pool_ids` (source and
weighting of one padded batch) then `FeatureEncoder.post` (the fitted post-processing, in
float64 numpy). `resolve_features` finds a spec's statistics (an exported folder's own, the
file beside a checkpoint) or fits them. Fitting reads only the sentences it is given: by
default a sample of the model's own training files, never evaluation data.

Which vectors a model gives when nobody names a spec is one rule, `default_features`
(docs/features.md, "Which vectors a model gives"): a model's sentence vectors follow its
feature spec. An exported folder's is its own (sentence_vat_config.json). A training run or
checkpoint (or a folder from before specs) has the spec `vat export` would give it,
DEFAULT_EXPORT_SPEC, whose SIF weights come from the training token counts the checkpoint
records, so a model and its export give the same vectors. Where that spec cannot be had (no
recorded counts), the vectors are the mean of mu, and `DefaultFeatures.why` says so. Naming
a spec (`features`) or a pooling of mu (`pooling`) replaces the rule.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from vat.data.corpus import expand_files, iter_files
from vat.errors import CheckpointError, OptionError, VatError, check_count, check_path, one_line
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
from vat.share.training_record import recorded_training_files
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
    return tokenizer.encode_batch(list(sentences), max_tokens=max_len - 1)


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
        if not isinstance(fitted, FittedFeatures):
            raise OptionError("features", f"expected a FittedFeatures, got {type(fitted).__name__}")
        # Every path to vectors (vat.load(...).encode, sentence-transformers, MTEB, vat
        # evaluate, a FittedFeatures a user built) passes here: the statistics are checked
        # against this model's sizes as its weights were (finite, shapes, dtype, SIF range).
        fitted.check(model_config=model.config)
        self.model, self.tokenizer, self.fitted = model, loaded.tokenizer, fitted
        fitted.spec.layer(len(model.encoder))  # a layerK beyond the encoder fails here
        sw = fitted.arrays.get("sif_weights") if fitted.spec.weighting == "sif" else None
        self._sif = None if sw is None else torch.as_tensor(sw, dtype=torch.float32)

    @property
    def spec(self) -> FeatureSpec:
        return self.fitted.spec

    @property
    def dim(self) -> int:
        if self.spec.post.startswith("whiten"):  # (D, K) checked in __init__
            return int(self.fitted.arrays["matrix"].shape[1])
        return int(self.model.config.d_model)

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
def text_files(value: object, name: str) -> list[str] | None:
    """`value` (fit_files, count_files) as a list of paths; None passes through.

    One path (a str, numpy string or PathLike) is one file, never its characters: no user
    means a list of one-letter files, and `open`, pandas and datasets' data_files read one
    path the same way. Bytes, None or non-path entries and an empty list are OptionErrors
    naming `name`."""
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        value = [value]
    items = _entries(value, name, "paths of text files")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, str | os.PathLike) or isinstance(item, bytes):
            raise OptionError(name, f"entry {i} is {_kind(item)}; expected a path (str)")
        text = os.fspath(item)
        if not isinstance(text, str) or not text:  # a PathLike of bytes, or ""
            raise OptionError(name, f"entry {i} is {text!r}; expected a path (str)")
        out.append(str(text))  # numpy's str_ is a str subclass: plain str for the records
    if not out:
        raise OptionError(name, "is empty; give at least one text file")
    return out


def sentence_list(value: object, name: str) -> list[str] | None:
    """`value` (fit_sentences) as a list of at least 2 str; None passes through. A bare
    string is refused, not read as its characters (fitting on 8 letters is never meant)."""
    if value is None:
        return None
    if isinstance(value, str):
        raise OptionError(name, "expected a list of sentences; got a string")
    items = _entries(value, name, "sentences")
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise OptionError(name, f"entry {i} is {_kind(item)}; expected a sentence (str)")
    if len(items) < 2:
        raise OptionError(name, f"fitting needs at least 2 sentences, got {len(items)}")
    return [str(s) for s in items]


def _entries(value: object, name: str, what: str) -> list:
    """The items of a list, tuple, array or generator; bytes and mappings are refused."""
    if isinstance(value, bytes | bytearray | memoryview):
        raise OptionError(name, f"expected a list of {what}; got bytes")
    if isinstance(value, dict) or not isinstance(value, Iterable):
        raise OptionError(name, f"expected a list of {what}; got {_kind(value)}")
    return list(value)


def _kind(x: object) -> str:
    return "None" if x is None else f"{type(x).__name__} {x!r:.40}"


class _named_errors:
    """Errors of reading text files as OptionErrors naming the argument that named them (the
    readers in vat.data.corpus prefix messages with it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> None:
        if error is None or isinstance(error, OptionError) or not isinstance(error, VatError):
            return None
        text = str(error).removeprefix(f"{self.name}: ")
        raise OptionError(self.name, text) from None


def count_tokens(
    tokenizer: VATTokenizer,
    files: Sequence[str | os.PathLike] | str | os.PathLike,
    vocab_size: int,
    name: str = "count_files",
) -> np.ndarray:
    """(vocab_size,) subword counts over text files (one sentence per line, plain or .gz)."""

    counts = np.zeros(vocab_size, dtype=np.int64)
    with _named_errors(name):
        paths = expand_files(text_files(files, name) or [], name)
        for chunk in iter_files(paths, "skip", name):
            flat = np.fromiter(
                (i for ids in tokenizer.encode_batch(chunk) for i in ids), dtype=np.int64
            )
            counts += np.bincount(flat, minlength=vocab_size)[:vocab_size]
    return counts


def reservoir_sample(chunks: Iterable[Sequence[str]], n: int, seed: int = 0) -> list[str]:
    """Up to n lines drawn uniformly without replacement from a stream of chunks of lines,
    returned in stream order, holding n lines and one chunk at a time (Vitter's Algorithm R:
    line i, counted from 0, replaces a uniform slot j of [0, i] when j < n, so after N lines
    each is kept with probability n / N). The same seed gives the same sample."""
    rng = np.random.default_rng(seed)
    kept: list[tuple[int, str]] = []  # (line index, line), at most n
    seen = 0
    for chunk in chunks:
        m = len(chunk)
        fill = min(max(n - seen, 0), m)  # the first n lines fill the reservoir
        kept.extend((seen + k, chunk[k]) for k in range(fill))
        if fill < m:
            # one draw per later line, vectorised over the chunk: j uniform in [0, i]
            index = np.arange(seen + fill, seen + m)  # (m - fill,) global line indices
            slots = rng.integers(0, index + 1)  # (m - fill,)
            for k in np.flatnonzero(slots < n):  # in order: a later line overwrites an earlier
                kept[slots[k]] = (int(index[k]), chunk[fill + k])
        seen += m
    kept.sort()
    return [line for _, line in kept]


def sample_lines(
    files: Sequence[str | os.PathLike] | str | os.PathLike,
    n: int,
    seed: int = 0,
    name: str = "fit_files",
) -> list[str]:
    """Up to n lines drawn uniformly without replacement (in file order) from text files, in
    one pass holding n lines and one chunk (`reservoir_sample`): a 20M-line corpus costs no
    more memory than a small one. Errors name the argument `name`."""
    check_count(n, "n_fit", minimum=1)
    check_count(seed, "seed", minimum=0)
    with _named_errors(name):
        paths = expand_files(text_files(files, name) or [], name)
        return reservoir_sample(iter_files(paths, "skip", name), int(n), int(seed))


def training_files(
    loaded: LoadedVAT, name: str = "fit_files", train_data_dir: str | os.PathLike | None = None
) -> list[str]:
    """The model's recorded training files, found as `recorded_training_files` finds them
    (absolute ones as recorded; portable records inside the data folder `train_data_dir`,
    default $VAT_DATA_DIR, their size and digest checked; relative ones only in the model's
    own folders, never the current folder); an OptionError naming `name`, saying where vat
    looked, when they are not here."""
    return recorded_training_files(loaded, name, train_data_dir)


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
            raise OptionError(
                "count_files",
                "sif weighting needs token frequencies: this model has none stored "
                "(checkpoints from before issue 23); give its training text to count them",
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
    if "sif_weights" in arrays:
        fit.setdefault("counts_from", "given")  # resolve_features names its source
    return FittedFeatures(spec, arrays, fit)


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
class DefaultFeatures:
    """The vectors a model gives when nobody names a spec (`default_features`), and why."""

    fitted: FittedFeatures
    why: str
    """Why this spec, in a few words (for tables, results files and warnings)."""
    fallback: bool = False
    """True when the rule's spec could not be had and the vectors are the mean of mu."""

    @property
    def spec(self) -> FeatureSpec:
        return self.fitted.spec


def default_features(loaded: LoadedVAT, quiet: bool = False) -> DefaultFeatures:
    """THE rule of every loader (vat.load(...).encode, AutoModel, sentence-transformers, MTEB,
    `vat evaluate`, `vat score`, `vat export`) for which vectors a model gives by default:

    - an exported folder's own spec (sentence_vat_config.json), with its statistics;
    - else (a training run or checkpoint, a folder from before specs) the spec `vat export`
      gives it, DEFAULT_EXPORT_SPEC: layer0/sif/none needs only SIF weights, made from the
      training token counts the checkpoint records (no sentences are fitted, nothing is
      written), so `vat.load(run)` and `vat.load(export of run)` give the same vectors;
    - where that spec cannot be had (no recorded counts), the mean of mu, said on stderr
      unless `quiet` (and always in `why`).

    Damaged statistics (a CheckpointError naming their file) are an error, never a reason to
    fall back."""
    check_loaded(loaded, "default_features")
    own = loaded.feature_spec
    if own is not None:
        return DefaultFeatures(resolve_features(loaded, own), "the folder's own spec")
    spec = FeatureSpec.parse(DEFAULT_EXPORT_SPEC)
    problem = None
    if spec.weighting == "sif" and loaded.token_counts is None:
        if stored_features(loaded, spec) is None:
            problem = (
                "no training token counts are recorded, which its SIF weights need "
                "(count_files: the training text to count them in)"
            )
    if problem is None:
        try:
            fitted = resolve_features(loaded, spec, save=False, quiet=True)
        except CheckpointError:
            raise
        except VatError as e:
            problem = one_line(e)
        else:
            why = "vat's default for a checkpoint; SIF weights from its recorded token counts"
            return DefaultFeatures(fitted, why)
    why = f"the mean of mu, not {spec}: {problem}"
    if not quiet:
        print(f"warning: {loaded.name}: sentence vectors are {why}", file=sys.stderr)
    return DefaultFeatures(FittedFeatures(FeatureSpec()), why, fallback=True)


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


def stored_features(loaded: LoadedVAT, spec: FeatureSpec) -> FittedFeatures | None:
    """Statistics of `spec` the model already has: an exported folder's own, or the file vat
    wrote beside the model (`stats_path_for`) when an earlier fit stored them."""
    stats = loaded.feature_stats
    if stats is not None and stats.spec == spec:
        return stats.check(model_config=loaded.config)
    home = loaded.source.writable_home
    if home is not None:
        path = stats_path_for(home, spec)
        # a FIFO or folder there is named (FittedFeatures.load), never skipped as "no file"
        if path.exists() or path.is_symlink():
            fitted = FittedFeatures.load(path, model_config=loaded.config)
            if fitted.spec == spec:
                return fitted
    return None


def resolve_features(
    loaded: LoadedVAT,
    spec: str | FeatureSpec | None = None,
    *,
    fit_files: Sequence[str] | str | os.PathLike | None = None,
    fit_sentences: Sequence[str] | None = None,
    fit_info: dict | None = None,
    count_files: Sequence[str] | str | os.PathLike | None = None,
    n_fit: int = DEFAULT_FIT_SENTENCES,
    seed: int = 0,
    save: bool = True,
    batch_size: int = 128,
    quiet: bool = False,
    train_data_dir: str | os.PathLike | None = None,
) -> FittedFeatures:
    """The fitted statistics of `spec` for `loaded`. Without `spec`: the model's own
    (`default_features`, the one rule), or, when files to fit or count are named, an exported
    folder's own spec else DEFAULT_EXPORT_SPEC fitted on them.

    In order: a spec with nothing to fit; statistics the model already has
    (`stored_features`); else a fit on `fit_sentences`, on up to n_fit lines of `fit_files`,
    or by default on up to n_fit of the model's own training sentences, stored beside the
    model (unless `save` is off, or the model is a Hub download). Naming fit or count files
    always fits anew (and replaces only a file vat wrote).

    `fit_files` and `count_files` are lists of paths (one path alone is one file);
    `fit_sentences` a list of at least 2 sentences, never a bare string. The model's own
    training files are found where it recorded them (`training_files`; portable records
    inside the data folder `train_data_dir`, default $VAT_DATA_DIR), never in the current
    folder.
    """
    check_loaded(loaded, "resolve_features")
    check_path(train_data_dir, "train_data_dir", optional=True)
    fit_files = text_files(fit_files, "fit_files")
    count_files = text_files(count_files, "count_files")
    fit_sentences = sentence_list(fit_sentences, "fit_sentences")
    check_count(n_fit, "n_fit", minimum=2)  # a fit needs two rows
    check_count(seed, "seed", minimum=0)  # numpy's seeds are non-negative
    check_count(batch_size, "batch_size")
    if spec is None:
        if fit_files is None and fit_sentences is None and count_files is None:
            return default_features(loaded, quiet=quiet).fitted
        spec = loaded.feature_spec or DEFAULT_EXPORT_SPEC
    spec = FeatureSpec.parse(spec)
    spec.layer(len(loaded.model.encoder))
    if not spec.needs_fit:
        return FittedFeatures(spec)
    explicit = fit_files is not None or fit_sentences is not None or count_files is not None
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
            files = fit_files if fit_files else training_files(loaded, "fit_files", train_data_dir)
            sentences = sample_lines(files, n_fit, seed)
            info.setdefault("files", files)
            info.setdefault("from", "named files" if fit_files else "training files")
        info["seed"] = seed
    if count_files:
        info["count_files"] = count_files
    if counts is not None:  # where the SIF weights came from, for the model card
        info["counts_from"] = "count_files" if count_files else "training"
        info["count_tokens"] = int(np.asarray(counts).sum())
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
    fit_files: Sequence[str] | str | os.PathLike | None = None,
    count_files: Sequence[str] | str | os.PathLike | None = None,
    train_data_dir: str | os.PathLike | None = None,
) -> FittedFeatures:
    """The feature spec an exported folder carries, with its statistics: `features` if given
    (fitted as `resolve_features` does, on `fit_files` or the model's training sentences,
    with token counts from `count_files` or the model's own), else the model's own vectors
    (`default_features`, the one rule: an exported source's own spec, else
    DEFAULT_EXPORT_SPEC, else the mean of mu with a warning), so the folder gives the
    vectors its source gave. Nothing is stored beside the model: the folder holds the
    statistics. Files the caller named that cannot be read are an error, never a
    fallback. `train_data_dir`: where portable training records are found (resolve_features)."""
    fit_files = text_files(fit_files, "fit_files")
    count_files = text_files(count_files, "count_files")
    if features is not None or fit_files is not None or count_files is not None:
        spec = FeatureSpec.parse(features or loaded.feature_spec or DEFAULT_EXPORT_SPEC)
        return resolve_features(
            loaded,
            spec,
            fit_files=fit_files,
            count_files=count_files,
            save=False,
            train_data_dir=train_data_dir,
        )
    chosen = default_features(loaded, quiet=True)
    if chosen.fallback:
        print(f"warning: exporting {chosen.why}", file=sys.stderr)
    return chosen.fitted
