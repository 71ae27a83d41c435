"""The objective's pure functions against closed forms and torch.distributions."""

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from vat.errors import VatError
from vat.train.losses import free_bits_kl, gaussian_kl, masked_mean, reconstruction_nll
from vat.train.schedules import KLSchedule, noam_lr


@pytest.mark.parametrize("s", [0.1, 0.4, 1.0])
def test_kl_matches_torch_distributions(s):
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(3, 5, 16, generator=g, dtype=torch.float64)
    logvar = torch.randn(3, 5, 16, generator=g, dtype=torch.float64)
    ours = gaussian_kl(mu, logvar, s)
    ref = kl_divergence(
        Normal(mu, (0.5 * logvar).exp()), Normal(torch.zeros_like(mu), torch.full_like(mu, s))
    )
    torch.testing.assert_close(ours, ref)


def test_kl_is_zero_at_the_prior():
    s = 0.4
    mu = torch.zeros(2, 3, 8)
    logvar = torch.full((2, 3, 8), 2 * math.log(s))
    assert gaussian_kl(mu, logvar, s).abs().max() < 1e-6


def test_reconstruction_nll_ignores_padding():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 10, generator=g)
    targets = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]])
    mask = targets != 0
    nll = reconstruction_nll(logits, targets, mask)
    assert (nll[~mask] == 0).all()
    # changing logits or targets at pad positions changes nothing
    logits2, targets2 = logits.clone(), targets.clone()
    logits2[~mask] = 100.0
    targets2[~mask] = 7
    torch.testing.assert_close(
        masked_mean(reconstruction_nll(logits2, targets2, mask), mask), masked_mean(nll, mask)
    )
    ref = torch.nn.functional.cross_entropy(logits[mask], targets[mask])
    torch.testing.assert_close(masked_mean(nll, mask), ref)


def test_logistic_schedule_at_known_steps():
    sched = KLSchedule(kind="logistic", warmup_steps=50_000, initial_weight=0.00025)
    assert sched(0) == pytest.approx(0.00025, rel=1e-9)
    assert sched(25_000) == pytest.approx(0.5)
    assert sched(50_000) == pytest.approx(1 - 0.00025, rel=1e-9)
    assert sched(10**9) == pytest.approx(1.0)
    assert KLSchedule(beta=0.5)(25_000) == pytest.approx(0.25)


def test_other_schedules():
    assert KLSchedule(kind="constant", initial_weight=0.1)(12345) == 0.1
    lin = KLSchedule(kind="linear", warmup_steps=100, initial_weight=0.0)
    assert [lin(0), lin(50), lin(100), lin(1000)] == [0.0, 0.5, 1.0, 1.0]
    cyc = KLSchedule(kind="cyclical", cycle_steps=100, cycle_ramp=0.5)
    assert [cyc(0), cyc(25), cyc(50), cyc(99), cyc(100), cyc(125)] == [0.0, 0.5, 1.0, 1.0, 0.0, 0.5]
    with pytest.raises(VatError, match="kind"):
        KLSchedule(kind="sigmoid")


def test_noam_schedule():
    d, w = 128, 4000
    assert noam_lr(w, d, w) == pytest.approx(d**-0.5 * w**-0.5)
    assert noam_lr(w // 2, d, w) == pytest.approx(d**-0.5 * (w // 2) * w**-1.5)
    assert noam_lr(4 * w, d, w) == pytest.approx(d**-0.5 * (4 * w) ** -0.5)
    assert noam_lr(0, d, w) == noam_lr(1, d, w) > 0


def test_free_bits_floor_per_dimension():
    kl = torch.tensor([[[0.1, 2.0], [0.3, 4.0]]])  # (B=1, T=2, d=2): dim 0 mean 0.2, dim 1 mean 3.0
    mask = torch.ones(1, 2, dtype=torch.bool)
    out = free_bits_kl(kl, mask, free_bits=0.5)
    # dim 0 is floored at 0.5 per token, dim 1 keeps its values
    torch.testing.assert_close(out, torch.tensor([[2.5, 4.5]]))
    torch.testing.assert_close(free_bits_kl(kl, mask, 0.0), kl.sum(-1))
    kl.requires_grad_(True)
    free_bits_kl(kl, mask, 0.5).sum().backward()
    assert (kl.grad[..., 0] == 0).all() and (kl.grad[..., 1] == 1).all()
