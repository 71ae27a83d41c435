"""The likelihood columns of `vat score` against closed forms (vat.score.likelihood).

- the densities and the KL against torch.distributions;
- a VAT whose decoder ignores z, with q = p: the IW bound equals the ELBO for every K, and
  both equal the decoder's exact NLL;
- a one-token toy with a 2-D latent and a 5-word vocabulary, whose log p(x) is integrated
  numerically on a grid: L_K approaches it from below as K grows, and L_1 is the ELBO in
  expectation;
- Jensen on every sentence (L_K >= the same draws' mean log weight), K = 100 at least as
  tight as K = 10 on a trained model, and passes of any size give the same bounds.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_config

from vat.model import VAT
from vat.score.likelihood import (
    closed_form_kl,
    decoder_log_likelihood,
    importance_weighted_bounds,
    log_importance_weights,
    model_bounds,
    prior_log_density,
    samples_per_pass,
)
from vat.tokenizer import make_batch
from vat.train.losses import reconstruction_nll


def test_prior_density_and_kl_match_torch_distributions():
    g = torch.Generator().manual_seed(0)
    z, mu = torch.randn(7, 3, 5, generator=g).double(), torch.randn(3, 5, generator=g).double()
    logvar = torch.randn(3, 5, generator=g).double()
    q = torch.distributions.Normal(mu, torch.exp(0.5 * logvar))
    p = torch.distributions.Normal(torch.zeros(5).double(), 0.4)
    torch.testing.assert_close(prior_log_density(z, 0.4), p.log_prob(z).sum(-1))
    mask = torch.tensor([True, True, False])
    kl = torch.distributions.kl_divergence(q, p).sum(-1)  # (3,)
    torch.testing.assert_close(
        closed_form_kl(mu[None], logvar[None], mask[None], 0.4)[0], kl[:2].sum()
    )


def test_log_weights_are_the_log_likelihood_when_q_is_the_prior():
    g = torch.Generator().manual_seed(1)
    s = 0.4
    eps = torch.randn(6, 2, 4, 3, generator=g).double()
    mu = torch.zeros(2, 4, 3).double()
    logvar = torch.full((2, 4, 3), 2 * math.log(s), dtype=torch.float64)
    log_px = torch.randn(6, 2, generator=g).double()
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    w = log_importance_weights(log_px, eps, mu, logvar, mask, s)
    torch.testing.assert_close(w, log_px, atol=1e-12, rtol=0)


# -- a VAT whose decoder ignores z, with q = p ----------------------------------------------------
def _ignoring_model(vocab_size: int, s: float) -> VAT:
    """A VAT whose cross-attention adds nothing (so p(x|z) does not depend on z) and whose
    posterior is the prior N(0, s^2 I) for every token."""
    torch.manual_seed(2)
    model = VAT(tiny_config(vocab_size)).eval()
    with torch.no_grad():
        for layer in model.decoder:
            layer.cross_attn.out_proj.weight.zero_()
            layer.cross_attn.out_proj.bias.zero_()
        model.mu_head.weight.zero_()
        model.mu_head.bias.zero_()
        model.logvar_head.weight.zero_()
        model.logvar_head.bias.fill_(2 * math.log(s))
    return model


def test_iw_bound_equals_elbo_and_exact_nll_when_the_decoder_ignores_z(
    tiny_tokenizer, tiny_sentences
):
    s = 0.4
    model = _ignoring_model(tiny_tokenizer.vocab_size, s)
    batch = make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:6]))
    with torch.no_grad():  # the exact NLL: the decoder on any z (here 0), teacher-forced
        post = model.encode(batch["src"])
        logits = model.decode(batch["tgt_in"], torch.zeros_like(post.mu), post.mask)
        exact = reconstruction_nll(logits, batch["tgt_out"], post.mask).sum(-1).double()  # (B,)
    for K in (1, 7, 50):
        b = model_bounds(model, batch, s, K, torch.Generator().manual_seed(K))
        torch.testing.assert_close(-b.log_likelihood, exact, atol=1e-4, rtol=0)
        torch.testing.assert_close(-b.reconstruction, exact, atol=1e-4, rtol=0)
        torch.testing.assert_close(b.kl, torch.zeros_like(b.kl), atol=1e-9, rtol=0)
        torch.testing.assert_close(b.mean_log_weight, b.log_likelihood, atol=1e-9, rtol=0)
    assert b.tokens.tolist() == [
        len(x) + 1 for x in tiny_tokenizer.encode_batch(tiny_sentences[:6])
    ]


def test_decoder_log_likelihood_is_the_training_nll(tiny_ckpt, tiny_tokenizer, tiny_sentences):
    from vat.share.resolve import load_model

    model = load_model(tiny_ckpt, "cpu").model
    batch = make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:5]))
    with torch.no_grad():
        post = model.encode(batch["src"])
        z = torch.randn(3, *post.mu.shape, generator=torch.Generator().manual_seed(0))
        ll = decoder_log_likelihood(model, batch["tgt_in"], batch["tgt_out"], post.mask)
        got = ll(z.flatten(0, 1)).view(3, -1)  # rows draw-major
        for k in range(3):
            logits = model.decode(batch["tgt_in"], z[k], post.mask)
            want = -reconstruction_nll(logits, batch["tgt_out"], post.mask).sum(-1)
            torch.testing.assert_close(got[k], want, atol=1e-4, rtol=1e-5)


# -- a one-token toy whose log p(x) is a 2-D integral ---------------------------------------------
S = 0.8
G = torch.Generator().manual_seed(0)
W = torch.randn(5, 2, generator=G, dtype=torch.float64) * 3  # z matters: log p(x|z) spans 70 nats
BIAS = torch.randn(5, generator=G, dtype=torch.float64)
WORD = 2
MU = torch.tensor([[[0.5, -0.3]]])  # q(z|x), not the prior
LOGVAR = torch.tensor([[[-0.5, 0.2]]])
MASK = torch.ones(1, 1, dtype=torch.bool)


def _toy_log_likelihood(z: torch.Tensor) -> torch.Tensor:  # (N, 1, 2) -> (N,)
    return torch.log_softmax(z[:, 0].double() @ W.T + BIAS, -1)[:, WORD]


@pytest.fixture(scope="module")
def toy_exact() -> tuple[float, float]:
    """log p(x) and the ELBO by quadrature on a 1,201^2 grid over +-8 s (the prior's mass
    outside is below 1e-14)."""
    g = torch.linspace(-8 * S, 8 * S, 1201, dtype=torch.float64)
    h = float(g[1] - g[0])
    z = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 1, 2)  # (G^2, 1, 2)
    lp = _toy_log_likelihood(z)
    log_px = float(torch.logsumexp(lp + prior_log_density(z[:, 0], S), 0)) + 2 * math.log(h)
    q = torch.distributions.Normal(MU[0, 0].double(), torch.exp(0.5 * LOGVAR[0, 0].double()))
    q = q.log_prob(z[:, 0]).sum(-1).exp()
    expected_ll = float((q * lp).sum()) * h * h
    kl = float(closed_form_kl(MU.double(), LOGVAR.double(), MASK, S))
    return log_px, expected_ll - kl


def _toy_bound(K: int, seed: int):
    return importance_weighted_bounds(
        _toy_log_likelihood, MU, LOGVAR, MASK, S, K, 8192, torch.Generator().manual_seed(seed)
    )


def test_iw_bound_approaches_the_integrated_log_likelihood_from_below(toy_exact):
    log_px, elbo = toy_exact
    assert elbo < log_px - 4  # a loose ELBO: there is a gap for K to close
    means = [
        sum(float(_toy_bound(K, seed).log_likelihood) for seed in range(20)) / 20
        for K in (1, 10, 100)
    ]
    assert means[0] < means[1] < means[2] < log_px + 0.05  # Burda et al., Theorem 1
    big = float(_toy_bound(200_000, 0).log_likelihood)
    assert big == pytest.approx(log_px, abs=0.02)  # measured sd at K = 1e5: 0.005


def test_one_sample_is_the_elbo_in_expectation(toy_exact):
    _, elbo = toy_exact
    # mean_log_weight over K draws is the average of K independent one-sample bounds L_1
    # (sd of one L_1: 4.8 nats, so the standard error at 200,000 draws is 0.011)
    b = _toy_bound(200_000, 1)
    assert float(b.mean_log_weight) == pytest.approx(elbo, abs=0.05)
    one = [float(_toy_bound(1, seed).log_likelihood) for seed in range(3)]
    assert one == [float(_toy_bound(1, seed).mean_log_weight) for seed in range(3)]


def test_passes_of_any_size_give_the_same_bound():
    g = torch.Generator().manual_seed(5)
    mu, lv = torch.randn(3, 4, 2, generator=g), torch.randn(3, 4, 2, generator=g)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)

    def ll(z):  # (N, 4, 2) -> (N,)
        return torch.log_softmax(z.double() @ W.T + BIAS, -1)[..., WORD].sum(-1)

    # the same draws in passes of 1, 3 and 12: the running logsumexp is exact
    runs = [
        importance_weighted_bounds(ll, mu, lv, mask, S, 12, n, torch.Generator().manual_seed(9))
        for n in (1, 3, 12)
    ]
    for b in runs[1:]:
        for got, want in zip(b, runs[0]):
            torch.testing.assert_close(got, want, atol=1e-9, rtol=0)
    b = runs[0]
    assert (b.log_likelihood >= b.mean_log_weight - 1e-12).all()  # Jensen
    assert samples_per_pass(64 * 64, 1000) == 8 and samples_per_pass(10**6, 1000) == 1


def test_iw_is_never_above_the_elbo_and_tightens_with_k():
    from vat.share.resolve import load_model

    loaded = load_model("demo-wordnet-d64", "cpu")  # a trained model: z matters
    lines = [
        "He held out his hand.",
        "They said the car would break down and indeed it did.",
        "Give me any peaches you don't want.",
        "The museum opens at nine.",
    ]
    batch = make_batch(loaded.tokenizer.encode_batch(lines))
    s = loaded.prior_std
    nll = {}
    for K in (10, 100):
        b = model_bounds(loaded.model, batch, s, K, torch.Generator().manual_seed(0))
        # Jensen, draw by draw: the IW NLL is never above the same draws' -ELBO
        assert (b.log_likelihood >= b.mean_log_weight - 1e-6).all()
        # and below the closed-form -ELBO on the batch (a gap of about 30 nats a sentence)
        assert -b.log_likelihood.sum() < -(b.reconstruction - b.kl).sum()
        nll[K] = float(-b.log_likelihood.mean())
    assert nll[100] <= nll[10]
