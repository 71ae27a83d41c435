"""Latent geometry of token representations: isotropy, context-specificity, collapse.

Pure functions over token vectors: `vectors` is an (N, d) torch tensor or numpy array, one
row per token; `word_ids` / `sentence_ids` are length-N integer sequences. Every cosine
statistic is exact, not sampled: the mean cosine over all pairs of n unit vectors is

    (1 / (n (n - 1))) sum_{i != j} u_i . u_j = (||sum_i u_i||^2 - n) / (n (n - 1)),

which costs O(n d) instead of O(n^2 d). Computed in float64 with torch on the input's device.

Ethayarajh (2019), "How Contextual are Contextualized Word Representations?": anisotropy,
self-similarity, intra-sentence similarity and their "adjusted" forms (value minus the
baseline); IsoScore (Rudman et al. 2022), effective rank (Roy & Vetterli 2007); the collapse
diagnostics live in `vat.geometry.collapse`. Bad input raises ValueError with the reason,
never a NaN.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from vat.geometry._checks import (
    ArrayLike,
    Prepared,
    as_ids,
    as_matrix,
    group_ids,
    group_sums,
    need_two,
    prepared,
)
from vat.geometry.collapse import ACTIVE_UNIT_THRESHOLD, kl_per_dimension, mutual_information


def anisotropy(vectors: ArrayLike) -> float:
    """Mean cosine similarity over all pairs of distinct rows (Ethayarajh 2019, sec. 3.4).

    The "random words" baseline: E_{i != j} cos(v_i, v_j) = (||sum_i u_i||^2 - N) / (N (N - 1))
    with u_i = v_i / ||v_i||. 0 for an isotropic cloud (in expectation), 1 when every
    vector points the same way.
    """
    p = prepared(vectors)
    n = len(p.u)
    return float((p.u.sum(0).square().sum() - n) / (n * (n - 1.0)))


def self_similarity_by_type(
    vectors: ArrayLike,
    word_ids: ArrayLike,
    min_count: int = 5,
    sentence_ids: ArrayLike | None = None,
) -> dict[int, tuple[int, float]]:
    """Per word type: {id: (occurrences, self-similarity)} for types with >= min_count occurrences.

    SelfSim(w) = mean over all pairs of distinct occurrences (i, j) of w of cos(v_i, v_j)
    (Ethayarajh 2019, Def. 1) = (||sum_i u_i||^2 - c) / (c (c - 1)) for c occurrences.
    Low values mean context-specific words (the paper's stopwords).

    With `sentence_ids`, only pairs from *different* sentences count (Ethayarajh's "the same
    word in different contexts"): the within-sentence pair sums sum_s (||S_{w,s}||^2 - c_{w,s})
    are subtracted exactly, and the pair count becomes c^2 - sum_s c_{w,s}^2. Types that
    occur in a single sentence then have no pairs and are left out.
    """
    if min_count < 2:
        raise ValueError(f"min_count must be >= 2 (a pair needs two occurrences), got {min_count}")
    p = prepared(vectors)
    u = p.u
    ids = as_ids(word_ids, len(u), "word_ids", u.device)
    uniq, inverse, counts = group_ids(ids)
    counts = counts.to(torch.float64)
    sums = group_sums(u, inverse, len(uniq))  # (W, d)
    pair_sum = sums.square().sum(1) - counts  # sum over ordered pairs i != j of u_i . u_j, (W,)
    pairs = counts * (counts - 1.0)  # (W,)
    if sentence_ids is not None:
        sent = as_ids(sentence_ids, len(u), "sentence_ids", u.device)
        _, sent = torch.unique(sent, return_inverse=True)  # 0..S-1
        # Group by (type, sentence) and subtract the within-sentence pairs.
        n_sent = int(sent.max()) + 1
        ws, ws_inv, ws_counts = group_ids(inverse * n_sent + sent)
        ws_counts = ws_counts.to(torch.float64)
        ws_sums = group_sums(u, ws_inv, len(ws))  # (WS, d)
        ws_type = ws // n_sent  # type index of each (type, sentence) group
        pair_sum -= torch.zeros_like(pair_sum).index_add_(
            0, ws_type, ws_sums.square().sum(1) - ws_counts
        )
        pairs -= torch.zeros_like(pairs).index_add_(0, ws_type, ws_counts * (ws_counts - 1.0))
    keep = (counts >= min_count) & (pairs > 0)
    if not keep.any():
        extra = " in at least two different sentences" if sentence_ids is not None else ""
        raise ValueError(
            f"no word type occurs at least min_count={min_count} times{extra} "
            f"(most frequent type: {int(counts.max())} occurrences); "
            "lower min_count or use more text"
        )
    values = pair_sum[keep] / pairs[keep]
    return {
        w: (int(c), v)
        for w, c, v in zip(uniq[keep].tolist(), counts[keep].tolist(), values.tolist())
    }


def self_similarity(
    vectors: ArrayLike,
    word_ids: ArrayLike,
    min_count: int = 5,
    sentence_ids: ArrayLike | None = None,
) -> float:
    """Unweighted mean of `self_similarity_by_type` over word types with >= min_count occurrences
    (Ethayarajh 2019, Def. 1)."""
    per_type = self_similarity_by_type(vectors, word_ids, min_count, sentence_ids)
    return float(np.mean([v for _, v in per_type.values()]))


def _intra_values(p: Prepared, sentence_ids: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    """(sentence ids (S,), IntraSim per sentence (S,))."""
    sent = as_ids(sentence_ids, len(p.x), "sentence_ids", p.x.device)
    uniq, inverse, counts = group_ids(sent)
    means = group_sums(p.x, inverse, len(uniq)) / counts[:, None]  # (S, d)
    mean_norm = torch.linalg.vector_norm(means, dim=1)  # (S,)
    zero = mean_norm == 0
    if zero.any():
        bad = int(uniq[zero.int().argmax()])
        raise ValueError(
            f"sentence {bad}: its token vectors sum to zero, "
            "so cos(token, sentence mean) is undefined"
        )
    cos = (p.u * means[inverse]).sum(1) / mean_norm[inverse]  # (N,)
    return uniq, group_sums(cos[:, None], inverse, len(uniq))[:, 0] / counts


def intra_sentence_similarity_by_sentence(
    vectors: ArrayLike, sentence_ids: ArrayLike
) -> dict[int, float]:
    """Per sentence: {id: IntraSim(s)}, with
    IntraSim(s) = (1/n) sum_i cos(v_i, m_s) and m_s = (1/n) sum_i v_i.

    Ethayarajh (2019), Def. 2. The mean m_s is of the raw (not unit) vectors, and
    cos(v_i, m_s) = u_i . m_s / ||m_s||, so a sentence costs O(n d).
    """
    uniq, values = _intra_values(prepared(vectors), sentence_ids)
    return dict(zip(uniq.tolist(), values.tolist()))


def intra_sentence_similarity(vectors: ArrayLike, sentence_ids: ArrayLike) -> float:
    """Unweighted mean over sentences of IntraSim(s) (Ethayarajh 2019, Def. 2); 1 means every
    position of a sentence collapsed to one vector."""
    return float(_intra_values(prepared(vectors), sentence_ids)[1].mean())


def adjusted(value: float, baseline: float) -> float:
    """Ethayarajh's anisotropy-adjusted form: value - anisotropy(vectors)."""
    return float(value - baseline)


def covariance_eigenvalues(vectors: ArrayLike) -> np.ndarray:
    """Eigenvalues (descending, >= 0) of the sample covariance
    (1/(N-1)) sum (v - mean)(v - mean)^T."""
    return _eigenvalues(_covariance(as_matrix(vectors)))


def _covariance(x: torch.Tensor) -> torch.Tensor:
    need_two(len(x))
    xc = x - x.mean(0)  # (N, d)
    return xc.T @ xc / (len(x) - 1)  # (d, d)


def _eigenvalues(cov: torch.Tensor) -> np.ndarray:
    eig = torch.linalg.eigvalsh(cov).flip(0).cpu().numpy()
    return np.clip(eig, 0.0, None)  # round-off can give tiny negatives


def isoscore(vectors: ArrayLike) -> float:
    """IsoScore (Rudman, Gillman, Rayne & Eickhoff 2022, ACL Findings, Algorithm 1).

    1. Rotate the centred cloud into its principal components; the variances along them
       are the covariance eigenvalues lambda (d of them).
    2. Normalise: lambda_hat = sqrt(d) lambda / ||lambda||  (so ||lambda_hat|| = ||1_d||).
    3. Isotropy defect: delta = ||lambda_hat - 1_d|| / sqrt(2 (d - sqrt(d))), in [0, 1].
    4. Dimensions used: k = (d - delta^2 (d - sqrt(d)))^2 / d.
    5. IsoScore = (k - 1) / (d - 1) = ((d - delta^2 (d - sqrt(d)))^2 - d) / (d (d - 1)).

    1 for an isotropic cloud (all variances equal), 0 when all variance lies on one axis.
    Unlike the cosine baseline it ignores the mean and is invariant to rotation and scale.
    """
    return spectrum_isoscore(covariance_eigenvalues(vectors))


def spectrum_isoscore(variances: ArrayLike) -> float:
    """`isoscore` from the principal-component variances (covariance eigenvalues)."""
    lam = np.asarray(variances, dtype=np.float64).reshape(-1)
    d = len(lam)
    if d < 2:
        raise ValueError("IsoScore needs at least 2 dimensions")
    norm = np.linalg.norm(lam)
    if norm == 0:
        raise ValueError("IsoScore is undefined for a cloud with zero variance (all vectors equal)")
    lam_hat = math.sqrt(d) * lam / norm
    delta = np.linalg.norm(lam_hat - 1.0) / math.sqrt(2 * (d - math.sqrt(d)))
    return float(((d - delta**2 * (d - math.sqrt(d))) ** 2 - d) / (d * (d - 1)))


def effective_rank(vectors: ArrayLike) -> float:
    """Effective rank of the token-vector covariance (Roy & Vetterli 2007, EUSIPCO, Def. 1).

    erank = exp(H(p)), H(p) = -sum_k p_k log p_k, p_k = sigma_k / sum_j sigma_j, where sigma_k
    are the singular values of the (PSD) covariance, i.e. its eigenvalues; 0 log 0 = 0.
    Between 1 (one direction) and d (all variances equal).
    """
    return spectrum_effective_rank(covariance_eigenvalues(vectors))


def spectrum_effective_rank(singular_values: ArrayLike) -> float:
    """exp(entropy of the normalised spectrum): `effective_rank` from given singular values."""
    s = np.asarray(singular_values, dtype=np.float64).reshape(-1)
    if (s < 0).any() or not np.isfinite(s).all():
        raise ValueError("singular values must be finite and non-negative")
    total = s.sum()
    if total == 0:
        raise ValueError("effective rank is undefined for an all-zero spectrum (no variance)")
    p = s[s > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


METRICS: dict[str, str] = {
    "anisotropy": "anisotropy (mean cos, random tokens)",
    "self_similarity": "self-similarity",
    "self_similarity_adjusted": "self-similarity - anisotropy",
    "intra_sentence_similarity": "intra-sentence similarity",
    "intra_sentence_similarity_adjusted": "intra-sentence - anisotropy",
    "isoscore": "IsoScore",
    "effective_rank": "effective rank",
    "active_units": "active units",
    "kl_per_token": "KL per token (nats)",
    "mutual_information": "mutual information (nats)",
}
"""The scalar metrics of a GeometryReport with their labels, in display order: the one list
the training callback logs (under geometry/), `vat geometry` prints and the sweep records."""


@dataclass
class GeometryReport:
    """All geometry metrics of one set of token vectors (see the functions of the same names)."""

    num_tokens: int
    num_sentences: int
    dim: int
    anisotropy: float
    self_similarity: float
    self_similarity_adjusted: float
    intra_sentence_similarity: float
    intra_sentence_similarity_adjusted: float
    isoscore: float
    effective_rank: float
    num_types: int
    """Word types with >= min_count occurrences (those self-similarity averages over)."""
    min_count: int
    active_units: int | None = None
    kl_per_token: float | None = None
    """Sum over dimensions of `kl_per_dim`: the mean KL per token in nats."""
    mutual_information: float | None = None
    kl_per_dim: list[float] | None = None
    active_unit_variances: list[float] | None = None
    self_similarity_by_type: dict[int, tuple[int, float]] = field(default_factory=dict, repr=False)

    def metrics(self) -> dict[str, float]:
        """{name: value} of the METRICS this report has (collapse diagnostics need a logvar)."""
        return {k: float(getattr(self, k)) for k in METRICS if getattr(self, k) is not None}

    def scalars(self) -> dict[str, float]:
        """Flat {name: value} of the scalar metrics (what the callback logs under geometry/)."""
        skip = {"kl_per_dim", "active_unit_variances", "self_similarity_by_type", "min_count"}
        return {k: float(v) for k, v in asdict(self).items() if k not in skip and v is not None}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (per-type values as a list of {id, count, self_similarity})."""
        d = asdict(self)
        d["self_similarity_by_type"] = [
            {"id": w, "count": c, "self_similarity": v}
            for w, (c, v) in sorted(self.self_similarity_by_type.items())
        ]
        return d


def geometry_report(
    vectors: ArrayLike,
    token_ids: ArrayLike,
    sentence_ids: ArrayLike,
    logvar: ArrayLike | None = None,
    prior_std: float | None = None,
    min_count: int = 5,
    mi_batch_size: int = 512,
    mi_max_tokens: int | None = 4096,
) -> GeometryReport:
    """Compute every metric of this module on one set of token vectors.

    `vectors` are the token representations (a VAT's posterior means mu). With `logvar`
    (and `prior_std` for the KL) the collapse diagnostics are filled in too; for encoders
    without a posterior (BERT-like models) they stay None. Runs on the device of `vectors`.
    """
    p = Prepared(vectors)
    n = len(p.x)
    as_ids(token_ids, n, "token_ids", p.x.device)
    sent = as_ids(sentence_ids, n, "sentence_ids", p.x.device)
    base = anisotropy(p)
    per_type = self_similarity_by_type(p, token_ids, min_count)
    ss = float(np.mean([v for _, v in per_type.values()]))
    intra = float(_intra_values(p, sent)[1].mean())
    # (d, d): eigenvalues for IsoScore and effective rank, diagonal for active units
    cov = _covariance(p.x)
    eig = _eigenvalues(cov)
    report = GeometryReport(
        num_tokens=n,
        num_sentences=len(torch.unique(sent)),
        dim=p.x.shape[1],
        anisotropy=base,
        self_similarity=ss,
        self_similarity_adjusted=adjusted(ss, base),
        intra_sentence_similarity=intra,
        intra_sentence_similarity_adjusted=adjusted(intra, base),
        isoscore=spectrum_isoscore(eig),
        effective_rank=spectrum_effective_rank(eig),
        num_types=len(per_type),
        min_count=min_count,
        self_similarity_by_type=per_type,
    )
    if logvar is not None:
        variances = cov.diagonal().cpu().numpy()  # Var of mu per dimension, unbiased
        report.active_units = int((variances > ACTIVE_UNIT_THRESHOLD).sum())
        report.active_unit_variances = variances.tolist()
        report.mutual_information = mutual_information(p.x, logvar, mi_batch_size, mi_max_tokens)
        if prior_std is not None:
            kl = kl_per_dimension(p.x, logvar, prior_std)
            report.kl_per_dim = kl.tolist()
            report.kl_per_token = float(kl.sum())
    return report
