"""A VAT as an MTEB encoder, and a command for MTEB's English STS tasks.

`VATMTEBEncoder` implements mteb's `EncoderProtocol` (mteb >= 2): `encode(DataLoader of
BatchedInput, *, task_metadata, hf_split, hf_subset, prompt_type, **kwargs)` returning an
(N, d) array of `vat.load(path).encode` features, and cosine `similarity` /
`similarity_pairwise` (from mteb's `AbsEncoder`, with the model meta's similarity set to
cosine, the score vat's own STS harness uses).

    vat mteb --model EXPORTED_DIR_OR_CKPT --output mteb-results

(the command, `vat.cli.mteb`) runs the STS tasks of MTEB's English benchmark (the task
data is downloaded from the Hugging Face Hub, or read from a local HF datasets cache) and
prints each task's main score (cosine Spearman). `register_model(DIR)` puts a vat folder in
mteb's model registry, so that `mteb.get_model(DIR)` / `mteb.get_model_meta(DIR)` work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from vat.api import load
from vat.errors import VatError
from vat.share.hub import CONFIG_NAME, WEIGHTS_NAME, read_config, resolve
from vat.share.resolve import resolve_model


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
        model_path: str | None = None,
        features: str | None = None,
        **kwargs: Any,
    ) -> None:

        # model_path: where a registered ModelMeta's model is (its name is "vat/NAME")
        self.model = load(model_path or model_name, device=device)
        self.pooling, self.batch_size, self.normalize = pooling, batch_size, normalize
        self.features = features  # a feature spec (vat.features.spec); None: the folder's own
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
            normalize_embeddings=self.normalize,
            features=self.features,
        )


def model_meta(model: str | Path, name: str | None = None) -> ModelMeta:
    """The mteb ModelMeta of a vat folder (or Hub id), read from its config.json and the
    weights' header (nothing is loaded), with VATMTEBEncoder as its loader: so
    `meta.load_model()` and, once registered, `mteb.get_model(name)` load it."""

    source = resolve_model(model)
    if source.kind == "checkpoint":
        raise VatError(
            f"{model} is a training checkpoint; MTEB's model registry takes an exported folder "
            "(vat export CKPT DIR)"
        )
    folder = resolve(source.location)
    config = read_config(folder)
    from safetensors import safe_open

    with safe_open(str(folder / WEIGHTS_NAME), "pt") as f:
        n_params = sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())
    card = config.get("card") or {}
    label = name or (source.location if source.kind == "hub" else f"vat/{folder.name}")
    return ModelMeta.create_empty(
        {
            "loader": VATMTEBEncoder,
            "loader_kwargs": {"model_path": str(source.location)},
            "name": label,
            "revision": "local" if source.kind == "folder" else None,
            "embed_dim": int(config["model_config"]["d_model"]),
            "max_tokens": int(config["model_config"]["max_len"]),
            "n_parameters": n_params,
            "similarity_fn_name": ScoringFunction.COSINE,
            "framework": ["PyTorch"],
            "languages": ["eng-Latn"],
            "open_weights": True,
            "license": card.get("license"),
            "reference": f"local folder {folder / CONFIG_NAME}"
            if source.kind == "folder"
            else None,
        }
    )


def register_model(model: str | Path, name: str | None = None) -> ModelMeta:
    """Add a vat folder to mteb's model registry under its ModelMeta's name ("vat/FOLDER",
    or the Hub id) and under `model` as given: `mteb.get_model(model)` and
    `mteb.get_model_meta(model)` then work."""
    from mteb.models.model_implementations import MODEL_REGISTRY

    meta = model_meta(model, name)
    MODEL_REGISTRY[meta.name] = meta
    MODEL_REGISTRY[str(model)] = meta
    return meta


ENGLISH_BENCHMARK = "MTEB(eng, v2)"


def english_sts_tasks() -> list:
    """The STS tasks of MTEB's English benchmark, MTEB(eng, v2): BIOSSES, SICK-R, STS12-15,
    STSBenchmark, STS17 (en-en) and STS22.v2 (en)."""
    import mteb

    return [t for t in mteb.get_benchmark(ENGLISH_BENCHMARK).tasks if t.metadata.type == "STS"]


if __name__ == "__main__":  # an entry point before `vat mteb`: refuse it loudly
    from vat.errors import refuse_moved_entry_point

    refuse_moved_entry_point("vat.integrations.mteb", "vat mteb")
