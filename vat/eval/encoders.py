"""Sentence encoders for the harness, each a plain `f(list[str]) -> np.ndarray (n, d)`: loaded
VATs, `file.py:function` callables, HF directories; and a SentEval batcher of a loaded VAT."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from vat.errors import OptionError, VatError, check_count, did_you_mean
from vat.eval.engine import SentenceEncoder
from vat.eval.hf_encoders import hf_sentence_features, load_hf_encoder
from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.features import POOLINGS, sentence_features
from vat.features.choice import ChosenFeatures, check_pooling, features_for
from vat.features.encoder import FeatureEncoder
from vat.share.loaded import LoadedVAT, takes_loaded

HF_POOLINGS = ("mean", "cls")


@takes_loaded
def vat_encoder(
    loaded: LoadedVAT,
    pooling: str | None = None,
    batch_size: int = 128,
    features: ChosenFeatures | FittedFeatures | None = None,
    *,
    quiet: bool = False,
) -> SentenceEncoder:
    """The sentence vectors of a loaded VAT: the model's own (`features_for`), a `pooling` of mu,
    or fitted `features`; the encoder's `.features` (the spec) and `.why` name what it gives."""
    if pooling is not None and pooling not in POOLINGS:
        raise OptionError(  # a command shows --pooling
            "pooling",
            f"for a vat model must be one of {', '.join(POOLINGS)}, got {pooling!r}"
            + did_you_mean(pooling, POOLINGS),
        )
    check_count(batch_size, "batch_size")
    check_pooling(pooling, features)
    if pooling is not None and features is None:
        return _mu_encoder(loaded, pooling, batch_size)
    if features is not None and not isinstance(features, ChosenFeatures | FittedFeatures):
        raise OptionError(
            "features",
            f"vat_encoder takes fitted features, got {type(features).__name__} "
            f"{str(features)[:80]!r}: vat.features.choice.features_for(loaded, spec) finds "
            "or fits a spec's statistics",
        )
    # features_for's body: @takes_loaded already checked the model
    chosen = features_for.__wrapped__(loaded, features, quiet=quiet)
    encoder = FeatureEncoder(loaded, chosen.fitted)

    def encode(sentences: list[str]) -> np.ndarray:
        return encoder(sentences, batch_size=batch_size)

    encode.__name__ = f"vat[{loaded.name}, {chosen.spec}]"
    encode.fitted = chosen.fitted  # type: ignore[attr-defined]  (what the run reports)
    encode.features = str(chosen.spec)  # type: ignore[attr-defined]
    encode.why = chosen.why  # type: ignore[attr-defined]
    return encode


def _mu_encoder(loaded: LoadedVAT, pooling: str, batch_size: int) -> SentenceEncoder:
    def encode(sentences: list[str]) -> np.ndarray:
        return sentence_features(
            loaded.model, loaded.tokenizer, sentences, pooling=pooling, batch_size=batch_size
        )

    encode.__name__ = f"vat[{loaded.name}, {pooling}]"
    encode.features = str(FeatureSpec("mu", pooling))  # type: ignore[attr-defined]
    encode.why = f"{pooling} pooling of mu, as named"  # type: ignore[attr-defined]
    return encode


def callable_encoder(spec: str) -> SentenceEncoder:
    """The function of `path/to/file.py:function`, imported with its folder on sys.path."""
    path_s, sep, func = spec.rpartition(":")
    if not sep or not path_s or not func:
        raise VatError(f"--encoder must look like path/to/file.py:function, got {spec!r}")
    path = Path(path_s)
    if not path.is_file():
        raise VatError(f"--encoder file {path} does not exist")
    mod_name = f"_vat_user_encoder_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    if module_spec is None or module_spec.loader is None:
        raise VatError(f"--encoder file {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # a broken user file: say where, keep it one line
        raise VatError(f"--encoder file {path} failed to import: {type(e).__name__}: {e}") from None
    finally:
        sys.path.remove(str(path.resolve().parent))
    fn = getattr(module, func, None)
    if not callable(fn):
        raise VatError(f"--encoder: {path} has no function {func!r}")

    def encode(sentences):  # its exceptions become one line naming it (--debug: the cause)
        try:
            return fn(sentences)
        except Exception as e:
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise VatError(
                f"--encoder {spec} raised {type(e).__name__}: {first} (an error in that "
                f"function, not in vat; --debug shows its traceback)"
            ) from e

    return encode


def hf_encoder(
    model_dir: str | Path,
    pooling: str = "mean",
    batch_size: int = 64,
    device: str | torch.device | None = None,
    *,
    name: str = "model_dir",
) -> SentenceEncoder:
    """Mean or CLS pooling of the last layer of a local Hugging Face encoder directory."""
    if pooling not in HF_POOLINGS:
        raise OptionError(
            "pooling",
            f"for a Hugging Face model must be one of {', '.join(HF_POOLINGS)}, got {pooling!r}"
            + did_you_mean(pooling, HF_POOLINGS),
        )
    check_count(batch_size, "batch_size")
    # fail now (missing dir, no transformers), not mid-run
    load_hf_encoder(model_dir, device, name=name)

    def encode(sentences: list[str]) -> np.ndarray:
        return hf_sentence_features(
            model_dir, sentences, pooling=pooling, batch_size=batch_size, device=device
        )

    encode.__name__ = f"hf[{Path(model_dir).name}, {pooling}]"
    return encode


def senteval_batcher(
    loaded: LoadedVAT, pooling: str | None = None, batch_size: int = 128
) -> Callable[[object, list], np.ndarray]:
    """A `batcher(params, batch)` for the original SentEval toolkit (docs/evaluate.md): batches
    of token lists (or strings), an empty sentence passed as '.', as in SentEval's examples."""
    encode = vat_encoder(loaded, pooling, batch_size)

    def batcher(params: object, batch: list) -> np.ndarray:
        texts = [(" ".join(s) if not isinstance(s, str) else s) for s in batch]
        return encode([t if t.strip() else "." for t in texts])

    return batcher
