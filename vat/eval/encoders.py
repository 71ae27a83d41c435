"""Sentence encoders for the harness: loaded VATs, any Python callable, HF directories.

Every encoder is a plain `f(list[str]) -> np.ndarray (n, d)`, in the spirit of SentEval's
`batcher(params, batch)`. `senteval_batcher` goes the other way: it wraps a loaded VAT as a
batcher for people who run the original SentEval toolkit.
"""

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
from vat.features import sentence_features
from vat.features.choice import ChosenFeatures, check_pooling, features_for
from vat.features.encoder import FeatureEncoder
from vat.share.loaded import LoadedVAT, takes_loaded

VAT_POOLINGS = ("mean", "sum", "start", "precision")  # = vat.features.POOLINGS
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
    """The sentence vectors of a loaded VAT. By default the model's own
    (`vat.features.choice.features_for`, the one rule of every loader), so its scores
    are those of the vectors vat.load, AutoModel, sentence-transformers and MTEB give. A
    `pooling` of the token means mu (the paper's VAT-mean, VAT-sum, VAT-start, or
    `precision`: mu weighted by exp(-logvar), see vat.features.pool), or fitted `features`
    replace it: those of a feature spec (vat.feature_spec), found or fitted by
    `vat.features.choice.features_for(loaded, spec, fit)`, which the caller composes.

    The encoder names what it gives: `.features` (the spec, e.g. "layer0/sif/none"; pooling
    P of mu is "mu/P/none") and `.why` (how it was chosen), for every table and results file.
    """
    if pooling is not None and pooling not in VAT_POOLINGS:
        raise OptionError(  # a command shows --pooling
            "pooling",
            f"for a vat model must be one of {', '.join(VAT_POOLINGS)}, got {pooling!r}"
            + did_you_mean(pooling, VAT_POOLINGS),
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
    # features_for's body: the model was checked as vat_encoder took it (@takes_loaded)
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
    """`pooling` of the token means mu (vat.features.sentence_features)."""

    def encode(sentences: list[str]) -> np.ndarray:
        return sentence_features(
            loaded.model, loaded.tokenizer, sentences, pooling=pooling, batch_size=batch_size
        )

    encode.__name__ = f"vat[{loaded.name}, {pooling}]"
    encode.features = str(FeatureSpec("mu", pooling))  # type: ignore[attr-defined]
    encode.why = f"{pooling} pooling of mu, as named"  # type: ignore[attr-defined]
    return encode


def callable_encoder(spec: str) -> SentenceEncoder:
    """`path/to/file.py:function`: the function takes a list of strings and returns an
    (n, d) array. The file is imported as a module (its folder goes on sys.path, so it can
    import its neighbours)."""
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
    return _one_line_failures(fn, spec)


def _one_line_failures(fn: SentenceEncoder, spec: str) -> SentenceEncoder:
    """The user's function, whose exceptions become one line naming it; under
    `--debug` the traceback shows the original exception as the cause."""

    def encode(sentences):
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
    """A local Hugging Face encoder directory (needs the `transformers` extra), mean or CLS
    pooling of the last layer, via vat.eval.hf_encoders. A bad directory is an OptionError
    naming `name` (`vat evaluate` passes hf_model, shown as --hf-model)."""
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
    """A SentEval `batcher(params, batch)` for a loaded VAT: its own vectors (`vat_encoder`),
    or `pooling` of mu.

    SentEval passes each batch as a list of token lists (sometimes strings); an empty
    sentence becomes '.', as in SentEval's own examples. Use it with the original toolkit:

        import senteval
        import vat
        from vat.eval.encoders import senteval_batcher
        model = vat.load("last.ckpt")
        se = senteval.engine.SE({"task_path": "data", "usepytorch": True, "kfold": 5},
                                senteval_batcher(model.loaded))
        se.eval(["STS12", "MR"])
    """
    encode = vat_encoder(loaded, pooling, batch_size)

    def batcher(params: object, batch: list) -> np.ndarray:
        texts = [(" ".join(s) if not isinstance(s, str) else s) for s in batch]
        return encode([t if t.strip() else "." for t in texts])

    return batcher
