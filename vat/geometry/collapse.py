"""Posterior-collapse diagnostics of a Gaussian posterior over token latents: active units,
KL per latent dimension and the mutual-information estimate. `mu` and `logvar` are (N, d)
tensors or arrays, one row per token, computed in float64 with torch on the input's device.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from vat.geometry._checks import ArrayLike, as_matrix, need_two

ACTIVE_UNIT_THRESHOLD = 0.01
"""Burda et al. (2016): a latent dimension is active when Var_x(E_q[z | x]) > 0.01."""


def active_unit_variances(mu: ArrayLike) -> np.ndarray:
    """Var over tokens of the posterior mean, per latent dimension: (d,), unbiased (N - 1)."""
    x = as_matrix(mu, "mu")
    need_two(len(x), "tokens (rows of mu)")
    return x.var(dim=0, correction=1).cpu().numpy()


def active_units(mu: ArrayLike, threshold: float = ACTIVE_UNIT_THRESHOLD) -> int:
    """Number of active latent dimensions (Burda, Grosse & Salakhutdinov 2016, IWAE, sec. 5.2).

    A_u = Cov_x(E_{u ~ q(u|x)}[u]); dimension u is active when A_u > threshold (0.01). With a
    Gaussian posterior, E_q[u | x] = mu_u(x), so A_u is the variance of mu_u across tokens.
    """
    return int((active_unit_variances(mu) > threshold).sum())


def _mu_logvar(mu: ArrayLike, logvar: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    m = as_matrix(mu, "mu")
    lv = as_matrix(logvar, "logvar").to(m.device)
    if m.shape != lv.shape:
        raise ValueError(
            f"mu {tuple(m.shape)} and logvar {tuple(lv.shape)} must have the same shape"
        )
    return m, lv


def kl_per_dimension(mu: ArrayLike, logvar: ArrayLike, prior_std: float) -> np.ndarray:
    """Mean over tokens of KL(N(mu, exp(logvar)) || N(0, s^2)) per latent dimension: (d,) nats.

    KL_i = log s - logvar_i / 2 + (exp(logvar_i) + mu_i^2) / (2 s^2) - 1/2 (the paper, eq. 6,
    per dimension; the same closed form as `vat.train.losses.gaussian_kl`). The sum over
    dimensions is the mean KL per token; a dimension near 0 carries no information.
    """
    m, lv = _mu_logvar(mu, logvar)
    if len(m) == 0:
        raise ValueError("need at least 1 token for KL per dimension, got 0")
    if not prior_std > 0:
        raise ValueError(f"prior_std must be > 0, got {prior_std}")
    s2 = float(prior_std) ** 2
    # The KL is linear in logvar, exp(logvar) and mu^2, so average those over tokens first.
    kl = (
        math.log(prior_std)
        - 0.5 * lv.mean(0)
        + (lv.exp().mean(0) + m.square().mean(0)) / (2 * s2)
        - 0.5
    )  # (d,)
    return kl.cpu().numpy()


def mutual_information(
    mu: ArrayLike,
    logvar: ArrayLike,
    batch_size: int = 512,
    max_tokens: int | None = 4096,
    seed: int = 0,
) -> float:
    """Monte-Carlo estimate of I(x; z) under q (He et al. 2019, "Lagging Inference Networks",
    `calc_mi`; also Optimus, Li et al. 2020), in nats, with tokens as the data points x.

    Within a batch of B tokens, with q(z) approximated by the batch aggregate
    q(z) = (1/B) sum_j q(z | x_j) and one sample z_i ~ q(z | x_i) per token:

        I = E_i[ log q(z_i | x_i) ] - E_i[ log q(z_i) ]
        log q(z_i) = logsumexp_j log N(z_i; mu_j, diag(exp(logvar_j))) - log B

    `calc_mi` takes the first term's expectation in closed form, -H(q(z | x_i)); here it is
    taken at the same draw z_i as the second (the same expectation). That makes the
    estimate exact at both ends, where calc_mi's carries sampling noise of about
    sqrt(d / 2 n): 0 for every draw when q(z | x) does not depend on x, and never above
    log B, which it reaches when the posteriors do not overlap (docs/score.md).

    Batches are averaged weighted by size, as in `calc_mi` over a data loader. Tokens are
    shuffled with `seed` (neighbouring tokens of one sentence would share a batch
    otherwise) and at most `max_tokens` are used (None: all), so the estimate is
    deterministic for a given input (the noise is drawn on the CPU, whatever the device).
    It is bounded above by log B: compare values only at the same batch size. Cost O(B d)
    per token.
    """
    m, lv = _mu_logvar(mu, logvar)
    need_two(len(m), "tokens for the mutual-information estimate")
    if batch_size < 2:
        raise ValueError(f"batch_size must be >= 2, got {batch_size}")
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(m), generator=gen)
    if max_tokens is not None:
        order = order[: max(2, max_tokens)]
    total, count = 0.0, 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        if len(idx) < 2 and count:
            break  # a 1-token tail has I = 0 by construction; skip it rather than bias the mean
        eps = torch.randn(len(idx), m.shape[1], generator=gen, dtype=m.dtype).to(m.device)  # (B, d)
        idx = idx.to(m.device)
        total += _batch_mi(m[idx], lv[idx], eps) * len(idx)
        count += len(idx)
    return float(total / count)


def _batch_mi(mu: torch.Tensor, logvar: torch.Tensor, eps: torch.Tensor) -> float:
    B, d = mu.shape
    # log q(z_i | x_i) at the draw: (z_i - mu_i)^2 / var_i = eps_i^2 exactly
    log_q_own = -0.5 * (d * math.log(2 * math.pi) + logvar.sum(-1) + eps.square().sum(-1))  # (B,)
    z = mu + torch.exp(0.5 * logvar) * eps  # (B, d)
    inv_var = torch.exp(-logvar)  # (B, d)
    # sum_k (z_ik - mu_jk)^2 / var_jk, expanded so that it is three (B, d) x (d, B) products.
    sq = (
        z.square() @ inv_var.T - 2 * z @ (mu * inv_var).T + (mu.square() * inv_var).sum(-1)[None, :]
    )  # (B_z, B_x)
    log_density = (
        -0.5 * sq - 0.5 * (d * math.log(2 * math.pi) + logvar.sum(-1))[None, :]
    )  # (B_z, B_x)
    log_qz = torch.logsumexp(log_density, dim=1) - math.log(B)  # (B_z,)
    return float((log_q_own - log_qz).mean())
