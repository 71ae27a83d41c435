"""Run a VAT encoder over raw sentences: token means (mu, no sampling, as the paper prescribes),
token vectors and pooled features; pooling leaves out </s> except for an empty sentence."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from vat.errors import OptionError, check_choice, check_count, check_sentences
from vat.model import VAT
from vat.runtime import eval_mode
from vat.tokenizer import VATTokenizer, make_batch

Pooling = Literal["mean", "sum", "start", "precision"]
POOLINGS: tuple[str, ...] = ("mean", "sum", "start", "precision")


class EncodedBatch(NamedTuple):
    index: list[int]  # positions of these sentences in the input list
    ids: list[list[int]]  # subword ids of each sentence (after truncation)
    mu: torch.Tensor  # (B, T, d)
    logvar: torch.Tensor  # (B, T, d)
    mask: torch.Tensor  # (B, T) bool
    sentence_mu: torch.Tensor | None  # (B, k) the sentence latent's mean, when there is one


def length_sorted_batches(lengths: Sequence[int], size: int) -> Iterator[list[int]]:
    """Indices in batches of `size`, sorted by length so each batch holds little padding."""
    size = check_count(size, "batch_size")  # the batch size of every caller
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for start in range(0, len(order), size):
        yield order[start : start + size]


def padded_batches(
    model: VAT, ids: Sequence[Sequence[int]], batch_size: int, progress: bool
) -> Iterator[tuple[list[int], list[list[int]], torch.Tensor]]:
    """(index, ids, src (B, T) on the model's device) of length-sorted batches, in eval mode."""
    device = next(model.parameters()).device
    batches = list(length_sorted_batches([len(x) for x in ids], batch_size))
    bar = tqdm(batches, desc="encoding", unit="batch", disable=not progress, leave=False)
    with eval_mode(model):
        for index in bar:
            batch_ids = [list(ids[i]) for i in index]
            yield index, batch_ids, make_batch(batch_ids)["src"].to(device)


def iter_encoded_ids(
    model: VAT, ids: Sequence[list[int]], batch_size: int = 128, progress: bool = False
) -> Iterator[EncodedBatch]:
    """Encode subword id lists (cut to max_len - 1) in length-sorted batches, in eval mode."""
    for index, batch_ids, src in padded_batches(model, ids, batch_size, progress):
        post, sentence = model.encode_with_sentence(src)  # mu, logvar (B, T, d)
        s = None if sentence is None else sentence.mu.float()
        yield EncodedBatch(index, batch_ids, post.mu.float(), post.logvar.float(), post.mask, s)


def iter_encoded(
    model: VAT,
    tokenizer: VATTokenizer,
    sentences: Sequence[str],
    batch_size: int = 128,
    progress: bool = False,
) -> Iterator[EncodedBatch]:
    """Encode sentences (cut to the model's max_len) in length-sorted batches."""
    sentences, _ = check_sentences(sentences)
    ids = tokenizer.encode_batch(list(sentences), max_tokens=model.config.max_len - 1)  # + </s>
    yield from iter_encoded_ids(model, ids, batch_size, progress)


def pool(
    mu: torch.Tensor, lengths: torch.Tensor, pooling: Pooling, logvar: torch.Tensor | None = None
) -> torch.Tensor:
    """Pool token means mu (B, T, d) over the first `lengths` (B,) subwords of each row: the
    paper's VAT-mean, VAT-sum, VAT-start, or precision, the mean of the product of the token
    Gaussians, sum_t mu_ti exp(-logvar_ti) / sum_t exp(-logvar_ti)."""
    B, T, _ = mu.shape
    n = lengths.clamp_min(1)  # (B,)
    keep = torch.arange(T, device=mu.device)[None, :] < n[:, None]  # (B, T)
    if pooling == "start":
        return mu[:, 0]  # (B, d)
    if pooling == "precision":
        if logvar is None:
            raise ValueError("precision pooling needs the token log-variances (logvar)")
        # normalised precisions = a softmax of -logvar over the sentence's tokens: the same
        # ratio as exp(-logvar) / sum exp(-logvar), without overflow for very small variances
        neg = (-logvar).masked_fill(~keep[..., None], float("-inf"))  # (B, T, d)
        weights = torch.softmax(neg, dim=1)  # (B, T, d), sums to 1 over t
        return (weights * mu).sum(1)  # (B, d)
    total = (mu * keep[..., None]).sum(1)  # (B, d)
    if pooling == "sum":
        return total
    if pooling == "mean":
        return total / n[:, None].to(mu.dtype)
    raise OptionError("pooling", f"must be one of {', '.join(POOLINGS)}, got {pooling!r}")


def sentence_features(
    model: VAT,
    tokenizer: VATTokenizer,
    sentences: Sequence[str],
    pooling: Pooling = "mean",
    batch_size: int = 128,
    progress: bool = False,
) -> np.ndarray:
    """(N, d) float32 pooled token means in input order; a single string gives its (d,)."""
    sentences, single = check_sentences(sentences)
    check_choice(pooling, "pooling", POOLINGS)
    out = np.zeros((len(sentences), model.config.d_model), dtype=np.float32)
    for b in iter_encoded(model, tokenizer, sentences, batch_size, progress):
        lengths = torch.tensor([len(x) for x in b.ids], device=b.mu.device)
        out[b.index] = pool(b.mu, lengths, pooling, b.logvar).cpu().numpy()
    return out[0] if single else out


@torch.no_grad()
def token_posteriors(
    model: VAT,
    tokenizer: VATTokenizer,
    sentences: Sequence[str],
    batch_size: int = 128,
    progress: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """mu (N, d) and logvar (N, d) of every subword, on the model's device, with token ids
    (N,) and sentence ids (N,), in input order (batches run length-sorted, then reordered)."""
    d, device = model.config.d_model, next(model.parameters()).device
    mus = [torch.zeros(0, d, device=device)]  # (n_b, d) per batch; none for no sentences
    logvars = [torch.zeros(0, d, device=device)]
    tok, sent = [], []
    for b in iter_encoded(model, tokenizer, sentences, batch_size, progress):
        lengths = torch.tensor([len(x) for x in b.ids], device=b.mu.device)  # (B,)
        keep = torch.arange(b.mu.shape[1], device=b.mu.device)[None, :] < lengths[:, None]  # (B, T)
        mus.append(b.mu[keep])  # (n_b, d), row-major: sentence by sentence
        logvars.append(b.logvar[keep])  # (n_b, d)
        tok.extend(i for ids in b.ids for i in ids)
        sent.extend(i for i, ids in zip(b.index, b.ids) for _ in ids)
    sentence_ids = torch.tensor(sent, dtype=torch.long)
    order = torch.argsort(sentence_ids, stable=True)  # (N,) back to input order
    mu, logvar = (torch.cat(t)[order.to(t[0].device)] for t in (mus, logvars))
    return mu, logvar, torch.tensor(tok, dtype=torch.long)[order], sentence_ids[order]


class TokenVectors(NamedTuple):
    vectors: np.ndarray  # (N, d) mu of every subword token
    token_ids: np.ndarray  # (N,) subword id of each row
    sentence_ids: np.ndarray  # (N,) index of the sentence each row belongs to
    logvar: np.ndarray  # (N, d)


def token_vectors(
    model: VAT,
    tokenizer: VATTokenizer,
    sentences: Sequence[str],
    batch_size: int = 128,
    progress: bool = False,
) -> TokenVectors:
    """Every subword's mu (and log-variance) over a list of sentences, in input order, as numpy."""
    mu, logvar, tok, sent = token_posteriors(model, tokenizer, sentences, batch_size, progress)
    return TokenVectors(mu.cpu().numpy(), tok.numpy(), sent.numpy(), logvar.cpu().numpy())
