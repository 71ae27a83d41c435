"""A VAT as an MTEB encoder, and a command for MTEB's English STS tasks.

`VATMTEBEncoder` implements mteb's `EncoderProtocol` (mteb >= 2): `encode(DataLoader of
BatchedInput, *, task_metadata, hf_split, hf_subset, prompt_type, **kwargs)` returning an
(N, d) array of `vat.load(path).encode` features, and cosine `similarity` /
`similarity_pairwise` (from mteb's `AbsEncoder`, with the model meta's similarity set to
cosine, the score vat's own STS harness uses).

    vat mteb --model EXPORTED_DIR_OR_CKPT --output mteb-results

runs the STS tasks of MTEB's English benchmark (the task data is downloaded from the Hugging
Face Hub) and prints each task's main score (cosine Spearman).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from vat.errors import VatError, run_cli


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
        features: str | None = None,
        **kwargs: Any,
    ) -> None:
        from vat.api import load

        self.model = load(model_name, device=device)
        self.pooling, self.batch_size, self.normalize = pooling, batch_size, normalize
        self.features = features  # a feature spec (vat.feature_spec); None: the folder's own
        name = Path(str(model_name)).name if Path(str(model_name)).exists() else str(model_name)
        n_params = sum(p.numel() for p in self.model.model.parameters())
        self.mteb_model_meta = ModelMeta.create_empty(
            {
                "name": f"vat/{name}" if "/" not in name else name,
                "revision": revision or "local",
                "embed_dim": self.model.feature_encoder(features).dim
                if features is not None or self.model._folder_spec() is not None
                else self.model.dim,
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
            texts,
            pooling=self.pooling,
            batch_size=self.batch_size,
            normalize=self.normalize,
            features=self.features,
        )


ENGLISH_BENCHMARK = "MTEB(eng, v2)"


def english_sts_tasks() -> list:
    """The STS tasks of MTEB's English benchmark, MTEB(eng, v2): BIOSSES, SICK-R, STS12-15,
    STSBenchmark, STS17 (en-en) and STS22.v2 (en)."""
    import mteb

    return [t for t in mteb.get_benchmark(ENGLISH_BENCHMARK).tasks if t.metadata.type == "STS"]


def _parser() -> argparse.ArgumentParser:
    from vat.cli.common import Parser  # one-line usage errors, like every vat command

    p = Parser(
        prog="vat mteb",
        description="Run MTEB's English STS tasks on a VAT (task data from the HF Hub).",
    )
    p.add_argument(
        "--model",
        required=True,
        help="training checkpoint (.ckpt), exported folder, or Hub repo id",
    )
    p.add_argument(
        "--tasks",
        default=None,
        help="comma-separated MTEB task names (default: the STS tasks of MTEB(eng, v2))",
    )
    p.add_argument(
        "--pooling", default="mean", help="pooling of the token means (vat.features.Pooling)"
    )
    p.add_argument(
        "--features",
        default=None,
        help="feature spec SOURCE/WEIGHTING/POST (vat.feature_spec; default: the model's own)",
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--device", default=None, help="torch device (default: cuda if available, else cpu)"
    )
    p.add_argument("--output", default="mteb-results", help="folder for MTEB's result files")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _main(argv: Sequence[str] | None) -> int:
    import mteb
    from mteb.cache import ResultCache

    args = _parser().parse_args(argv)
    encoder = VATMTEBEncoder(
        args.model,
        device=args.device,
        pooling=args.pooling,
        batch_size=args.batch_size,
        features=args.features,
    )
    if args.tasks:
        try:
            tasks = list(
                mteb.get_tasks(tasks=[t.strip() for t in args.tasks.split(",") if t.strip()])
            )
        except (KeyError, ValueError) as e:
            raise VatError(f"--tasks: {e}") from None
    else:
        tasks = english_sts_tasks()
    try:
        result = mteb.evaluate(
            encoder, tasks, cache=ResultCache(args.output), overwrite_strategy="always"
        )
    except ConnectionError as e:  # the task data comes from the Hub
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise VatError(
            f"cannot fetch MTEB task data from the Hugging Face Hub ({first[:200]})"
        ) from None
    for task_result in result.task_results:
        print(f"{task_result.task_name:<24} {task_result.get_score():.4f}")
    print(f"results in {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
