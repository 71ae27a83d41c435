"""Token vectors and sentence features of a local Hugging Face encoder directory, measured with the
same code as a VAT; needs the optional `transformers` extra and never downloads."""

from __future__ import annotations

import functools
import numbers
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import torch

from vat.errors import (
    OptionError,
    VatError,
    check_choice,
    check_count,
    check_path,
    check_sentences,
    shown_path,
)
from vat.io import folder
from vat.runtime import resolve_device

HFPooling = Literal["mean", "cls"]


class HFTokenVectors(NamedTuple):
    vectors: np.ndarray  # (N, d) hidden state of every non-special token
    token_ids: np.ndarray  # (N,) wordpiece/subword id of each row
    sentence_ids: np.ndarray  # (N,) index of the sentence each row belongs to


class HFEncoder(NamedTuple):
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    model: Any  # transformers.PreTrainedModel, in eval mode
    path: str

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    def token_text(self, i: int) -> str:
        """Readable text of one token id (projector labels, per-type tables)."""
        return str(self.tokenizer.convert_ids_to_tokens(int(i)))


@functools.lru_cache(maxsize=2)
def _load_cached(path: str, device: str) -> HFEncoder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never touch the network
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise VatError(
            "Hugging Face encoders need the optional 'transformers' package: "
            "pip install 'variational-auto-transformer[transformers]' (or pip install transformers)"
        ) from None
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar per call
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = transformers.AutoModel.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise VatError(f"cannot load a Hugging Face encoder from {path} ({first[:200]})") from None
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    model.to(device).eval()
    return HFEncoder(tokenizer, model, path)


def load_hf_encoder(
    model_dir: str | os.PathLike,
    device: str | torch.device | None = None,
    *,
    name: str = "model_dir",
) -> HFEncoder:
    """Tokenizer and model (eval mode) of a local directory, cached."""
    check_path(model_dir, name)
    p = Path(model_dir).expanduser()
    if p.is_symlink() and not p.exists():
        try:
            folder(p, name)  # a symlink loop, named as one
        except VatError as e:
            raise OptionError(name, str(e).removeprefix(f"{name} ")) from None
    shown = shown_path(p)
    if not p.exists():
        raise OptionError(name, f"{shown}: directory does not exist")
    if not p.is_dir():
        raise OptionError(name, f"{shown}: expected a Hugging Face model directory, got a file")
    if not (p / "config.json").is_file():
        raise OptionError(
            name, f"{shown}: no config.json (expected a directory written by save_pretrained)"
        )
    return _load_cached(str(p.resolve()), str(device or resolve_device("auto")))


def _resolve_layer(encoder: HFEncoder, layer: int) -> int:
    """Index into `hidden_states` (length num_layers + 1)."""
    n = encoder.num_layers
    whole = isinstance(layer, numbers.Integral) and not isinstance(layer, bool)
    if not whole or not -(n + 1) <= layer <= n:
        raise OptionError(
            "layer",
            f"{encoder.path} has layers 0..{n} (0 = embeddings) or -1..-{n + 1}, got {layer!r}",
        )
    return layer % (n + 1)


def _batches(
    encoder: HFEncoder, sentences: Sequence[str], layer: int, batch_size: int
) -> Iterator[tuple[list[int], dict[str, torch.Tensor], torch.Tensor]]:
    """Yield (indices, tokenizer output, hidden states (B, L, d)) in length-sorted batches."""
    check_count(batch_size, "batch_size")
    index = _resolve_layer(encoder, layer)
    tok, model = encoder.tokenizer, encoder.model
    max_length = min(
        int(tok.model_max_length), int(getattr(model.config, "max_position_embeddings", 512))
    )
    device = next(model.parameters()).device
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        enc = tok(
            [sentences[i] for i in idx],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_special_tokens_mask=True,
            return_tensors="pt",
        )
        special = enc.pop("special_tokens_mask")  # (B, L), 1 at [CLS]/[SEP]/pad
        inputs = {k: v.to(device) for k, v in enc.items()}
        with torch.inference_mode():
            out = model(**inputs, output_hidden_states=True)
        hidden = out.hidden_states[index].float()  # (B, L, d)
        inputs["special_tokens_mask"] = special.to(device)
        yield idx, inputs, hidden


def hf_token_vectors(
    model_dir: str | os.PathLike,
    sentences: Sequence[str],
    layer: int = -1,
    batch_size: int = 64,
    device: str | torch.device | None = None,
) -> HFTokenVectors:
    """Hidden state of every token at `layer`, in input order; padding and special tokens are
    dropped, as Ethayarajh (2019) does for BERT."""
    sentences = check_sentences(sentences)[0]
    encoder = load_hf_encoder(model_dir, device)
    # sentence i's rows in slot i + 1; slot 0 stays empty, so no sentences still concatenate
    vecs = [np.zeros((0, encoder.model.config.hidden_size), np.float32)] * (len(sentences) + 1)
    ids = [np.zeros(0, np.int64)] * (len(sentences) + 1)
    for idx, inputs, hidden in _batches(encoder, sentences, layer, batch_size):
        keep = (inputs["attention_mask"] == 1) & (inputs["special_tokens_mask"] == 0)  # (B, L)
        keep, hidden, tokens = (t.cpu().numpy() for t in (keep, hidden, inputs["input_ids"]))
        for row, i in enumerate(idx):
            vecs[i + 1], ids[i + 1] = hidden[row, keep[row]], tokens[row, keep[row]]
    sent = [np.full(len(x), i - 1, dtype=np.int64) for i, x in enumerate(ids)]
    return HFTokenVectors(np.concatenate(vecs), np.concatenate(ids), np.concatenate(sent))


def hf_sentence_features(
    model_dir: str | os.PathLike,
    sentences: Sequence[str],
    pooling: HFPooling = "mean",
    layer: int = -1,
    batch_size: int = 64,
    device: str | torch.device | None = None,
) -> np.ndarray:
    """(N, d) float32 features from `layer`, in input order: `mean` over every non-pad position
    with [CLS] and [SEP] (sentence-transformers'), or `cls`, position 0 ("BERT-base-CLS")."""
    sentences = check_sentences(sentences)[0]
    check_choice(pooling, "pooling", ("mean", "cls"))
    encoder = load_hf_encoder(model_dir, device)
    out = np.zeros((len(sentences), encoder.model.config.hidden_size), dtype=np.float32)
    for idx, inputs, hidden in _batches(encoder, sentences, layer, batch_size):
        if pooling == "cls":
            pooled = hidden[:, 0]  # (B, d)
        else:
            m = inputs["attention_mask"].to(hidden.dtype)[..., None]  # (B, L, 1)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)  # (B, d)
        out[idx] = pooled.cpu().numpy()
    return out
