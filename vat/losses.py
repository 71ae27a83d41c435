"""Old path of the objective's functions; they live in `vat.train.losses` and
`vat.train.schedules` now (issue 19). Kept as a re-export; it will be removed later."""

from vat.train.losses import free_bits_kl, gaussian_kl, masked_mean, reconstruction_nll
from vat.train.schedules import KLSchedule, noam_lr

__all__ = [
    "KLSchedule",
    "free_bits_kl",
    "gaussian_kl",
    "masked_mean",
    "noam_lr",
    "reconstruction_nll",
]
