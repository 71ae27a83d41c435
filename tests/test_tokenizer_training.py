"""The data module trains its tokenizer on exactly the first `tokenizer_train_lines` whole
training lines (a regression: the text was once cut after that many characters)."""

from __future__ import annotations

import pytest
from conftest import ASSETS

from vat.data.datamodule import VATDataModule
from vat.tokenizer import VATTokenizer

SENTENCES = ASSETS / "sentences.txt"


@pytest.mark.parametrize("n_lines", [1, 5, 16, 40])
def test_tokenizer_trains_on_the_first_n_whole_lines(tmp_path, monkeypatch, n_lines):
    received: list[list[str]] = []
    real_train = VATTokenizer.train

    def recording_train(texts, *args, **kwargs):
        texts = list(texts)
        received.append(texts)
        return real_train(texts, *args, **kwargs)

    monkeypatch.setattr(VATTokenizer, "train", staticmethod(recording_train))
    dm = VATDataModule(
        train_files=[str(SENTENCES)],
        vocab_size=300,
        tokenizer_train_lines=n_lines,
        max_len=48,
        batch_size=4,
        cache_dir=str(tmp_path / "cache"),
        progress=False,
    )
    dm.prepare_data()

    lines = [s.strip() for s in SENTENCES.read_text().splitlines() if s.strip()]
    assert len(lines) == 16  # 40 asks for more lines than there are: all of them
    assert len(received) == 1  # trained once, on a list of whole sentences
    assert received[0] == lines[:n_lines]
