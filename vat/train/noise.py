"""Noise on a training batch's inputs (decoder word dropout, encoder deletion, masking and
local shuffle), touching words only and drawn from a per-step generator so resumes are exact."""

from __future__ import annotations

from typing import NamedTuple

import torch

from vat.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

FIRST_WORD_ID = len(SPECIAL_TOKENS)  # a random replacement is drawn from here up


class NoisedBatch(NamedTuple):
    """The noised batch and how much the noise changed (0-d device tensors, for logging)."""

    batch: dict[str, torch.Tensor]
    decoder_words: torch.Tensor  # words in the decoder's input
    decoder_dropped: torch.Tensor  # of them replaced
    encoder_words: torch.Tensor  # words in the encoder's input before the noise
    encoder_deleted: torch.Tensor
    encoder_masked: torch.Tensor
    encoder_moved: torch.Tensor  # words that left their place in the shuffle


def step_seed(seed: int, step: int, batch_idx: int, rank: int) -> int:
    """A 63-bit seed per (seed, step, batch, rank), splitmix64-style: neighbours unrelated."""
    x = 0x243F6A8885A308D3  # pi's digits: no input maps to the all-zero state
    for part in (seed, step, batch_idx, rank):
        x = (x ^ (part & 0xFFFFFFFFFFFFFFFF)) * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & 0x7FFFFFFFFFFFFFFF


def words_of(ids: torch.Tensor) -> torch.Tensor:
    """True at the tokens noise may touch: everything but <pad>, <s> and </s>."""
    return (ids != PAD_ID) & (ids != BOS_ID) & (ids != EOS_ID)


def _drawn(ids: torch.Tensor, rate: float, generator: torch.Generator) -> torch.Tensor:
    return words_of(ids) & (torch.rand(ids.shape, generator=generator, device=ids.device) < rate)


def replace_words(
    ids: torch.Tensor,
    rate: float,
    generator: torch.Generator,
    replace_with: str = "unk",
    vocab_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each word replaced with probability `rate` by <unk> or a random non-special id."""
    hit = _drawn(ids, rate, generator)
    if replace_with == "unk":
        return ids.masked_fill(hit, UNK_ID), hit
    if replace_with != "random" or vocab_size is None or vocab_size <= FIRST_WORD_ID:
        raise ValueError(
            f"replace_with must be unk, or random with a vocab_size above {FIRST_WORD_ID}"
        )
    drawn = torch.randint(
        FIRST_WORD_ID, vocab_size, ids.shape, generator=generator, device=ids.device
    )
    return torch.where(hit, drawn, ids), hit


def delete_words(
    ids: torch.Tensor, rate: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each word deleted with probability `rate`, the rest moved left (the same shape)."""
    deleted = _drawn(ids, rate, generator)
    T = ids.shape[1]
    pos = torch.arange(T, device=ids.device).expand_as(ids)
    # kept tokens (padding included) first in their order, deleted ones after them; a stable
    # sort of these keys is a gather, no per-row loop and no host sync
    order = torch.argsort(torch.where(deleted, pos + T, pos), dim=1, stable=True)
    out = ids.gather(1, order)
    kept = T - deleted.sum(1, keepdim=True)
    return out.masked_fill(pos >= kept, PAD_ID), deleted


def shuffle_words(
    ids: torch.Tensor, distance: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lample et al.'s (2018) local shuffle: word i sorted by i + U(0, distance + 1)."""
    T = ids.shape[1]
    pos = torch.arange(T, device=ids.device).expand_as(ids)
    words = words_of(ids)
    jitter = torch.rand(ids.shape, generator=generator, device=ids.device) * (distance + 1)
    keys = torch.where(words, pos + jitter, pos + 2.0 * T + 1)  # non-words after every word
    out = ids.gather(1, torch.argsort(keys, dim=1, stable=True))
    return out, words & (out != ids)


def noised_batch(
    batch: dict[str, torch.Tensor],
    generator: torch.Generator,
    *,
    decoder_word_dropout: float = 0.0,
    encoder_delete: float = 0.0,
    encoder_mask: float = 0.0,
    encoder_shuffle_distance: int = 0,
    replace_with: str = "unk",
    vocab_size: int | None = None,
) -> NoisedBatch:
    """Word dropout on `tgt_in`; deletion, masking, then the shuffle on `src`; clean targets."""
    src, tgt_in = batch["src"], batch["tgt_in"]
    zero = torch.zeros((), dtype=torch.long, device=src.device)
    dropped = deleted = masked = moved = zero
    if decoder_word_dropout > 0:
        tgt_in, hit = replace_words(
            tgt_in, decoder_word_dropout, generator, replace_with, vocab_size
        )
        dropped = hit.sum()
    encoder_words = words_of(src).sum()
    if encoder_delete > 0:
        src, hit = delete_words(src, encoder_delete, generator)
        deleted = hit.sum()
    if encoder_mask > 0:
        src, hit = replace_words(src, encoder_mask, generator, replace_with, vocab_size)
        masked = hit.sum()
    if encoder_shuffle_distance > 0:
        src, hit = shuffle_words(src, encoder_shuffle_distance, generator)
        moved = hit.sum()
    return NoisedBatch(
        {**batch, "src": src, "tgt_in": tgt_in},
        words_of(batch["tgt_in"]).sum(),
        dropped,
        encoder_words,
        deleted,
        masked,
        moved,
    )


def memory_keep(
    src: torch.Tensor, rate: float, drop_all_rate: float, generator: torch.Generator
) -> torch.Tensor:
    """(B, T) True where a token latent stays in the decoder's memory: each is dropped with
    `rate`, and all of a sentence's with `drop_all_rate` (the sentence latent's slot stays)."""
    draw = lambda shape: torch.rand(shape, generator=generator, device=src.device)  # noqa: E731
    return (draw(src.shape) >= rate) & (draw((src.shape[0], 1)) >= drop_all_rate)
