"""Data: text files (or a `datasets` dataset) to batches of token ids."""

# loaded on first use: Lightning takes seconds to import, and `vat.load` only reads text files
_LAZY = {
    "VATDataModule": "vat.data.datamodule",
    "TokenizedDataset": "vat.data.token_cache",
    "expand_files": "vat.data.corpus",
    "read_lines": "vat.data.corpus",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'vat.data' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
