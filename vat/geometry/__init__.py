"""Latent geometry: isotropy, context-specificity and posterior-collapse diagnostics.

- `metrics.py`   the metrics as pure functions (Ethayarajh 2019, IsoScore, effective rank),
                 GeometryReport and geometry_report
- `collapse.py`  active units, KL per latent dimension, the mutual-information estimate
- `_checks.py`   input checks shared by the two (private to this package)
- `plots.py`     the figures (spectrum, KL per dimension, active units)
- `probes.py`    which sentences geometry is measured on (STS12 from $VAT_SENTEVAL_DIR)

`from vat import geometry` gives the metric functions: `geometry.anisotropy(vectors)`.
"""

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
