"""Semantic textual similarity as SentEval scores it: cosines, correlations (plus `all`, over all
subsets concatenated, as SimCSE and MTEB report), and the trained relatedness regressor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr

TIE_TOL = 1e-12
"""Cosines closer than this (times max(1, |score|)) tie for Spearman ranking: float64 rounding of
a d-term dot product stays below ~3 d eps64 (1e-12 covers d up to ~3,000)."""


def cosine_scores(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise cosine (N,) of two (N, d) arrays, the same on every machine: SentEval's BLAS dot
    breaks the ties of identical sentences by the OpenBLAS kernel's summation order, which moves
    STS12's Spearman (docs/evaluate.md); float64 products summed by NumPy's fixed-order pairwise
    summation do not. A zero vector scores 0."""
    u = np.nan_to_num(np.asarray(u, dtype=np.float64))
    v = np.nan_to_num(np.asarray(v, dtype=np.float64))
    uv = (u * v).sum(1)  # (N,) elementwise multiply + add.reduce: no BLAS kernel involved
    norms = np.sqrt((u * u).sum(1)) * np.sqrt((v * v).sum(1))  # (N,)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(uv / norms)


def merge_ties(x: np.ndarray, tol: float = TIE_TOL) -> np.ndarray:
    """x with every run of sorted values whose neighbours lie within tol * max(1, |x|) set
    to the run's smallest value, so that rounding noise ranks as a tie (average rank)."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2:
        return x.copy()
    order = np.argsort(x, kind="stable")
    s = x[order]
    close = np.diff(s) <= tol * np.maximum(1.0, np.abs(s[1:]))  # (N-1,) joins i and i+1
    run_start = np.concatenate([[0], np.cumsum(~close)])  # (N,) run id of each sorted value
    first = np.concatenate([[0], np.flatnonzero(~close) + 1])  # (runs,) first index per run
    out = np.empty_like(x)
    out[order] = s[first][run_start]
    return out


def _corr(fn, x: np.ndarray, y: np.ndarray) -> float:
    """scipy correlation as a float; NaN (constant input) stays NaN, without a warning."""
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(fn(x, y)[0])


def correlations(sys: np.ndarray, gold: np.ndarray) -> dict[str, float | int]:
    """{'pearson', 'spearman', 'nsamples'} of system scores against gold; Spearman ranks after
    `merge_ties`, so it is the same on every machine."""
    return {
        "pearson": _corr(pearsonr, sys, gold),
        "spearman": _corr(spearmanr, merge_ties(sys), gold),
        "nsamples": int(len(gold)),
    }


def sts_results(per_subset: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict:
    """SentEval's STS result layout from {subset: (system scores, gold scores)}."""
    results: dict = {name: correlations(s, g) for name, (s, g) in per_subset.items()}
    weights = [results[n]["nsamples"] for n in per_subset]
    concat = correlations(*map(np.concatenate, zip(*per_subset.values())))
    results["all"] = {}
    for metric in ("pearson", "spearman"):
        vals = np.array([results[n][metric] for n in per_subset])
        results["all"][metric] = {
            "mean": float(np.average(vals)),
            "wmean": float(np.average(vals, weights=weights)),
            "all": concat[metric],
        }
    return results


def encode_labels(scores: np.ndarray, nclass: int = 5) -> np.ndarray:
    """Tai, Socher & Manning (2015) soft labels of scores in [1, 5], as SentEval's."""
    y = np.asarray(scores, dtype=np.float64)
    out = np.zeros((len(y), nclass), dtype=np.float32)
    fl = np.floor(y)
    for i in range(nclass):
        out[:, i] = np.where(i + 1 == fl + 1, y - fl, out[:, i])
        out[:, i] = np.where(i + 1 == fl, fl - y + 1, out[:, i])
    return out


@dataclass
class RelatednessRegressor:
    """SentEval's RelatednessPytorch (softmax regression to soft labels, MSE, Adam, early stop on
    dev Pearson), replicated step for step in float32 NumPy with a closed-form gradient:
    thousands of tiny sequential steps make per-operation overhead dominate."""

    seed: int = 1111
    batch_size: int = 64
    passes_per_check: int = 50
    max_epoch: int = 1000
    tenacity: int = 3

    def fit_predict(
        self,
        train_x: np.ndarray,
        train_scores: np.ndarray,
        dev_x: np.ndarray,
        dev_scores: np.ndarray,
        test_x: np.ndarray,
    ) -> tuple[float, np.ndarray]:
        """(best dev Pearson, test predictions)."""
        rng = np.random.RandomState(self.seed)
        torch.manual_seed(self.seed)
        lin = torch.nn.Linear(train_x.shape[1], 5)  # initialised exactly as SentEval's model
        # bias folded in as a last input row (inputs get a constant-1 column); no weight decay
        W = torch.cat([lin.weight.detach().T, lin.bias.detach()[None]]).numpy().copy()  # (d+1, 5)
        X, Xd, Xt = (_augment(x) for x in (train_x, dev_x, test_x))  # (N, d+1)
        Y = encode_labels(train_scores)  # (N, 5)
        dev_scores = np.asarray(dev_scores, dtype=np.float64)
        m, v = np.zeros_like(W), np.zeros_like(W)
        f32 = np.float32
        b1, b2, lr, eps = 0.9, 0.999, 1e-3, f32(1e-8)
        step, n, bs = 0, len(X), self.batch_size
        best_pr, best, nepoch, bad, stop = -1.0, W.copy(), 0, 0, False
        while not stop and nepoch <= self.max_epoch:
            for _ in range(self.passes_per_check):
                perm = rng.permutation(n)
                Xp, Yp = X[perm], Y[perm]  # one gather per pass; batches are slices
                for i in range(0, n, bs):
                    xb, yb = Xp[i : i + bs], Yp[i : i + bs]  # (B, d+1), (B, 5)
                    p = _softmax_np(xb @ W)  # (B, 5)
                    # d/dlogits of mean((p - y)^2) over B*5 entries, through the softmax
                    gp = (p - yb) * f32(2.0 / p.size)  # (B, 5)
                    gz = p * (gp - (gp * p).sum(1, keepdims=True))  # (B, 5)
                    g = xb.T @ gz  # (d+1, 5)
                    step += 1  # torch.optim.Adam, single-tensor path, same operation order
                    m += f32(1 - b1) * (g - m)  # exp_avg.lerp_(grad, 1 - beta1)
                    v *= f32(b2)
                    v += f32(1 - b2) * g * g
                    denom = np.sqrt(v) / f32((1 - b2**step) ** 0.5) + eps
                    W -= f32(lr / (1 - b1**step)) * (m / denom)
            nepoch += self.passes_per_check
            pr = _corr(pearsonr, _predict(Xd, W), dev_scores)
            if pr > best_pr:
                best_pr, best = pr, W.copy()
            else:
                stop, bad = bad >= self.tenacity, bad + 1
        return float(best_pr), _predict(Xt, best)


def _augment(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return np.concatenate([x, np.ones((len(x), 1), np.float32)], 1)


def _softmax_np(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _predict(x: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Expected score sum_k k * p_k, k = 1..5 (SentEval: np.dot(predict_proba, r))."""
    return (_softmax_np(x @ W) @ np.arange(1, 6, dtype=np.float32)).astype(np.float64)
