"""The VAT objective (the paper's eq. 5-6) as pure functions: NLL, scaled-prior KL, free bits."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gaussian_kl(
    mu: torch.Tensor, logvar: torch.Tensor, prior_std: float | torch.Tensor
) -> torch.Tensor:
    """KL(N(mu, diag(exp(logvar))) || N(0, s^2 I)) per latent dimension (shape of `mu`)."""
    prior_std = torch.as_tensor(prior_std, dtype=mu.dtype, device=mu.device)
    return (
        torch.log(prior_std)
        - 0.5 * logvar
        + (logvar.exp() + mu.pow(2)) / (2 * prior_std.pow(2))
        - 0.5
    )


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def reconstruction_nll(
    logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-token cross-entropy (B, T) of logits (B, T, V) against targets (B, T); 0 at pads."""
    # rows of V contiguous logits: log-softmax over a strided axis is much slower on CPU
    V = logits.shape[-1]
    nll = F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1), reduction="none")
    return nll.view_as(targets) * mask  # (B, T)


def free_bits_kl(kl_per_dim: torch.Tensor, mask: torch.Tensor, free_bits: float) -> torch.Tensor:
    """KL per token (B, T) with a floor of `free_bits` nats per dimension (Kingma et al. 2016)."""
    if free_bits <= 0:
        return kl_per_dim.sum(-1)  # (B, T)
    m = mask.to(kl_per_dim.dtype)[..., None]  # (B, T, 1)
    dim_mean = (kl_per_dim * m).sum((0, 1)) / m.sum().clamp_min(1.0)  # (d,)
    below = (dim_mean < free_bits)[None, None, :]  # (1, 1, d)
    floored = torch.where(below, torch.full_like(kl_per_dim, free_bits), kl_per_dim)  # (B, T, d)
    return floored.sum(-1)  # (B, T)
