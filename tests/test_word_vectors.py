"""Bags of word vectors (vat/eval/word_vectors.py): reading, SIF and mean by hand, one-line
errors, `vat evaluate --word-vectors` and `vat baseline word-vectors` end to end."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from eval_helpers import write_mini_senteval

from vat.cli import main as vat_main
from vat.eval.word_vectors import (
    embed,
    read_word_counts,
    read_word_vectors,
    sif_weights,
    tokenize,
)

ROOT = Path(__file__).resolve().parents[1]
VECTORS = "a 1 0\nb 0 2\nc 3 3\n"  # GloVe layout: no header
COUNTS = "a\t1\nb 3\nz\t996\n"  # total 1000: p(a) = 0.001, p(b) = 0.003, c has no count


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> Path:
    return write_mini_senteval(tmp_path_factory.mktemp("senteval"))


def _file(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _vat(argv: list[str], capsys) -> tuple[int, str, str]:
    code = vat_main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tokenize_lowercases_words_and_splits_punctuation():
    assert tokenize("The cat's  NAP, café!") == ["the", "cat", "'", "s", "nap", ",", "café", "!"]


@pytest.mark.parametrize(
    "name, text",
    [
        ("glove.txt", VECTORS),
        ("w2v.txt", "3 2\n" + VECTORS),
        ("w2v.txt.gz", "3 2\n" + VECTORS),
        ("glove.txt.gz", VECTORS),
        ("crlf.txt", "\ufeff" + VECTORS.replace("\n", "\r\n")),
    ],
)
def test_read_word_vectors_header_or_not_plain_or_gz(tmp_path, name, text):
    words = read_word_vectors(_file(tmp_path / name, text))
    assert words.index == {"a": 0, "b": 1, "c": 2}
    assert words.vectors.dtype == np.float32
    np.testing.assert_array_equal(words.vectors, [[1, 0], [0, 2], [3, 3]])


def test_repeated_and_spaced_words_are_skipped_as_the_header_counts_them(tmp_path):
    text = "5 2\na 1 0\nb 0 2\na 9 9\n. . . 4 4\nc 3 3\n"
    words = read_word_vectors(_file(tmp_path / "v.txt", text))
    assert words.index == {"a": 0, "b": 1, "c": 2}  # the first "a" kept
    np.testing.assert_array_equal(words.vectors[0], [1, 0])


def test_sif_weights_and_sentence_vectors_by_hand(tmp_path):
    words = read_word_vectors(_file(tmp_path / "v.txt", VECTORS))
    counts = read_word_counts(_file(tmp_path / "c.txt", COUNTS))
    assert counts == {"a": 1, "b": 3, "z": 996}
    w = sif_weights(words.index, counts)
    # a / (a + p): 1e-3 / (1e-3 + 1e-3), 1e-3 / (1e-3 + 3e-3), no count -> p = 0 -> 1
    np.testing.assert_allclose(w, [0.5, 0.25, 1.0], rtol=1e-6)
    sentences = ["A b, Q", "a A c", "unknown words only", ""]
    sif = embed(sentences, words, w)
    # (0.5 * [1, 0] + 0.25 * [0, 2]) / 2 known tokens; (2 * 0.5 * [1, 0] + [3, 3]) / 3
    np.testing.assert_allclose(sif, [[0.25, 0.25], [4 / 3, 1], [0, 0], [0, 0]], rtol=1e-6)
    mean = embed(sentences, words)  # SentEval's bow: the plain mean
    np.testing.assert_allclose(mean, [[0.5, 1], [5 / 3, 1], [0, 0], [0, 0]], rtol=1e-6)
    assert sif.dtype == mean.dtype == np.float32 and sif.shape == (4, 2)


BAD_VECTORS = [
    ("empty.txt", "", "holds no vectors"),
    ("header_only.txt", "0 2\n", "holds no vectors (only a header)"),
    ("ragged.txt", "a 1 0\nb 0 2\nc 3\n", "line 3 has 1 value(s), expected 2 (as the first vector"),
    ("long.txt", "a 1 0\nb 0 2 5\n", "line 2 has 3 value(s), expected 2"),
    ("dims.txt", "2 3\na 1 0\nb 0 2\n", "line 2 has 2 value(s), expected 3 (as the header has)"),
    ("rows.txt", "4 2\na 1 0\nb 0 2\n", "the header says 4 vectors, the file has 2"),
    ("text.txt", "a 1 0\nb 0 x\n", "line 2 has a value that is not a number"),
    ("nan.txt", "a 1 0\nb nan 1\n", "line 2 has a value that is NaN or infinite"),
    ("corrupt.txt.gz", None, "is a truncated or corrupt gzip file"),
]


@pytest.mark.parametrize("name, text, message", BAD_VECTORS)
def test_bad_vector_files_are_one_line_naming_the_file(tmp_path, mini, capsys, name, text, message):
    path = tmp_path / name
    if text is None:
        path.write_bytes(gzip.compress(b"a 1 0\n" * 50)[:-12])
    else:
        _file(path, text)
    argv = ["evaluate", "--word-vectors", str(path), "--tasks", "STS12", "--data-dir", str(mini)]
    code, _, err = _vat([*argv, "--no-progress"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: --word-vectors {path}")
    assert message in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--word-vectors", "{missing}"], "--word-vectors {missing}: no such file"),
        (["--word-vectors", "{v}", "--word-counts", "{missing}"], "--word-counts {missing}: no"),
        (["--word-vectors", "{v}", "--word-counts", "{bad}"], "line 2 is not `word count` with"),
        (["--word-vectors", "{v}", "--word-counts", "{zero}"], "every count is 0"),
        (["--word-counts", "{c}", "--hf-model", "x"], "--word-counts needs --word-vectors"),
        (["--word-vectors", "{v}", "--pooling", "cls"], "--pooling does not apply"),
    ],
)
def test_bad_counts_and_options_are_one_line(tmp_path, mini, capsys, args, message):
    files = {
        "missing": tmp_path / "missing.txt",
        "v": _file(tmp_path / "v.txt", VECTORS),
        "c": _file(tmp_path / "c.txt", COUNTS),
        "bad": _file(tmp_path / "bad.txt", "a 1\nb 2.5\n"),
        "zero": _file(tmp_path / "zero.txt", "a 0\n"),
    }
    argv = [a.format(**files) for a in args]
    code, _, err = _vat(
        ["evaluate", *argv, "--tasks", "STS12", "--data-dir", str(mini), "--no-progress"], capsys
    )
    assert code == 2 and err.count("\n") == 1 and message.format(**files) in err


def test_evaluate_word_vectors_on_sts_records_what_ran(tmp_path, mini, capsys):
    # vectors for the mini STS vocabulary (eval_helpers): each word its own direction
    vocab = sorted(
        {t for f in (mini / "STS").rglob("STS.input.*") for t in tokenize(f.read_text())}
    )
    rng = np.random.default_rng(0)
    rows = [f"{w} " + " ".join(f"{x:.4f}" for x in rng.normal(size=6)) for w in vocab]
    vectors = _file(tmp_path / "v.txt.gz", f"{len(rows)} 6\n" + "\n".join(rows) + "\n")
    counts = _file(tmp_path / "c.txt", "".join(f"{w}\t{i + 1}\n" for i, w in enumerate(vocab)))
    runs = {}
    for weighting, extra in (("mean", []), ("sif a=0.001", ["--word-counts", str(counts)])):
        out = tmp_path / f"{weighting.split()[0]}.json"
        argv = ["evaluate", "--word-vectors", str(vectors), *extra, "--tasks", "STS12"]
        code, stdout, _ = _vat(
            [*argv, "--data-dir", str(mini), "--output", str(out), "--no-progress"], capsys
        )
        assert code == 0
        meta = json.loads(out.read_text())["_meta"]
        assert meta["encoder"] == f"word-vectors:{vectors}" and meta["pooling"] == weighting
        assert meta["word_counts"] == (str(counts) if extra else None)
        title = f"word-vectors:{vectors} ({weighting}" + (f", counts {counts})" if extra else ")")
        assert title in stdout.splitlines()
        runs[weighting] = json.loads(out.read_text())["STS12"]["all"]["spearman"]["mean"]
    assert all(np.isfinite(v) for v in runs.values()) and runs["mean"] != runs["sif a=0.001"]


TEXT_A = "The cat sat.\nA dog, the dog!\n" * 15  # 30 lines
TEXT_B = "\nthe CAT sat.\nA dog, the dog!\n" * 15 + "Zebra\n"  # 30 lines, empty ones, a singleton
COUNTED = {"the": 60, "dog": 60, "cat": 30, "sat": 30, ".": 30, "a": 30, ",": 30, "!": 30}


@pytest.mark.parametrize("method", ["word2vec", "fasttext"])
def test_baseline_word_vectors_end_to_end(tmp_path, capsys, method):
    a = _file(tmp_path / "a.txt", TEXT_A)
    b = _file(tmp_path / "b.txt.gz", TEXT_B)
    out = tmp_path / "out"
    argv = ["baseline", "word-vectors", "--train-files", str(a), str(b), "--method", method]
    argv += ["--dim", "8", "--epochs", "1", "--workers", "1", str(out)]
    code, _, err = _vat(argv, capsys)
    assert code == 0, err
    counts = read_word_counts(out / "counts.txt")
    assert counts == {**COUNTED, "zebra": 1}  # every token of the text, the singleton too
    header = (out / "vectors.txt").read_text().splitlines()[0]
    assert header == "8 8"  # zebra is under --min-count 2
    words = read_word_vectors(out / "vectors.txt")
    assert set(words.index) == set(COUNTED) and words.vectors.shape == (8, 8)
    assert np.all(np.isfinite(words.vectors)) and np.any(words.vectors != 0)
    record = json.loads((out / "baseline.json").read_text())
    assert record["method"] == method and record["dim"] == 8 and record["epochs"] == 1
    assert record["lines"] == 61 and record["tokens"] == sum(COUNTED.values()) + 1
    assert record["train_files"] == [
        {"path": str(a), "bytes": a.stat().st_size},
        {"path": str(b), "bytes": b.stat().st_size},
    ]
    assert record["min_count"] == 2 and record["window"] == 5 and record["seed"] == 1
    assert record["gensim"] and record["vocabulary"] == 8 and record["types"] == 9
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    code, _, err = _vat(argv, capsys)  # a second run writes nothing
    assert code == 2 and err.count("\n") == 1 and "already holds vectors.txt" in err
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before


def test_baseline_without_gensim_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "gensim", None)  # `import gensim` raises ImportError
    a = _file(tmp_path / "a.txt", TEXT_A)
    argv = ["baseline", "word-vectors", "--train-files", str(a), "--method", "word2vec"]
    code, _, err = _vat([*argv, "--dim", "8", "--epochs", "1", str(tmp_path / "out")], capsys)
    assert code == 2 and err == (
        "error: vat baseline word-vectors needs gensim: pip install "
        '"variational-auto-transformer[baselines]"\n'
    )
    assert not (tmp_path / "out").exists()


def test_baseline_help_imports_neither_torch_nor_gensim():
    code = (
        "import sys, contextlib, io\n"
        "from vat.cli import main\n"
        "for argv in (['baseline', '--help'], ['baseline', 'word-vectors', '--help']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        main(argv)\n"
        "print(sorted(m for m in ('torch', 'gensim', 'numpy') if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr


def test_baseline_with_no_word_over_min_count_is_one_line(tmp_path, capsys):
    a = _file(tmp_path / "a.txt", "every word once\n")
    argv = ["baseline", "word-vectors", "--train-files", str(a), "--method", "word2vec"]
    code, _, err = _vat([*argv, "--dim", "8", "--epochs", "1", str(tmp_path / "out")], capsys)
    assert code == 2 and err == "error: no word occurs at least min_count=2 times in the text\n"
    assert not (tmp_path / "out" / "vectors.txt").exists()


def test_baseline_never_writes_through_a_linked_out_dir(tmp_path, capsys):
    """OUT_DIR a symbolic link to someone's folder: one line, exit 2, nothing written there."""
    a = _file(tmp_path / "a.txt", TEXT_A)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (tmp_path / "link").symlink_to(theirs)
    argv = ["baseline", "word-vectors", "--train-files", str(a), "--method", "word2vec"]
    code, _, err = _vat([*argv, "--dim", "8", "--epochs", "1", str(tmp_path / "link")], capsys)
    assert code == 2 and err.count("\n") == 1 and "is a symbolic link" in err
    assert not any(theirs.iterdir())
