"""Fitting a feature spec's statistics (SIF weights, post-processing) on unlabeled text: only what
it is given, by default a training checkpoint's counts and fitting sample."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vat.data.corpus import expand_files, iter_files
from vat.errors import OptionError, VatError, check_count
from vat.feature_spec import DEFAULT_SIF_A, FeatureSpec, FittedFeatures
from vat.features.encoder import pooled_ids, tokenize
from vat.features.postprocess import fit_pc_removal, fit_whitening, sif_weights
from vat.model import VAT
from vat.share.loaded import LoadedVAT
from vat.tokenizer import VATTokenizer

DEFAULT_FIT_SENTENCES = 20_000


@dataclass(frozen=True)
class FitOptions:
    """What a fit reads, checked when made: one path is one file, a bare string never sentences."""

    # text files to sample the fitting sentences from (default: a checkpoint's fitting sample)
    fit_files: Sequence[str] | str | os.PathLike | None = None
    fit_sentences: Sequence[str] | None = None  # the fitting sentences themselves (not files)
    # text files to count subwords in for SIF weights (default: the model's recorded counts)
    count_files: Sequence[str] | str | os.PathLike | None = None
    n_fit: int = DEFAULT_FIT_SENTENCES
    seed: int = 0  # the seed of the sample of fit_files
    info: dict = field(default_factory=dict)  # extra facts for the fit's record

    def __post_init__(self) -> None:
        for name in ("fit_files", "count_files", "fit_sentences"):
            check = sentence_list if name == "fit_sentences" else text_files
            object.__setattr__(self, name, check(getattr(self, name), name))
        check_count(self.n_fit, "n_fit", minimum=2)  # a fit needs two rows
        check_count(self.seed, "seed", minimum=0)  # numpy's seeds are non-negative

    @property
    def names_data(self) -> bool:
        """True when files or sentences are named: such a fit is always made anew."""
        return any(x is not None for x in (self.fit_files, self.fit_sentences, self.count_files))


def fit_ids_for(loaded: LoadedVAT, options: FitOptions) -> tuple[list[list[int]], dict]:
    """The sentences a post-processing fit reads, as subword ids, and the fit's record of them:
    `fit_sentences`, else a sample of `fit_files`, else of a checkpoint's fitting sample."""
    info: dict = {"seed": options.seed}
    if options.fit_sentences is not None:
        sentences = list(options.fit_sentences)
    elif options.fit_files:
        info.update({"files": options.fit_files, "from": "named files"})
        sentences = sample_lines(options.fit_files, options.n_fit, options.seed)
    elif loaded.fit_sample is not None:
        info["from"] = "the checkpoint's fitting sample"
        sample = reservoir_sample([loaded.fit_sample], options.n_fit, options.seed)
        return [ids[: loaded.config.max_len - 1] for ids in sample], info
    else:
        if loaded.source.kind == "checkpoint":
            why = "was saved before vat kept a fitting sample in its checkpoints"
        else:  # an export leaves its training text behind: it is the user's, not the model's
            why = "is an exported model, which carries the statistics of its own spec and no text"
        raise OptionError(
            "fit_files",
            f"{loaded.path} {why}; give text files of unlabeled sentences (one per line)",
        )
    return tokenize(loaded.tokenizer, sentences, loaded.config.max_len), info


def text_files(value: object, name: str) -> list[str] | None:
    """`value` as a list of paths (None passes through); one path is one file."""
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        value = [value]
    items = _entries(value, name, "paths of text files")
    out = []
    for i, item in enumerate(items):
        text = os.fspath(item) if isinstance(item, str | os.PathLike) else None
        if not isinstance(text, str) or not text:  # not a path, a PathLike of bytes, or ""
            shown = _kind(item) if text is None else repr(text)
            raise OptionError(name, f"entry {i} is {shown}; expected a path (str)")
        out.append(str(text))  # numpy's str_ is a str subclass: plain str for the records
    if not out:
        raise OptionError(name, "is empty; give at least one text file")
    return out


