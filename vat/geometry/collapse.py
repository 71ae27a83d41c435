"""Posterior-collapse diagnostics (active units, KL per dimension, mutual information), and
the input checks of every geometry metric: (N, d) float64 on the input's device, or ValueError."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor | Sequence


def as_matrix(vectors: ArrayLike, name: str = "vectors") -> torch.Tensor:
    """(N, d) float64 tensor on the input's device; rejects non-finite input."""
    if isinstance(vectors, torch.Tensor):
        x = vectors.detach().to(torch.float64)
    else:
        x = torch.from_numpy(np.asarray(vectors, dtype=np.float64))
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (N, d) array, got shape {tuple(x.shape)}")
    if x.shape[1] == 0:
        raise ValueError(f"{name} has zero columns (d = 0)")
    if not torch.isfinite(x.sum()):  # one reduction; NaN/inf anywhere makes the sum non-finite
        bad = int((~torch.isfinite(x).all(1)).sum())
        raise ValueError(
            f"{name} contains NaN or infinite values ({bad} rows)"
            if bad
            else f"{name}: values overflow"
        )
    return x


def need_two(n: int, what: str = "tokens") -> None:
    if n < 2:
        raise ValueError(f"need at least 2 {what} for a pairwise similarity, got {n}")


ACTIVE_UNIT_THRESHOLD = 0.01  # Burda et al. (2016): active when Var_x(E_q[z | x]) > 0.01


def active_unit_variances(mu: ArrayLike) -> np.ndarray:
    """Var over tokens of the posterior mean, per latent dimension: (d,), unbiased (N - 1)."""
    x = as_matrix(mu, "mu")
    need_two(len(x), "tokens (rows of mu)")
    return x.var(dim=0, correction=1).cpu().numpy()


def active_units(mu: ArrayLike, threshold: float = ACTIVE_UNIT_THRESHOLD) -> int:
    """Dimensions whose posterior mean varies by more than `threshold` (Burda et al. 2016)."""
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
    """Mean over tokens of KL(N(mu, exp(logvar)) || N(0, s^2)) per latent dimension: (d,) nats
    (the paper's eq. 6 per dimension; its sum is the mean KL per token)."""
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
    """Monte-Carlo I(x; z) in nats over tokens (He et al. 2019's `calc_mi`, q(z) the batch
    aggregate), with log q(z_i | x_i) taken at the same draw z_i, so the estimate is exactly 0
    when q(z | x) ignores x and at most log B (docs/score.md): compare at equal batch sizes.
    Tokens are shuffled with `seed` (and cut to `max_tokens`), so the result is deterministic.
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
