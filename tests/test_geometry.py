"""vat.geometry.metrics and vat.geometry.collapse: closed-form answers, brute-force
cross-checks, and every bad-input error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vat import geometry as g
from vat.geometry import collapse
from vat.train.losses import gaussian_kl


def brute_mean_cos(x: np.ndarray) -> float:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    c = u @ u.T
    n = len(x)
    return float((c.sum() - np.trace(c)) / (n * (n - 1)))


def signed_axes(k: int, d: int) -> np.ndarray:
    """Rows +e_i and -e_i for i < k in R^d: zero mean, equal variance on k axes, none elsewhere."""
    eye = np.eye(d)[:k]
    return np.concatenate([eye, -eye])  # (2k, d)


# -- anisotropy ---------------------------------------------------------------------------
def test_identical_vectors_give_one():
    x = np.tile([[0.3, -1.2, 2.0]], (7, 1))
    assert g.anisotropy(x) == pytest.approx(1.0, abs=1e-12)
    assert g.self_similarity(x, [4] * 7, min_count=2) == pytest.approx(1.0, abs=1e-12)
    assert g.intra_sentence_similarity(x, [0, 0, 0, 1, 1, 1, 1]) == pytest.approx(1.0, abs=1e-12)


def test_orthonormal_set_gives_zero():
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(16, 16)))
    assert g.anisotropy(q) == pytest.approx(0.0, abs=1e-12)
    assert g.anisotropy(np.eye(5) * 3.0) == pytest.approx(0.0, abs=1e-12)  # scale-free


def test_antipodal_pair_gives_minus_one():
    assert g.anisotropy([[1.0, 2.0], [-2.0, -4.0]]) == pytest.approx(-1.0, abs=1e-12)


def test_isotropic_gaussian_cloud_is_about_zero():
    x = np.random.default_rng(1).normal(size=(20000, 64))
    # Exact value concentrates at 0 with sd ~ sqrt(2 / (d N^2)) ~ 1e-5.
    assert abs(g.anisotropy(x)) < 1e-3


def test_shifted_cloud_is_anisotropic():
    # A common mean direction m with ||m||^2 = 4 and unit-variance noise in d = 4 dimensions:
    # E cos ~ ||m||^2 / (||m||^2 + d) = 0.5.
    rng = np.random.default_rng(2)
    x = rng.normal(size=(20000, 4)) + np.array([2.0, 0, 0, 0])
    assert 0.4 < g.anisotropy(x) < 0.6


def test_anisotropy_matches_brute_force_and_accepts_torch():
    x = np.random.default_rng(3).normal(size=(50, 8)) + 0.5
    assert g.anisotropy(x) == pytest.approx(brute_mean_cos(x), abs=1e-12)
    assert g.anisotropy(torch.tensor(x, dtype=torch.float32)) == pytest.approx(
        brute_mean_cos(x), abs=1e-6
    )


# -- self-similarity ----------------------------------------------------------------------
def test_self_similarity_matches_brute_force():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(120, 6)) + rng.normal(size=6)
    ids = rng.integers(0, 9, size=120)
    per_type = g.self_similarity_by_type(x, ids, min_count=5)
    expected = {}
    for w in np.unique(ids):
        rows = x[ids == w]
        if len(rows) >= 5:
            expected[int(w)] = (len(rows), brute_mean_cos(rows))
    assert per_type.keys() == expected.keys()
    for w, (c, v) in expected.items():
        assert per_type[w][0] == c
        assert per_type[w][1] == pytest.approx(v, abs=1e-12)
    assert g.self_similarity(x, ids, min_count=5) == pytest.approx(
        np.mean([v for _, v in expected.values()])
    )


def test_self_similarity_min_count_filters_types():
    # Type 1: 3 identical vectors (1.0); type 2: 2 orthogonal vectors (0.0).
    x = np.array([[1.0, 0], [1, 0], [1, 0], [1, 0], [0, 1]])
    ids = [1, 1, 1, 2, 2]
    assert g.self_similarity(x, ids, min_count=2) == pytest.approx(0.5)
    assert g.self_similarity(x, ids, min_count=3) == pytest.approx(1.0)
    assert g.self_similarity_by_type(x, ids, min_count=3) == {1: (3, pytest.approx(1.0))}


def test_self_similarity_across_sentences_only_matches_brute_force():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(90, 5)) + 1.0
    ids = rng.integers(0, 4, size=90)
    sent = rng.integers(0, 12, size=90)
    per_type = g.self_similarity_by_type(x, ids, min_count=2, sentence_ids=sent)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    for w, (c, v) in per_type.items():
        rows = np.flatnonzero(ids == w)
        pairs = [(i, j) for i in rows for j in rows if i != j and sent[i] != sent[j]]
        assert c == len(rows)
        assert v == pytest.approx(np.mean([u[i] @ u[j] for i, j in pairs]), abs=1e-12)


def test_self_similarity_across_sentences_drops_single_sentence_types():
    x = np.array([[1.0, 0], [0, 1], [1, 1], [1, 0], [1, 0]])
    ids = [7, 7, 7, 8, 8]
    sent = [0, 0, 0, 0, 1]  # type 7 occurs in one sentence only
    assert g.self_similarity_by_type(x, ids, 2, sent) == {8: (2, pytest.approx(1.0))}
    with pytest.raises(ValueError, match="different sentences"):
        g.self_similarity(x[:3], ids[:3], 2, sent[:3])


# -- intra-sentence similarity ------------------------------------------------------------
def test_two_sentence_hand_built_case():
    # Sentence 0: e1, e2 -> mean (e1 + e2)/2, each token at cos 1/sqrt(2).
    # Sentence 1: e1, 2 e1, 3 e1 -> all tokens along the mean, cos 1.
    x = np.array([[1.0, 0], [0, 1], [1, 0], [2, 0], [3, 0]])
    sent = [0, 0, 1, 1, 1]
    expected = (1 / math.sqrt(2) + 1) / 2
    assert g.intra_sentence_similarity(x, sent) == pytest.approx(expected, abs=1e-12)
    # Unit vectors e1, e2, e1, e1, e1: ||sum||^2 = 4^2 + 1 = 17, so (17 - 5) / (5 * 4) = 0.6.
    assert g.anisotropy(x) == pytest.approx(0.6, abs=1e-12)
    report = g.geometry_report(x, [1, 2, 1, 1, 1], sent, min_count=2)
    assert report.intra_sentence_similarity_adjusted == pytest.approx(expected - 0.6, abs=1e-12)
    assert report.self_similarity == pytest.approx(1.0)  # type 1 is always along e1
    assert report.self_similarity_adjusted == pytest.approx(0.4)


def test_intra_sentence_similarity_matches_brute_force_and_is_unweighted():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(40, 7))
    sent = np.repeat([3, 9, 1, 4], [2, 5, 13, 20])  # ids need not be contiguous or sorted
    per_sentence = g.intra_sentence_similarity_by_sentence(x, sent)
    for s, v in per_sentence.items():
        rows = x[sent == s]
        m = rows.mean(0)
        cos = rows @ m / (np.linalg.norm(rows, axis=1) * np.linalg.norm(m))
        assert v == pytest.approx(cos.mean(), abs=1e-12)
    assert g.intra_sentence_similarity(x, sent) == pytest.approx(
        np.mean(list(per_sentence.values()))
    )


# -- IsoScore and effective rank ----------------------------------------------------------
def test_isoscore_of_isotropic_cloud_is_about_one():
    x = np.random.default_rng(7).normal(size=(50000, 16))
    assert g.isoscore(x) > 0.99


@pytest.mark.parametrize("k,d", [(1, 8), (2, 8), (4, 8), (8, 8), (3, 5)])
def test_isoscore_and_effective_rank_of_k_equal_axes(k, d):
    # Equal variance on k of d axes: IsoScore = (k - 1)/(d - 1) (Rudman et al. 2022), erank = k.
    x = signed_axes(k, d)
    assert g.isoscore(x) == pytest.approx((k - 1) / (d - 1), abs=1e-9)
    assert g.effective_rank(x) == pytest.approx(k, abs=1e-9)


def test_isoscore_is_rotation_and_scale_invariant():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(500, 6)) * np.array([3, 2, 1, 1, 0.5, 0.1])
    q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    assert g.isoscore(7.0 * x @ q + 5.0) == pytest.approx(g.isoscore(x), abs=1e-9)


@pytest.mark.parametrize(
    "spectrum,expected",
    [
        ([1, 1, 1, 1], 4.0),
        ([5, 0, 0], 1.0),
        ([2, 1, 1], 2**1.5),
        ([3, 1], math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))),
    ],
)
def test_effective_rank_of_known_spectra(spectrum, expected):
    assert g.spectrum_effective_rank(spectrum) == pytest.approx(expected, abs=1e-12)


# -- posterior-collapse diagnostics -------------------------------------------------------
def test_active_units_on_constructed_data():
    n = 1000
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)  # mean 0; var(ddof=1) of a*sign = a^2 n/(n-1)

    def column(var: float) -> np.ndarray:
        return sign * math.sqrt(var * (n - 1) / n)

    mu = np.stack(
        [column(1.0), np.full(n, 3.0), column(0.005), column(0.02), column(0.0099)], axis=1
    )
    np.testing.assert_allclose(
        collapse.active_unit_variances(mu), [1.0, 0.0, 0.005, 0.02, 0.0099], atol=1e-12
    )
    assert collapse.active_units(mu) == 2  # dims 0 and 3 exceed 0.01
    assert collapse.active_units(mu, threshold=0.001) == 4


def test_kl_per_dimension_closed_form_and_matches_losses():
    s = 0.4
    mu = np.array([[0.0, s, 0.0], [0.0, s, 0.0]])
    logvar = np.array(
        [[2 * math.log(s)] * 3, [2 * math.log(s), 2 * math.log(s), 2 * math.log(s) + 1.0]]
    )
    kl = collapse.kl_per_dimension(mu, logvar, s)
    # dim 0: q = p -> 0; dim 1: mu^2 / (2 s^2) = 1/2; dim 2: token 2 has exp(1) times the
    # prior variance -> (e - 1 - 1)/2 per that token, averaged with 0.
    np.testing.assert_allclose(kl, [0.0, 0.5, (math.e - 2) / 4], atol=1e-12)
    rng = np.random.default_rng(9)
    mu, lv = rng.normal(size=(30, 4)), rng.normal(size=(30, 4))
    ref = gaussian_kl(torch.tensor(mu), torch.tensor(lv), s).mean(0).numpy()
    np.testing.assert_allclose(collapse.kl_per_dimension(mu, lv, s), ref, atol=1e-12)


def test_mutual_information_limits():
    rng = np.random.default_rng(10)
    n, d = 4096, 4
    # Collapse: every token has the same posterior, q(z) = q(z|x), so I = 0 for every draw.
    lv = rng.normal(size=d) - 1
    same = collapse.mutual_information(
        np.tile(rng.normal(size=d), (n, 1)), np.tile(lv, (n, 1)), batch_size=512, max_tokens=None
    )
    assert same == pytest.approx(0.0, abs=1e-9)
    # Far-apart, sharp posteriors: each z_i is explained by its own token only, I = log B.
    mu = rng.normal(size=(n, d)) * 100
    sharp = collapse.mutual_information(mu, np.full((n, d), -8.0), batch_size=512, max_tokens=None)
    assert sharp == pytest.approx(math.log(512), abs=1e-6)
    # Never above log B (the entropy of the batch index), whatever the posteriors.
    for seed in range(5):
        m, v = rng.normal(size=(300, d)) * 3, rng.normal(size=(300, d))
        assert collapse.mutual_information(m, v, batch_size=100, seed=seed) <= math.log(100) + 1e-9
    # Deterministic for a given seed.
    assert collapse.mutual_information(
        mu, np.full((n, d), -8.0), seed=3
    ) == collapse.mutual_information(mu, np.full((n, d), -8.0), seed=3)


def _calc_mi(mu: torch.Tensor, logvar: torch.Tensor, gen: torch.Generator) -> float:
    """He et al. (2019)'s calc_mi on one batch, as their code writes it: the first term in
    closed form, -H(q(z|x)) = -(d/2) log(2 pi) - (1/2) sum (1 + logvar)."""
    B, d = mu.shape
    neg_entropy = (-0.5 * d * math.log(2 * math.pi) - 0.5 * (1 + logvar).sum(-1)).mean()
    z = mu + torch.exp(0.5 * logvar) * torch.randn(mu.shape, generator=gen, dtype=mu.dtype)
    dev = z[:, None, :] - mu[None, :, :]  # (B_z, B_x, d)
    log_density = (
        -0.5 * (dev.square() / logvar.exp()[None]).sum(-1)
        - 0.5 * (d * math.log(2 * math.pi) + logvar.sum(-1))[None]
    )
    return float(neg_entropy - (torch.logsumexp(log_density, 1) - math.log(B)).mean())


def test_mutual_information_has_calc_mi_expectation():
    # Partly overlapping posteriors: both estimators are noisy here, and agree on average.
    rng = np.random.default_rng(12)
    mu = torch.tensor(rng.normal(size=(256, 3)))
    lv = torch.tensor(rng.normal(size=(256, 3)) * 0.5)
    ours = [collapse.mutual_information(mu, lv, batch_size=256, seed=s) for s in range(200)]
    gen = torch.Generator().manual_seed(0)
    theirs = [_calc_mi(mu, lv, gen) for _ in range(200)]
    # sd of each (measured): 0.070 and 0.071, so the difference of the two means has a
    # standard error of 0.007 (measured difference: 0.006)
    assert np.mean(ours) == pytest.approx(np.mean(theirs), abs=0.03)


# -- the report ---------------------------------------------------------------------------
def test_geometry_report_agrees_with_the_functions():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(300, 8)) + 0.3
    lv = rng.normal(size=(300, 8)) - 1
    ids = rng.integers(0, 20, size=300)
    sent = np.repeat(np.arange(30), 10)
    r = g.geometry_report(torch.tensor(x), ids, sent, logvar=lv, prior_std=0.5, min_count=5)
    assert r.num_tokens == 300 and r.num_sentences == 30 and r.dim == 8
    assert r.anisotropy == pytest.approx(g.anisotropy(x))
    assert r.self_similarity == pytest.approx(g.self_similarity(x, ids, 5))
    assert r.self_similarity_adjusted == pytest.approx(r.self_similarity - r.anisotropy)
    assert r.intra_sentence_similarity == pytest.approx(g.intra_sentence_similarity(x, sent))
    assert r.isoscore == pytest.approx(g.isoscore(x))
    assert r.effective_rank == pytest.approx(g.effective_rank(x))
    assert r.active_units == collapse.active_units(x)
    assert r.kl_per_token == pytest.approx(collapse.kl_per_dimension(x, lv, 0.5).sum())
    assert set(r.scalars()) >= {
        "anisotropy",
        "isoscore",
        "active_units",
        "kl_per_token",
        "mutual_information",
    }
    assert all(math.isfinite(v) for v in r.scalars().values())
    # Without a posterior the collapse diagnostics stay empty.
    r2 = g.geometry_report(x, ids, sent)
    assert (
        r2.active_units is None and r2.kl_per_token is None and "kl_per_token" not in r2.scalars()
    )


# -- bad input ----------------------------------------------------------------------------
def test_mismatched_lengths():
    x = np.ones((4, 3))
    with pytest.raises(ValueError, match="word_ids has 3 entries but vectors has 4 rows"):
        g.self_similarity(x, [1, 1, 1])
    with pytest.raises(ValueError, match="sentence_ids has 5 entries"):
        g.intra_sentence_similarity(x, [0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="token_ids"):
        g.geometry_report(x, [1, 1], [0, 0, 0, 0])
    with pytest.raises(ValueError, match="same shape"):
        collapse.kl_per_dimension(x, np.ones((3, 3)), 0.4)


def test_zero_vectors():
    x = np.array([[1.0, 0], [0, 0], [0, 1]])
    for call in (
        lambda: g.anisotropy(x),
        lambda: g.self_similarity(x, [1, 1, 1], 2),
        lambda: g.intra_sentence_similarity(x, [0, 0, 1]),
        lambda: g.geometry_report(x, [1, 1, 1], [0, 0, 1], min_count=2),
    ):
        with pytest.raises(ValueError, match="1 zero vector.*row 1"):
            call()


def test_sentence_whose_mean_is_zero():
    with pytest.raises(ValueError, match="sentence 5: its token vectors sum to zero"):
        g.intra_sentence_similarity([[1.0, 0], [-1.0, 0], [0, 1]], [5, 5, 6])


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_tokens(n):
    x = np.ones((n, 3))
    for call in (
        lambda: g.anisotropy(x),
        lambda: g.self_similarity(x, [1] * n, 2),
        lambda: g.intra_sentence_similarity(x, [0] * n),
        lambda: g.isoscore(x),
        lambda: g.effective_rank(x),
        lambda: collapse.active_units(x),
        lambda: g.geometry_report(x, [1] * n, [0] * n),
    ):
        with pytest.raises(ValueError, match="at least 2"):
            call()


def test_no_type_reaches_min_count():
    x = np.random.default_rng(12).normal(size=(10, 3))
    with pytest.raises(
        ValueError, match="no word type occurs at least min_count=5 times.*most frequent type: 4"
    ):
        g.self_similarity(x, [1, 1, 1, 1, 2, 2, 3, 4, 5, 6], min_count=5)
    with pytest.raises(ValueError, match="no word type"):
        g.geometry_report(x, list(range(10)), [0] * 10)
    with pytest.raises(ValueError, match="min_count must be >= 2"):
        g.self_similarity(x, [1] * 10, min_count=1)


def test_malformed_arrays():
    with pytest.raises(ValueError, match="NaN or infinite"):
        g.anisotropy([[1.0, np.nan], [1.0, 2.0]])
    with pytest.raises(ValueError, match="2-D"):
        g.anisotropy([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="integers"):
        g.self_similarity(np.ones((3, 2)), [0.5, 0.5, 0.5], 2)
    with pytest.raises(ValueError, match="zero variance"):
        g.isoscore(np.ones((5, 3)))
    with pytest.raises(ValueError, match="all-zero spectrum"):
        g.effective_rank(np.ones((5, 3)))
    with pytest.raises(ValueError, match="prior_std must be > 0"):
        collapse.kl_per_dimension(np.ones((2, 2)), np.ones((2, 2)), 0.0)