def sentence_list(value: object, name: str) -> list[str] | None:
    """`value` as a list of at least 2 str (None passes through); a bare string is refused."""
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


def _chunks_of(files: object, name: str) -> Iterator[list[str]]:
    """Chunks of the lines of text files; reading errors are OptionErrors naming `name`."""
    try:
        yield from iter_files(expand_files(text_files(files, name) or [], name), "skip", name)
    except OptionError:
        raise
    except VatError as e:
        raise OptionError(name, str(e).removeprefix(f"{name}: ")) from None


def count_tokens(
    tokenizer: VATTokenizer, files: Sequence[str | os.PathLike] | str | os.PathLike, vocab_size: int
) -> np.ndarray:
    """(vocab_size,) subword counts over text files (one sentence per line, plain or .gz)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for chunk in _chunks_of(files, "count_files"):
        flat = np.fromiter((i for ids in tokenizer.encode_batch(chunk) for i in ids), np.int64)
        counts += np.bincount(flat, minlength=vocab_size)[:vocab_size]
    return counts


def reservoir_sample(chunks: Iterable[Sequence[str]], n: int, seed: int = 0) -> list[str]:
    """Up to n lines drawn uniformly without replacement from a stream of chunks, in stream
    order, holding n lines and one chunk at a time (Vitter's Algorithm R)."""
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
    files: Sequence[str | os.PathLike] | str | os.PathLike, n: int, seed: int = 0
) -> list[str]:
    """Up to n lines drawn uniformly (in file order) from text files, in one pass."""
    check_count(n, "n_fit", minimum=1)
    check_count(seed, "seed", minimum=0)
    return reservoir_sample(_chunks_of(files, "fit_files"), int(n), int(seed))


def check_not_evaluation_data(
    files: Sequence[str],
    data_dir: str | os.PathLike,
    option: str,
    remedy: str = "fitting on the evaluation sentences needs --fit-transductive",
) -> None:
    """Refuse fitting files inside the evaluation data folder: a post-processing fitted on the
    sentences it is scored on would score better than it should."""
    folder = Path(data_dir).resolve()
    for f in expand_files([str(x) for x in files], option):
        if f.resolve().is_relative_to(folder):
            raise VatError(f"{option}: {f} lies in the evaluation data ({data_dir}); {remedy}")


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


def sif_weights_for(
    token_counts: np.ndarray, vocab_size: int, a: float = DEFAULT_SIF_A
) -> np.ndarray:
    """(vocab_size,) SIF weights a / (a + p(w)) from subword counts; ids they lack count 0."""
    counts = np.zeros(vocab_size, dtype=np.float64)
    counts[: min(len(token_counts), len(counts))] = token_counts[: len(counts)]
    return sif_weights(counts, a)


def fit_features(
    model: VAT,
    spec: FeatureSpec,
    ids: Sequence[Sequence[int]] = (),
    token_counts: np.ndarray | None = None,
    batch_size: int = 128,
    info: dict | None = None,
) -> FittedFeatures:
    """Fit what `spec` needs: SIF weights from `token_counts`, post-processing on `ids`."""
    t0 = time.perf_counter()
    arrays: dict[str, np.ndarray] = {}
    if spec.weighting == "sif":  # features_for has the counts or refused, naming count_files
        arrays["sif_weights"] = sif_weights_for(token_counts, model.config.vocab_size, spec.sif_a)
    if spec.post != "none":
        if len(ids) < 2:
            raise VatError(f"fitting {spec} needs at least 2 sentences, got {len(ids)}")
        combo = (spec.source, spec.weighting)
        x = pooled_ids(model, ids, [combo], arrays.get("sif_weights"), batch_size)[combo]
        arrays.update(fit_post(spec, x))
    fit = {
        **(info or {}),
        "sentences": len(ids) if spec.post != "none" else 0,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if "sif_weights" in arrays:
        fit.setdefault("counts_from", "given")  # features_for names its source
    return FittedFeatures(spec, arrays, fit)
