"""transformers' AutoModel for exported vat folders, without remote code (docs/sharing.md);
`import vat` registers it when transformers is imported (a hook: never imports it itself)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

from vat.errors import check_choice, check_sentences

MODEL_TYPE = "vat"
_registered = False


def register() -> None:
    """Register vat's config and model with transformers' AutoConfig / AutoModel (once)."""
    global _registered
    if _registered:
        return
    from transformers import AutoConfig, AutoModel

    config_class, model_class = _classes()
    AutoConfig.register(MODEL_TYPE, config_class, exist_ok=True)
    AutoModel.register(config_class, model_class, exist_ok=True)
    _registered = True


def _classes() -> tuple[type, type]:
    # imported here, not at the top: `import vat` installs the hook below and must stay light
    import torch
    from transformers import PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import BaseModelOutput

    from vat.features import POOLINGS, sentence_features
    from vat.features.choice import features_for
    from vat.features.encoder import FeatureEncoder
    from vat.model import VAT, VATConfig
    from vat.share.resolve import load_model

    class VATTransformersConfig(PretrainedConfig):
        """config.json of an exported vat folder (vat.share.folder), as a transformers config."""

        model_type = MODEL_TYPE

        def __init__(self, model_config: dict | None = None, prior_std: float = 0.4, **kw):
            self.model_config = dict(model_config or {})
            self.prior_std = float(prior_std)
            super().__init__(**kw)

    class VATTransformersModel(PreTrainedModel):
        """`.vat` (the VAT) and `.tokenizer`; forward gives the token means mu (B, T, d)."""

        config_class = VATTransformersConfig
        base_model_prefix = "vat"

        def __init__(self, config: VATTransformersConfig, loaded: Any = None) -> None:
            super().__init__(config)
            if loaded is None:
                self.vat, self.tokenizer = VAT(VATConfig.from_dict(config.model_config)), None
            else:
                self.vat, self.tokenizer = loaded.model, loaded.tokenizer
            self.loaded = loaded
            self._features: Any = None  # the FeatureEncoder of encode, made at its first call

        @classmethod
        def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
            """Reads the folder or Hub repo once; other transformers keywords are unused."""
            config = kwargs.get("config")
            loaded = load_model(
                pretrained_model_name_or_path,
                name="pretrained_model_name_or_path",
                revision=kwargs.get("revision"),
                token=kwargs.get("token"),
                cache_dir=kwargs.get("cache_dir"),
            )
            if not isinstance(config, VATTransformersConfig):
                config = VATTransformersConfig(
                    model_config=loaded.config.to_dict(), prior_std=loaded.prior_std
                )
            return cls(config, loaded=loaded).eval()

        def forward(self, input_ids: torch.Tensor, attention_mask=None, **kwargs):
            post = self.vat.encode(input_ids)
            return BaseModelOutput(last_hidden_state=post.mu)

        def encode(self, sentences: list[str], pooling: str | None = None):
            """vat.load(...).encode's features: the model's own, or `pooling` of mu."""
            texts, single = check_sentences(sentences)
            if pooling is not None:
                check_choice(pooling, "pooling", POOLINGS)
            if pooling is not None or self.loaded is None:  # built from a config: no spec
                out = sentence_features(self.vat, self.tokenizer, texts, pooling or "mean")
            else:
                if self._features is None:  # resolved once per model, as vat.load's
                    self._features = FeatureEncoder(self.loaded, features_for(self.loaded).fitted)
                out = self._features(texts)
            return out[0] if single else out

    return VATTransformersConfig, VATTransformersModel


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Runs `register()` right after `import transformers` finishes."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "transformers":
            return None
        sys.meta_path.remove(self)  # once; and so that find_spec below finds the real one
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            try:
                register()
            except Exception:  # noqa: BLE001 - a transformers without Auto classes: no-op
                pass

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Register now if transformers is imported, else when it is (called by `import vat`)."""
    if "transformers" in sys.modules:
        try:
            register()
        except Exception:  # noqa: BLE001 - an old or broken transformers: vat works without it
            pass
    elif importlib.util.find_spec("transformers") is not None and not any(
        isinstance(f, _RegisterOnImport) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _RegisterOnImport())
