"""A bag of word vectors as a sentence encoder: the same-data baseline a VAT has to beat. Reads
GloVe/word2vec text vectors and `word count` files, weights words by SIF (Arora et al. 2017,
"A simple but tough-to-beat baseline for sentence embeddings") or not at all (SentEval's bow),
and trains such vectors with gensim (an optional extra) on the same tokens.

Tokens: `re.findall(r"\\w+|[^\\w\\s]", text.lower())`, words and single punctuation marks."""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from vat.data.corpus import iter_files, open_sentence_file
from vat.errors import VatError, check_choice, check_count, check_number, shown_path
from vat.io import atomic_write, regular_file

TOKEN = re.compile(r"\w+|[^\w\s]")
SIF_A = 1e-3  # Arora et al.'s a, the value their paper and the issue's table use
METHODS = ("fasttext", "word2vec")


def tokenize(text: str) -> list[str]:
    """Lowercased words and single punctuation marks (the tokens vectors are trained on)."""
    return TOKEN.findall(text.lower())


class WordVectors(NamedTuple):
    index: dict[str, int]  # word -> row of `vectors`
    vectors: np.ndarray  # (N, D) float32


def _numbered_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """(line number, text without its line end) of a UTF-8 file, plain or .gz."""
    where = f"{what} {shown_path(path)}"
    try:
        with open_sentence_file(regular_file(path, what)) as f:
            for number, raw in enumerate(f, 1):
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise VatError(f"{where}: line {number} is not UTF-8 text") from None
                yield number, text.removeprefix("\ufeff") if number == 1 else text
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise VatError(f"{where} is a truncated or corrupt gzip file ({e})") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _header(fields: list[str]) -> tuple[int, int] | None:
    """word2vec's optional first line "N D"; GloVe files start with a vector."""
    if len(fields) == 2 and all(f.isdigit() for f in fields):
        return int(fields[0]), int(fields[1])
    return None


def read_word_vectors(path: str | os.PathLike, what: str = "word vectors") -> WordVectors:
    """Vectors in word2vec/GloVe text format (header "N D" optional), plain or .gz; a bad file
    is a one-line VatError naming it (and the line). A repeated word keeps its first vector; a
    "word" with spaces in it (a few GloVe 840B rows) is skipped, as no token can match it."""
    path = Path(path)
    where = f"{what} {shown_path(path)}"
    index: dict[str, int] = {}
    rows: list[np.ndarray] = []
    header, dim, read = None, None, 0
    for number, line in _numbered_lines(path, what):
        fields = line.split()
        if number == 1 and (header := _header(fields)) is not None:
            dim = header[1]
            if dim < 1:
                raise VatError(f"{where}: line 1 (the header) says {dim} dimensions")
            continue
        if not fields:
            continue
        if dim is None:  # GloVe: the first vector sets the dimension
            dim = len(fields) - 1
            if dim < 1:
                raise VatError(f"{where}: line {number} has a word and no values")
        read += 1
        if len(fields) > dim + 1 and not _is_number(fields[-dim - 1]):
            continue  # a word with spaces in it: no token can match it
        if len(fields) != dim + 1:
            source = "the header" if header else "the first vector"
            raise VatError(
                f"{where}: line {number} has {len(fields) - 1} value(s), expected {dim} "
                f"(as {source} has)"
            )
        try:
            vector = np.array(fields[1:], dtype=np.float32)  # (D,)
        except ValueError:
            raise VatError(f"{where}: line {number} has a value that is not a number") from None
        if not np.all(np.isfinite(vector)):
            raise VatError(f"{where}: line {number} has a value that is NaN or infinite")
        if fields[0] not in index:
            index[fields[0]] = len(rows)
            rows.append(vector)
    if not rows:
        raise VatError(f"{where} holds no vectors" + (" (only a header)" if header else ""))
    if header is not None and header[0] != read:
        raise VatError(f"{where}: the header says {header[0]} vectors, the file has {read}")
    return WordVectors(index, np.stack(rows))  # (N, D)


def read_word_counts(path: str | os.PathLike, what: str = "word counts") -> dict[str, int]:
    """`word count` lines (tab or space separated), plain or .gz; counts are whole numbers."""
    path = Path(path)
    where = f"{what} {shown_path(path)}"
    counts: dict[str, int] = {}
    for number, line in _numbered_lines(path, what):
        if not line.strip():
            continue
        parts = line.rsplit(None, 1)
        if len(parts) != 2 or not parts[1].isdigit():
            raise VatError(
                f"{where}: line {number} is not `word count` with a whole count: {line[:80]!r}"
            )
        word = parts[0].strip()
        if word in counts:
            raise VatError(f"{where}: line {number} repeats the word {word!r}")
        counts[word] = int(parts[1])
    if not counts:
        raise VatError(f"{where} holds no counts")
    if sum(counts.values()) == 0:
        raise VatError(f"{where}: every count is 0, so no word has a frequency")
    return counts


def sif_weights(index: dict[str, int], counts: dict[str, int], a: float = SIF_A) -> np.ndarray:
    """(N,) a / (a + p(w)) per row of `index`, p(w) = count / total of `counts`; a word with no
    count has p = 0, weight 1 (as in Arora et al.'s code)."""
    check_number(a, "a", low=0, low_open=True)
    total = sum(counts.values())
    p = np.zeros(len(index), dtype=np.float64)  # (N,)
    for word, row in index.items():
        p[row] = counts.get(word, 0) / total
    return (a / (a + p)).astype(np.float32)


