"""Data: text files (or a `datasets` dataset) to batches of token ids.

- `datamodule.py`   VATDataModule: sources -> tokenizer -> token cache -> batches
- `corpus.py`       reading text files (plain, .gz) or a `datasets` dataset, streamed
- `token_cache.py`  the tokenized cache: its format (flat token array + offsets,
                    memory-mapped, verified) and its writer; the cache folder's checks
- `options.py`      the data options' checks (one-line errors naming data.X)
- `sampler.py`      length-bucketed batches (sentences or a token budget), resumable,
                    DDP-aware; collation as one numpy gather; the padding multiple
"""

from vat.data.corpus import expand_files, read_lines
from vat.data.datamodule import VATDataModule
from vat.data.token_cache import TokenizedDataset

__all__ = ["TokenizedDataset", "VATDataModule", "expand_files", "read_lines"]
