"""vat: train, inspect and evaluate token-level Variational Auto-Transformers."""

from vat.api import PretrainedVAT, load
from vat.integrations.transformers_auto import install as _install_transformers_auto
from vat.model import VAT, Posterior, VATConfig, VATOutput
from vat.share.pretrained import list_pretrained

# AutoModel.from_pretrained(vat folder): see vat.integrations.transformers_auto
_install_transformers_auto()

__all__ = ["VAT", "VATConfig", "Posterior", "VATOutput", "PretrainedVAT", "load", "list_pretrained"]
__version__ = "0.1.0"
