"""matplotlib Figures (no display) of the covariance spectrum, KL per dimension and active
units, for `vat geometry --plot-dir` and the TensorBoard callback."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from vat.geometry.metrics import ACTIVE_UNIT_THRESHOLD
from vat.io import figure_class, save_png


def _vector(values: ArrayLike, name: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0 or not np.isfinite(v).all():
        raise ValueError(f"{name} must be a non-empty array of finite numbers")
    return v


def _axes():
    fig = figure_class()(figsize=(6, 4), dpi=100)
    return fig, fig.add_subplot()


def spectrum_figure(eigenvalues: ArrayLike, title: str = "covariance spectrum"):
    """Covariance eigenvalues and their cumulative share: how many directions are used."""
    lam = np.sort(np.clip(_vector(eigenvalues, "eigenvalues"), 0.0, None))[::-1]
    fig, ax = _axes()
    k = np.arange(1, len(lam) + 1)
    floor = lam[lam > 0].min() if (lam > 0).any() else 1e-12
    ax.semilogy(k, np.maximum(lam, floor * 1e-3), marker=".", color="tab:blue")
    ax.set_xlabel("principal component")
    ax.set_ylabel("variance (eigenvalue)", color="tab:blue")
    share = np.cumsum(lam) / lam.sum() if lam.sum() > 0 else np.zeros_like(lam)
    ax2 = ax.twinx()
    ax2.plot(k, share, color="tab:orange")
    ax2.set_ylim(0, 1.02)
    ax2.set_ylabel("cumulative share of variance", color="tab:orange")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def kl_per_dimension_figure(kl_per_dim: ArrayLike, title: str = "KL per latent dimension"):
    """Bars of the mean KL (nats per token) of each latent dimension, sorted, and their sum."""
    kl = _vector(kl_per_dim, "kl_per_dim")
    order = np.argsort(kl)[::-1]
    fig, ax = _axes()
    ax.bar(np.arange(len(kl)), kl[order], width=1.0, color="tab:green")
    ax.set_xlabel("latent dimension (sorted by KL)")
    ax.set_ylabel("KL (nats per token)")
    ax.set_title(f"{title}: total {kl.sum():.3g} nats")
    fig.tight_layout()
    return fig


def active_units_figure(
    variances: ArrayLike, threshold: float = ACTIVE_UNIT_THRESHOLD, title: str = "active units"
):
    """Var over tokens of mu per dimension (sorted, log axis) against the 0.01 threshold."""
    var = np.sort(_vector(variances, "variances"))[::-1]
    active = int((var > threshold).sum())
    fig, ax = _axes()
    colors = np.where(var > threshold, "tab:blue", "tab:gray")
    ax.bar(np.arange(len(var)), np.maximum(var, 1e-12), width=1.0, color=colors)
    ax.set_yscale("log")
    ax.axhline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:g}")
    ax.set_xlabel("latent dimension (sorted by variance of mu)")
    ax.set_ylabel("Var_x(mu_u)")
    ax.set_title(f"{title}: {active} of {len(var)}")
    ax.legend()
    fig.tight_layout()
    return fig


def geometry_figures(
    eigenvalues: ArrayLike, kl_per_dim: ArrayLike | None = None, variances: ArrayLike | None = None
) -> dict:
    """{name: Figure}: `spectrum` always, `kl_per_dim` and `active_units` when given."""
    figures = {"spectrum": spectrum_figure(eigenvalues)}
    if kl_per_dim is not None:
        figures["kl_per_dim"] = kl_per_dimension_figure(kl_per_dim)
    if variances is not None:
        figures["active_units"] = active_units_figure(variances)
    return figures


def save_geometry_plots(
    directory: str | os.PathLike,
    eigenvalues: ArrayLike,
    kl_per_dim: ArrayLike | None = None,
    variances: ArrayLike | None = None,
) -> list[Path]:
    """`geometry_figures` as DIR/<name>.png; returns the paths written."""
    out = Path(directory)
    return [
        save_png(fig, out / f"{name}.png")
        for name, fig in geometry_figures(eigenvalues, kl_per_dim, variances).items()
    ]


def figure_to_array(fig) -> np.ndarray:
    """(H, W, 3) uint8 RGB pixels of a figure (what TensorBoard's add_image takes, HWC)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
