"""Isotropy and context-specificity of token vectors (Ethayarajh 2019, IsoScore, effective
rank), exact: the mean cosine over pairs of n unit vectors is (||sum u||^2 - n) / (n (n - 1))."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from vat.geometry.collapse import (
    ACTIVE_UNIT_THRESHOLD,
    ArrayLike,
    as_matrix,
    kl_per_dimension,
    mutual_information,
    need_two,
)


def as_ids(ids: ArrayLike, n: int, name: str, device: torch.device) -> torch.Tensor:
    """(N,) int64 tensor on `device`."""
    a = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if len(a) != n:
        raise ValueError(f"{name} has {len(a)} entries but vectors has {n} rows; they must match")
    if len(a) and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be integers, got dtype {a.dtype}")
    return torch.from_numpy(a.astype(np.int64, copy=False)).to(device)


def group_sums(x: torch.Tensor, inverse: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Row sums of x (N, d) per group: (G, d), O(N d)."""
    return x.new_zeros(n_groups, x.shape[1]).index_add_(0, inverse, x)


class Prepared:
    """Validated float64 vectors with their unit rows, shared by the metrics of one report."""

    def __init__(self, vectors: ArrayLike) -> None:
        self.x = as_matrix(vectors)  # (N, d)
        norms = torch.linalg.vector_norm(self.x, dim=1)  # (N,)
        if (zero := norms == 0).any():
            raise ValueError(
                f"vectors has {int(zero.sum())} zero vector(s) "
                f"(first at row {int(zero.int().argmax())}); "
                "cosine similarity is undefined for them"
            )
        self.u = self.x / norms[:, None]  # (N, d) unit rows
        need_two(len(self.x))


def prepared(vectors: ArrayLike | Prepared) -> Prepared:
    return vectors if isinstance(vectors, Prepared) else Prepared(vectors)


def anisotropy(vectors: ArrayLike) -> float:
    """Mean cosine over all pairs of distinct rows (Ethayarajh 2019, sec. 3.4): 0 for an
    isotropic cloud, 1 when every vector points the same way."""
    p = prepared(vectors)
    n = len(p.u)
    return float((p.u.sum(0).square().sum() - n) / (n * (n - 1.0)))


def self_similarity_by_type(
    vectors: ArrayLike,
    word_ids: ArrayLike,
    min_count: int = 5,
    sentence_ids: ArrayLike | None = None,
) -> dict[int, tuple[int, float]]:
    """{id: (occurrences, SelfSim)} for types with >= min_count occurrences: the mean cosine
    over pairs of a type's occurrences (Ethayarajh 2019, Def. 1). With `sentence_ids` only
    pairs from different sentences count (the within-sentence pairs are subtracted exactly)."""
    if min_count < 2:
        raise ValueError(f"min_count must be >= 2 (a pair needs two occurrences), got {min_count}")
    u = prepared(vectors).u
    ids = as_ids(word_ids, len(u), "word_ids", u.device)
    uniq, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
    counts = counts.to(torch.float64)
    sums = group_sums(u, inverse, len(uniq))  # (W, d)
    pair_sum = sums.square().sum(1) - counts  # sum over ordered pairs i != j of u_i . u_j, (W,)
    pairs = counts * (counts - 1.0)  # (W,)
    if sentence_ids is not None:
        sent = as_ids(sentence_ids, len(u), "sentence_ids", u.device)
        _, sent = torch.unique(sent, return_inverse=True)  # 0..S-1
        # Group by (type, sentence) and subtract the within-sentence pairs.
        n_sent = int(sent.max()) + 1
        ws, ws_inv, ws_counts = torch.unique(
            inverse * n_sent + sent, return_inverse=True, return_counts=True
        )
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
    """Unweighted mean of `self_similarity_by_type` over word types."""
    per_type = self_similarity_by_type(vectors, word_ids, min_count, sentence_ids)
    return float(np.mean([v for _, v in per_type.values()]))


def _intra_values(p: Prepared, sentence_ids: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    """(sentence ids (S,), IntraSim per sentence (S,))."""
    sent = as_ids(sentence_ids, len(p.x), "sentence_ids", p.x.device)
    uniq, inverse, counts = torch.unique(sent, return_inverse=True, return_counts=True)
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
    """{id: IntraSim(s)}: mean cosine of a sentence's vectors with their mean (Ethayarajh)."""
    uniq, values = _intra_values(prepared(vectors), sentence_ids)
    return dict(zip(uniq.tolist(), values.tolist()))


def intra_sentence_similarity(vectors: ArrayLike, sentence_ids: ArrayLike) -> float:
    """Unweighted mean over sentences of IntraSim(s); 1: a sentence's positions collapsed."""
    return float(_intra_values(prepared(vectors), sentence_ids)[1].mean())


def adjusted(value: float, baseline: float) -> float:
    """Ethayarajh's anisotropy-adjusted form: value - anisotropy(vectors)."""
    return float(value - baseline)


def covariance_eigenvalues(vectors: ArrayLike) -> np.ndarray:
    """Eigenvalues (descending, >= 0) of the sample covariance."""
    return _eigenvalues(_covariance(as_matrix(vectors)))


def _covariance(x: torch.Tensor) -> torch.Tensor:
    need_two(len(x))
    xc = x - x.mean(0)  # (N, d)
    return xc.T @ xc / (len(x) - 1)  # (d, d)


def _eigenvalues(cov: torch.Tensor) -> np.ndarray:
    eig = torch.linalg.eigvalsh(cov).flip(0).cpu().numpy()
    return np.clip(eig, 0.0, None)  # round-off can give tiny negatives


def isoscore(vectors: ArrayLike) -> float:
    """IsoScore (Rudman et al. 2022, Algorithm 1): 1 when all principal variances are equal,
    0 when all variance lies on one axis; blind to the mean, rotation and scale."""
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
    """exp(entropy of the normalised covariance spectrum) (Roy & Vetterli 2007): 1 to d."""
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


# the scalar metrics with labels, in the order the callback, `vat geometry` and the sweep show
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
    num_types: int  # word types self-similarity averages over (>= min_count occurrences)
    min_count: int
    active_units: int | None = None
    kl_per_token: float | None = None  # sum of `kl_per_dim`: the mean KL per token in nats
    mutual_information: float | None = None
    kl_per_dim: list[float] | None = None
    active_unit_variances: list[float] | None = None
    self_similarity_by_type: dict[int, tuple[int, float]] = field(default_factory=dict, repr=False)

    def metrics(self) -> dict[str, float]:
        """{name: value} of the METRICS this report has."""
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
    """Every metric on one set of token vectors; the collapse diagnostics need `logvar` (and
    `prior_std` for the KL), so stay None for encoders without a posterior."""
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
