"""A VAT as an MTEB encoder, and a command for MTEB's English STS tasks.

`VATMTEBEncoder` implements mteb's `EncoderProtocol` (mteb >= 2): `encode(DataLoader of
BatchedInput, *, task_metadata, hf_split, hf_subset, prompt_type, **kwargs)` returning an
(N, d) array of `vat.load(path).encode` features, and cosine `similarity` /
`similarity_pairwise` (from mteb's `AbsEncoder`, with the model meta's similarity set to
cosine, the score vat's own STS harness uses).

    vat mteb --model EXPORTED_DIR_OR_CKPT --output mteb-results

(the command, `vat.cli.mteb`) runs the STS tasks of MTEB's English benchmark (the task
data is downloaded from the Hugging Face Hub) and prints each task's main score (cosine
Spearman).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from vat.api import load


class VATMTEBEncoder(AbsEncoder):
    """Pooled token means mu of a VAT (a .ckpt, an exported folder or a Hub repo id)."""

    def __init__(
        self,
        model_name: str,
        revision: str | None = None,
        *,
        device: str | None = None,
        pooling: str = "mean",
        batch_size: int = 64,
        normalize: bool = False,
        **kwargs: Any,
    ) -> None:

        self.model = load(model_name, device=device)
        self.pooling, self.batch_size, self.normalize = pooling, batch_size, normalize
        name = Path(str(model_name)).name if Path(str(model_name)).exists() else str(model_name)
        n_params = sum(p.numel() for p in self.model.model.parameters())
        self.mteb_model_meta = ModelMeta.create_empty(
            {
                "name": f"vat/{name}" if "/" not in name else name,
                "revision": revision or "local",
                "embed_dim": self.model.dim,
                "max_tokens": int(self.model.model.config.max_len),
                "n_parameters": int(n_params),
                "similarity_fn_name": ScoringFunction.COSINE,
                "framework": ["PyTorch"],
                "languages": ["eng-Latn"],
                "open_weights": True,
            }
        )

    def encode(
        self,
        inputs,
        *,
        task_metadata,
        hf_split: str,
        hf_subset: str,
        prompt_type=None,
        **kwargs: Any,
    ) -> np.ndarray:
        """(N, d) features of every text in the DataLoader's batches (`batch["text"]`), in order.
        VAT has no prompts or instructions, so task_metadata / prompt_type change nothing."""
        texts = [text for batch in inputs for text in batch["text"]]
        return self.model.encode(
            texts, pooling=self.pooling, batch_size=self.batch_size, normalize=self.normalize
        )


ENGLISH_BENCHMARK = "MTEB(eng, v2)"


def english_sts_tasks() -> list:
    """The STS tasks of MTEB's English benchmark, MTEB(eng, v2): BIOSSES, SICK-R, STS12-15,
    STSBenchmark, STS17 (en-en) and STS22.v2 (en)."""
    import mteb

    return [t for t in mteb.get_benchmark(ENGLISH_BENCHMARK).tasks if t.metadata.type == "STS"]


if __name__ == "__main__":  # an entry point before `vat mteb`: refuse it loudly
    from vat.errors import refuse_moved_entry_point

    refuse_moved_entry_point("vat.integrations.mteb", "vat mteb")
