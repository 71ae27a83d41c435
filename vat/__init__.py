"""vat: train, inspect and evaluate token-level Variational Auto-Transformers.

`import vat` is light: the names below import torch only when first used, so `vat --help`
and the listing commands answer without loading a deep-learning framework."""

import importlib

from vat.integrations.transformers_auto import install as _install_transformers_auto

# AutoModel.from_pretrained(vat folder): see vat.integrations.transformers_auto
_install_transformers_auto()

_LAZY = {
    "VAT": "vat.model",
    "VATConfig": "vat.model",
    "Posterior": "vat.model",
    "VATOutput": "vat.model",
    "PretrainedVAT": "vat.api",
    "load": "vat.api",
    "list_pretrained": "vat.share.pretrained",
}

__all__ = list(_LAZY)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'vat' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
