"""Precision pooling: mu weighted per dimension by exp(-logvar)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vat.eval.encoders import vat_encoder
from vat.features import pool, sentence_features, token_vectors
from vat.share.resolve import load_model

MU = torch.tensor(
    [[[1.0, -2.0], [3.0, 0.5], [9.0, 9.0]], [[0.0, 1.0], [2.0, 2.0], [-1.0, 4.0]]]
)  # (B=2, T=3, d=2)
LOGVAR = torch.tensor(
    [[[0.0, 1.0], [math.log(3.0), -1.0], [-5.0, -5.0]], [[1.0, 0.0], [0.0, 0.0], [2.0, -2.0]]]
)


def test_precision_pooling_by_hand():
    """Row 0 has 2 tokens (its third position is padding, whose tiny variance must not
    count); row 1 has 3."""
    got = pool(MU, torch.tensor([2, 3]), "precision", LOGVAR)
    # row 0, dim 0: precisions 1 and 1/3 -> (1*1 + 3/3) / (1 + 1/3) = 1.5
    # row 0, dim 1: precisions e^-1 and e -> (-2 e^-1 + 0.5 e) / (e^-1 + e)
    e = math.e
    r0 = [1.5, (-2 / e + 0.5 * e) / (1 / e + e)]
    # row 1, dim 0: precisions e^-1, 1, e^-2; dim 1: 1, 1, e^2
    r1 = [(0 / e + 2 + -1 / e**2) / (1 / e + 1 + 1 / e**2), (1 + 2 + 4 * e**2) / (1 + 1 + e**2)]
    np.testing.assert_allclose(got.numpy(), [r0, r1], rtol=1e-6)


def test_precision_pooling_special_cases():
    lengths = torch.tensor([2, 3])
    equal = pool(MU, lengths, "precision", torch.full_like(LOGVAR, 0.7))
    torch.testing.assert_close(equal, pool(MU, lengths, "mean"))  # equal variances: the mean
    sharp = LOGVAR.clone()
    sharp[1, 2] = -300.0  # exp(300) overflows float32; the token simply dominates
    torch.testing.assert_close(pool(MU, lengths, "precision", sharp)[1], MU[1, 2])
    empty = pool(MU, torch.tensor([0, 0]), "precision", LOGVAR)  # empty sentence: its </s>
    torch.testing.assert_close(empty, MU[:, 0])
    with pytest.raises(ValueError, match="logvar"):
        pool(MU, lengths, "precision")


def test_precision_features_of_a_checkpoint_by_hand(tiny_ckpt, tiny_sentences):
    """The encoder path carries logvar to pooling: features equal the hand formula applied
    to each sentence's token posteriors."""
    loaded = load_model(tiny_ckpt)
    sents = tiny_sentences[:5]
    feats = sentence_features(
        loaded.model, loaded.tokenizer, sents, pooling="precision", batch_size=2
    )
    tv = token_vectors(loaded.model, loaded.tokenizer, sents)
    for i in range(len(sents)):
        mu = tv.vectors[tv.sentence_ids == i].astype(np.float64)  # (n_i, d)
        prec = np.exp(-tv.logvar[tv.sentence_ids == i].astype(np.float64))
        np.testing.assert_allclose(feats[i], (mu * prec).sum(0) / prec.sum(0), rtol=1e-4, atol=1e-6)
    assert not np.allclose(feats, vat_encoder(load_model(tiny_ckpt), "mean")(sents))
