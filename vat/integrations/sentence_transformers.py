"""A VAT as a sentence-transformers model (docs/sharing.md): `to_sentence_transformer(vat.load(
DIR))` runs no code from the folder; `SentenceTransformer(DIR, trust_remote_code=True)` runs the
code its modules.json names (`VATSentenceEncoder`): only for folders you trust."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import InputModule

from vat.api import PretrainedVAT, require_loaded
from vat.errors import OptionError, check_choice, check_sentences
from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.features import POOLINGS, pool
from vat.features.choice import check_pooling, features_for
from vat.features.encoder import FeatureEncoder
from vat.runtime import resolve_device
from vat.share.folder import ST_MODULE_CONFIG_NAME, write_feature_stats, write_model_files
from vat.share.loaded import LoadedVAT, check_loaded
from vat.share.resolve import load_model
from vat.tokenizer import make_batch


class VATSentenceEncoder(InputModule):
    """Tokenize with the VAT's tokenizer, encode, pool the token means mu into
    `sentence_embedding` (B, d); `token_embeddings` (B, T, d) holds mu itself."""

    config_file_name = ST_MODULE_CONFIG_NAME  # config.json is the VAT's own (vat.share.folder)
    config_keys = ["features"]  # the one thing sentence_vat_config.json says: the spec

    def __init__(
        self,
        loaded: LoadedVAT,
        pooling: str | None = None,
        features: str | FittedFeatures | None = None,
    ) -> None:
        """`features` (a FittedFeatures or a spec), else `pooling` of mu, else the model's own."""
        check_loaded(loaded, "VATSentenceEncoder")
        _check_options(pooling, features)
        super().__init__()
        self.vat = loaded.model
        self.tokenizer = loaded.tokenizer.tokenizer  # a tokenizers.Tokenizer (InputModule)
        self.loaded = loaded
        self.pooling = pooling
        self.feature_encoder = None
        if features is None and pooling is not None:  # pooling of mu, as named
            self.features = str(FeatureSpec("mu", pooling))
            return
        fitted = features_for(loaded, features, save=False).fitted
        self.feature_encoder = FeatureEncoder(loaded, fitted)
        self.features = str(fitted.spec)

    @property
    def max_seq_length(self) -> int:
        return int(self.vat.config.max_len) - 1  # subwords; </s> takes the last place

    def preprocess(
        self, inputs: Sequence[str], prompt: str | None = None, **kwargs: Any
    ) -> dict[str, torch.Tensor]:
        texts, _ = check_sentences(inputs, "inputs")
        texts = [prompt + t for t in texts] if prompt else texts
        # the same cut as vat.features.iter_encoded: at most max_len - 1 subwords
        ids = self.loaded.tokenizer.encode_batch(texts, max_tokens=self.max_seq_length)
        return {"input_ids": make_batch(ids)["src"], "lengths": torch.tensor([len(x) for x in ids])}

    def forward(self, features: dict[str, torch.Tensor], **kwargs: Any) -> dict[str, torch.Tensor]:
        post = self.vat.encode(features["input_ids"])  # mu, logvar (B, T, d)
        mu = post.mu.float()
        features["token_embeddings"] = mu
        features["attention_mask"] = post.mask.long()
        lengths = features["lengths"].to(mu.device)
        if self.feature_encoder is not None:  # the same code path as vat.load(...).encode
            embedding = self.feature_encoder.encode_ids(features["input_ids"], lengths)
        else:  # logvar is used by `precision` pooling only
            embedding = pool(mu, lengths, self.pooling, post.logvar.float())
        features["sentence_embedding"] = embedding
        return features

    def get_embedding_dimension(self) -> int:
        if self.feature_encoder is not None:
            return self.feature_encoder.dim
        return int(self.vat.config.d_model)

    get_sentence_embedding_dimension = get_embedding_dimension

    def save(
        self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any
    ) -> None:
        # sentence-transformers writes its own README.md and modules.json
        write_model_files(Path(output_path), self.loaded)
        self.save_config(output_path)  # sentence_vat_config.json: the spec
        if self.feature_encoder is not None:
            write_feature_stats(Path(output_path), self.feature_encoder.fitted)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs: Any,
    ) -> VATSentenceEncoder:
        folder = cls.load_dir_path(
            model_name_or_path,
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
        )
        # read once, as every --model is, sentence_vat_config.json and statistics included
        return cls(load_model(folder))


def to_sentence_transformer(
    model: PretrainedVAT,
    pooling: str | None = None,
    device: str | None = None,
    features: Any = None,
) -> SentenceTransformer:
    """A SentenceTransformer around a loaded VAT, built here (no trust_remote_code): it gives
    `model.encode`'s vectors, the model's own or those of `features` or `pooling` of mu."""
    require_loaded(model, "to_sentence_transformer")
    _check_options(pooling, features)
    device = None if device is None else resolve_device(device, "device")
    pooled = features is None and pooling is not None  # pooling of mu, as named
    fitted = None if pooled else model.feature_encoder(features).fitted
    return SentenceTransformer(
        modules=[VATSentenceEncoder(model.loaded, pooling, fitted)],
        device=device,
        similarity_fn_name="cosine",
    )


def _check_options(pooling: str | None, features: object) -> None:
    """A pooling of POOLINGS, and a spec string, FeatureSpec or FittedFeatures, that agree."""
    if pooling is not None:
        check_choice(pooling, "pooling", POOLINGS)
    if features is not None and not isinstance(features, str | FeatureSpec | FittedFeatures):
        raise OptionError(
            "features",
            f"expected a feature spec such as 'mu/sif/pc1', got {type(features).__name__}",
        )
    check_pooling(pooling, features)
