"""Alignment and uniformity of sentence features (Wang & Isola 2020) as SimCSE computes them: on
L2-normalised features, over positive STS pairs and all sentences. Lower is better for both."""

from __future__ import annotations

import numpy as np
import torch

POSITIVE_SCORE = 4.0  # SimCSE's positive pairs: STS-B pairs scored 4 or more (of 5)


def _normalized(x: np.ndarray | torch.Tensor, what: str) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x), dtype=torch.float64)
    if t.ndim != 2 or len(t) == 0:
        raise ValueError(f"{what} must be a non-empty (n, d) array, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{what} holds NaN or infinite values")
    return torch.nn.functional.normalize(t, dim=1)  # a zero row stays zero


def alignment(
    a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor, alpha: float = 2
) -> float:
    """E over positive pairs (a_i, b_i) of ||f(a_i) - f(b_i)||^alpha, f = L2-normalised (SimCSE's
    `align_loss`, alpha = 2): 0 when every pair maps to one point, 4 at most."""
    x, y = _normalized(a, "a"), _normalized(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"a {tuple(x.shape)} and b {tuple(y.shape)} must have the same shape")
    return float((x - y).norm(dim=1).pow(alpha).mean())


def uniformity(features: np.ndarray | torch.Tensor, t: float = 2) -> float:
    """log E over pairs i < j of exp(-t ||f(x_i) - f(x_j)||^2), f = L2-normalised (SimCSE's
    `uniform_loss`, t = 2): 0 when every feature is one point, about -4 spread over a sphere."""
    x = _normalized(features, "features")
    if len(x) < 2:
        raise ValueError(f"uniformity needs at least 2 features, got {len(x)}")
    return float(torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log())
