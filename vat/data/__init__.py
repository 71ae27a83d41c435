"""Data: text files (or a `datasets` dataset) to batches of token ids.

- `datamodule.py`   VATDataModule: sources -> tokenizer -> token cache -> batches
- `corpus.py`       reading text files (plain, .gz) or a `datasets` dataset, streamed
- `token_cache.py`  the tokenized cache: its format (flat token array + offsets,
                    memory-mapped, verified) and its writer; the cache folder's checks
- `options.py`      the data options' checks (one-line errors naming data.X)
- `sampler.py`      length-bucketed batches (sentences or a token budget), resumable,
                    DDP-aware; collation as one numpy gather; the padding multiple
- `paths.py`        where the SentEval folder is when no command names it ($VAT_SENTEVAL_DIR)
"""

# The DataModule pulls in Lightning (seconds): loaded on first use, so that `vat.load` and the
# feature encoder, which only read text files (`vat.data.corpus`), stay light.
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
