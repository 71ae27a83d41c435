"""vat.geometry.probes: the sentences geometry is measured on, and the one SentEval default."""

from __future__ import annotations

from pathlib import Path

import pytest

from vat.data.paths import SENTEVAL_ENV, default_senteval_dir
from vat.geometry.probes import load_probe_sentences


def test_read_probe_file(tmp_path):
    p = tmp_path / "probe.txt"
    p.write_text("a b c\tthe cat\n\n  the cat \nlast one\n")
    assert load_probe_sentences(p) == ["a b c", "the cat", "last one"]
    assert load_probe_sentences(p, deduplicate=False) == ["a b c", "the cat", "the cat", "last one"]
    assert load_probe_sentences(p, max_sentences=2) == ["a b c", "the cat"]
    (tmp_path / "one.txt").write_text("only\n")
    with pytest.raises(ValueError, match="1 sentence"):
        load_probe_sentences(tmp_path / "one.txt")
    with pytest.raises(FileNotFoundError):
        load_probe_sentences(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError, match="no STS12 files"):
        load_probe_sentences(senteval_dir=tmp_path)
    with pytest.raises(ValueError, match="exactly one"):
        load_probe_sentences()


def test_sts12_probe(senteval_dir):
    # STS12 test: 3,108 pairs = 6,216 sentences, 4,946 distinct.
    assert len(load_probe_sentences(senteval_dir=senteval_dir, deduplicate=False)) == 6216
    assert len(load_probe_sentences(senteval_dir=senteval_dir)) == 4946


def test_one_senteval_variable_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv(SENTEVAL_ENV, str(tmp_path))
    assert default_senteval_dir() == tmp_path
    monkeypatch.delenv(SENTEVAL_ENV)
    assert default_senteval_dir() == Path("..", "shared", "data", "senteval")
