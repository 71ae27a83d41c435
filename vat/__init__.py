"""vat: train, inspect and evaluate token-level Variational Auto-Transformers."""

from vat.api import PretrainedVAT, load
from vat.model import VAT, Posterior, VATConfig, VATOutput

__all__ = ["VAT", "VATConfig", "Posterior", "VATOutput", "PretrainedVAT", "load"]
__version__ = "0.1.0"
