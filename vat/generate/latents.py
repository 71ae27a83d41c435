"""Latent maths for generation: pure functions over tensors."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch

from vat.errors import OptionError, VatError
from vat.train.losses import gaussian_kl  # the objective's own closed form

InterpolationMethod = Literal["linear", "slerp"]
ResampleSource = Literal["posterior", "prior"]


def perturb_latents(
    mu: torch.Tensor,
    logvar: torch.Tensor,
    tau: float = 1.0,
    positions: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """z_t = mu_t + tau * sigma_t * eps_t for mu, logvar (..., T, d), where `positions` (..., T)
    is True (default everywhere) and z_t = mu_t elsewhere."""
    eps = torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
    z = mu + tau * torch.exp(0.5 * logvar) * eps
    return z if positions is None else torch.where(positions[..., None], z, mu)  # (..., T, d)


def prior_at_positions(
    mu: torch.Tensor,
    positions: torch.Tensor,
    prior_std: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """z_t ~ N(0, prior_std^2 I) where `positions` (..., T) is True, z_t = mu_t elsewhere."""
    drawn = prior_std * torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
    return torch.where(positions[..., None], drawn, mu)  # (..., T, d)


def token_statistics(
    mu: torch.Tensor, logvar: torch.Tensor, prior_std: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per token of one posterior (T, d): KL to N(0, s^2 I) in nats (eq. 6), mean sigma, |mu_t|."""
    kl = gaussian_kl(mu, logvar, prior_std).sum(-1)  # (T,)
    return kl, torch.exp(0.5 * logvar).mean(-1), mu.norm(dim=-1)


def sample_lengths(
    histogram: Sequence[int], n: int, max_len: int, generator: torch.Generator | None = None
) -> list[int]:
    """n latent lengths T in 1..max_len (</s> included) drawn from histogram[T]."""
    counts = torch.tensor([float(c) for c in histogram[: max_len + 1]], dtype=torch.float64)
    counts[:1] = 0.0  # length 0 is never drawn
    if counts.sum() <= 0:
        raise VatError(
            "the checkpoint has no length histogram to draw prior lengths from; give the "
            "length yourself (vat generate prior --length N; length=N in Python)"
        )
    return torch.multinomial(counts, n, replacement=True, generator=generator).tolist()


def prior_latents(
    lengths: Sequence[int], d_model: int, prior_std: float, generator: torch.Generator | None = None
) -> list[torch.Tensor]:
    """One latent sequence z ~ N(0, prior_std^2 I) of shape (T_i, d) per length T_i."""
    return [prior_std * torch.randn(T, d_model, generator=generator) for T in lengths]


def slerp(a: torch.Tensor, b: torch.Tensor, alpha: float, eps: float = 1e-7) -> torch.Tensor:
    """Spherical interpolation of rows of a, b (..., d) (White 2016); linear where the angle
    is undefined or ~0 (a zero padding vector, parallel vectors)."""
    na, nb = a.norm(dim=-1, keepdim=True), b.norm(dim=-1, keepdim=True)  # (..., 1)
    cos = ((a * b).sum(-1, keepdim=True) / (na * nb).clamp_min(eps)).clamp(-1.0, 1.0)  # (..., 1)
    omega = torch.acos(cos)
    so = torch.sin(omega)
    degenerate = (so < eps) | (na < eps) | (nb < eps)  # (..., 1)
    safe = torch.where(degenerate, torch.ones_like(so), so)
    spherical = torch.sin((1 - alpha) * omega) / safe * a + torch.sin(alpha * omega) / safe * b
    return torch.where(degenerate, (1 - alpha) * a + alpha * b, spherical)


def interpolate_latents(
    z1: torch.Tensor,
    z2: torch.Tensor,
    alphas: Sequence[float],
    method: InterpolationMethod = "linear",
) -> list[torch.Tensor]:
    """One (T_a, d) mix of z1 (T1, d) and z2 (T2, d) per alpha, the shorter zero-padded (the
    prior's mean); T_a = round((1 - a) T1 + a T2), so a = 0 and 1 give exactly the two inputs."""
    if method not in ("linear", "slerp"):
        raise OptionError("method", f"must be linear or slerp, got {method!r}")
    T1, T2 = z1.shape[0], z2.shape[0]
    T = max(T1, T2)
    p1 = torch.cat([z1, z1.new_zeros(T - T1, z1.shape[1])])  # (T, d)
    p2 = torch.cat([z2, z2.new_zeros(T - T2, z2.shape[1])])  # (T, d)
    out = []
    for a in alphas:
        z = (1 - a) * p1 + a * p2 if method == "linear" else slerp(p1, p2, a)  # (T, d)
        T_a = max(1, min(T, math.floor((1 - a) * T1 + a * T2 + 0.5)))
        out.append(z[:T_a])
    return out


def pad_latents(zs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack (T_i, d) latent sequences into z (B, T, d) and mask (B, T), zeros at padding."""
    T = max(z.shape[0] for z in zs)
    z = zs[0].new_zeros(len(zs), T, zs[0].shape[1])  # (B, T, d)
    mask = torch.zeros(len(zs), T, dtype=torch.bool, device=zs[0].device)  # (B, T)
    for i, zi in enumerate(zs):
        z[i, : zi.shape[0]] = zi
        mask[i, : zi.shape[0]] = True
    return z, mask