def embed(
    sentences: Sequence[str], words: WordVectors, weights: np.ndarray | None = None
) -> np.ndarray:
    """(n, D) mean of the (weighted) vectors of each sentence's known tokens, repeats counted;
    unknown tokens are skipped, a sentence with none is the zero vector."""
    out = np.zeros((len(sentences), words.vectors.shape[1]), dtype=np.float32)  # (n, D)
    for i, text in enumerate(sentences):
        rows = [r for r in map(words.index.get, tokenize(text)) if r is not None]
        if not rows:
            continue
        v = words.vectors[rows]  # (k, D)
        if weights is not None:
            v = v * weights[rows, None]  # (k, D)
        out[i] = v.mean(0)
    return out


def word_vector_encoder(
    vectors: str | os.PathLike,
    counts: str | os.PathLike | None = None,
    a: float = SIF_A,
    *,
    names: tuple[str, str] = ("word vectors", "word counts"),
) -> Callable[[list[str]], np.ndarray]:
    """The harness encoder of a vectors file: SIF-weighted with a counts file, else the mean;
    its `.weighting` says which ("sif a=0.001" or "mean"). Errors call the files `names`."""
    words = read_word_vectors(vectors, names[0])
    weights = None
    if counts is not None:
        weights = sif_weights(words.index, read_word_counts(counts, names[1]), a)

    def encode(sentences: list[str]) -> np.ndarray:
        return embed(sentences, words, weights)

    encode.__name__ = f"word-vectors[{Path(vectors).name}]"
    encode.weighting = "mean" if counts is None else f"sif a={a:g}"  # type: ignore[attr-defined]
    return encode


def word_vector_baselines(
    pairs: Sequence[tuple[str | os.PathLike, str | os.PathLike | None]],
    names: tuple[str, str] = ("--word-vectors", "--word-counts"),
) -> list[tuple[str, Callable[[list[str]], np.ndarray]]]:
    """(row name, encoder) per (vectors file, counts file or None): the name says the file
    and its weighting, e.g. `fasttext-300/vectors.txt (sif a=0.001)`."""
    out = []
    for vectors, counts in pairs:
        encode = word_vector_encoder(vectors, counts, names=names)
        label = f"{Path(vectors).parent.name}/{Path(vectors).name}".lstrip("/")
        out.append((f"{label} ({encode.weighting})", encode))  # type: ignore[attr-defined]
    return out


# ---- training same-data vectors (gensim) ----


class TokenLines:
    """The tokens of each non-empty line of text files (plain or .gz), re-read on every pass,
    as gensim iterates its corpus once per epoch (no copy of the corpus in memory)."""

    def __init__(self, paths: Sequence[Path], option: str = "--train-files") -> None:
        self.paths, self.option = list(paths), option

    def __iter__(self) -> Iterator[list[str]]:
        for chunk in iter_files(self.paths, "error", self.option):
            yield from map(tokenize, chunk)


def count_tokens(lines: Iterable[list[str]]) -> tuple[Counter, int]:
    """(count of every token, lines seen)."""
    counts: Counter = Counter()
    n = 0
    for tokens in lines:
        counts.update(tokens)
        n += 1
    return counts, n


class Trained(NamedTuple):
    words: list[str]  # most frequent first
    vectors: np.ndarray  # (N, D) float32
    gensim_version: str


def train_word_vectors(
    corpus: Iterable[list[str]],
    *,
    method: str,
    dim: int,
    epochs: int,
    window: int = 5,
    min_count: int = 2,
    seed: int = 1,
    workers: int = 1,
) -> Trained:
    """Skip-gram (sg=1) fastText or word2vec vectors of a re-iterable token corpus; with
    workers=1 the same corpus and seed give the same vectors."""
    check_choice(method, "method", METHODS)
    for value, name in ((dim, "dim"), (epochs, "epochs"), (window, "window"), (workers, "workers")):
        check_count(value, name)
    check_count(min_count, "min_count")
    try:
        import gensim
        from gensim.models import FastText, Word2Vec
    except ImportError:
        raise VatError(
            'training word vectors needs gensim: pip install "variational-auto-transformer'
            '[baselines]"'
        ) from None
    model_class = FastText if method == "fasttext" else Word2Vec
    model = model_class(
        vector_size=dim, sg=1, window=window, min_count=min_count, seed=seed, workers=workers
    )
    model.build_vocab(corpus_iterable=corpus)
    if not model.wv.index_to_key:
        raise VatError(f"no word occurs at least min_count={min_count} times in the text")
    model.train(corpus_iterable=corpus, total_examples=model.corpus_count, epochs=epochs)
    words = list(model.wv.index_to_key)
    vectors = np.stack([model.wv[w] for w in words]).astype(np.float32)  # (N, D)
    return Trained(words, vectors, gensim.__version__)


def write_word_vectors(path: str | os.PathLike, words: Sequence[str], vectors: np.ndarray) -> None:
    """word2vec text format with its "N D" header, atomically; 9 significant digits give each
    float32 back exactly."""
    n, d = vectors.shape

    def write(f) -> None:
        f.write(f"{n} {d}\n")
        for word, row in zip(words, vectors.tolist()):
            f.write(word + " " + " ".join(f"{x:.9g}" for x in row) + "\n")

    atomic_write(path, write)


def write_word_counts(path: str | os.PathLike, counts: Counter) -> None:
    """`word<TAB>count` lines, most frequent first (ties by word), atomically."""
    ordered = sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))
    atomic_write(path, lambda f: f.writelines(f"{w}\t{c}\n" for w, c in ordered))
