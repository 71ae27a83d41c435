"""Old path of the training system; it lives in `vat.train.system` now (issue 19).
Kept as a re-export for scripts that import it; it will be removed in a later release."""

from vat.train.config import LossConfig, OptimConfig
from vat.train.system import VATSystem

__all__ = ["LossConfig", "OptimConfig", "VATSystem"]
