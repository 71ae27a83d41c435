"""Latent geometry: isotropy and context-specificity (`metrics`), posterior collapse
(`collapse`), figures (`plots`) and probe sentences (`probes`)."""

from vat.geometry.collapse import (
    ACTIVE_UNIT_THRESHOLD,
    active_unit_variances,
    active_units,
    kl_per_dimension,
    mutual_information,
)
from vat.geometry.metrics import (
    METRICS,
    GeometryReport,
    adjusted,
    anisotropy,
    covariance_eigenvalues,
    effective_rank,
    geometry_report,
    intra_sentence_similarity,
    intra_sentence_similarity_by_sentence,
    isoscore,
    self_similarity,
    self_similarity_by_type,
    spectrum_effective_rank,
    spectrum_isoscore,
)

__all__ = [
    "ACTIVE_UNIT_THRESHOLD",
    "METRICS",
    "GeometryReport",
    "active_unit_variances",
    "active_units",
    "adjusted",
    "anisotropy",
    "covariance_eigenvalues",
    "effective_rank",
    "geometry_report",
    "intra_sentence_similarity",
    "intra_sentence_similarity_by_sentence",
    "isoscore",
    "kl_per_dimension",
    "mutual_information",
    "self_similarity",
    "self_similarity_by_type",
    "spectrum_effective_rank",
    "spectrum_isoscore",
]
