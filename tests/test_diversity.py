"""distinct-n and self-BLEU (vat.score.diversity) against closed forms and the reference
implementations: sacreBLEU's 13a tokenizer (torchmetrics' copy) and NLTK's sentence_bleu
with SmoothingFunction().method1, the setting of Texygen's self-BLEU."""

from __future__ import annotations

import random

import pytest
from nltk.translate.bleu_score import SmoothingFunction
from nltk.translate.bleu_score import sentence_bleu as nltk_sentence_bleu

from vat.score.diversity import distinct_n, self_bleu, sentence_bleu, words

TEXTS = [
    "The cat sat on the mat.",
    "He paid $3.50 for a 2-for-1 deal, didn't he?",
    'She said "hello" & left (quickly) at 10:45.',
    "Prices rose 4,5% in 2019-2020; e-mail me: a@b.com",
    "  spaces   and\ttabs  ",
    "&quot;quoted&quot; &amp; &lt;tag&gt;",
    "",
]


def test_words_are_sacrebleu_13a_tokens():
    from torchmetrics.functional.text.sacre_bleu import _SacreBLEUTokenizer

    for text in TEXTS:
        assert words(text) == _SacreBLEUTokenizer.tokenize(text, "13a"), text


def test_distinct_n_closed_forms():
    assert distinct_n(["a b c", "d e f"], 1) == 1.0
    assert distinct_n(["a b c"] * 4, 1) == pytest.approx(1 / 4)
    assert distinct_n(["a b c"] * 4, 2) == pytest.approx(1 / 4)
    # "a a b": unigrams a, a, b (2 distinct of 3); bigrams (a a), (a b) (2 of 2)
    assert distinct_n(["a a b"], 1) == pytest.approx(2 / 3)
    assert distinct_n(["a a b"], 2) == 1.0
    assert distinct_n(["one"], 2) == 0.0  # no bigram at all
    assert distinct_n(["The end."], 1) == 1.0  # words: The, end, . (13a splits the period)


def test_sentence_bleu_is_nltk_method1():
    rng = random.Random(0)
    vocab = "the a cat dog sat ran on under mat rug quickly . ,".split()
    smooth = SmoothingFunction().method1
    checked = 0
    for _ in range(300):
        hyp = [rng.choice(vocab) for _ in range(rng.randint(1, 12))]
        refs = [
            [rng.choice(vocab) for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 4))
        ]
        want = nltk_sentence_bleu(refs, hyp, smoothing_function=smooth)
        assert sentence_bleu(hyp, refs) == pytest.approx(want, abs=1e-12), (hyp, refs)
        checked += want > 0
    assert checked > 100  # most cases score above 0: the smoothing path is exercised
    assert sentence_bleu([], [["a"]]) == 0.0


def test_self_bleu_closed_forms():
    assert self_bleu(["a cat sat on the mat"] * 3) == pytest.approx(100.0)
    assert self_bleu(["a b c d", "e f g h", "i j k l"]) == 0.0  # no word in common
    with pytest.raises(ValueError, match="at least 2"):
        self_bleu(["only one"])
    # each text against the others, averaged: here two texts, each the other's reference
    a, b = "the cat sat on the mat", "the cat sat on a mat"
    want = (sentence_bleu(words(a), [words(b)]) + sentence_bleu(words(b), [words(a)])) / 2
    assert self_bleu([a, b]) == pytest.approx(100 * want)
