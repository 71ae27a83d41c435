"""One batch through the VAT to the terms of the objective, and its compiled form; compiled
as a function taking the model, so state_dict keys never get `_orig_mod.`."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from vat.data.sampler import PAD_MULTIPLE  # compiled steps pad lengths to it: few shapes
from vat.model import VAT
from vat.train.fused_ce import fused_linear_cross_entropy
from vat.train.losses import free_bits_kl, gaussian_kl, masked_mean, reconstruction_nll

COMPILE_BACKEND = "inductor"  # tests use "aot_eager": the same graphs, no C++ build


class Terms(NamedTuple):
    nll: torch.Tensor  # 0-d: mean reconstruction NLL per non-pad token
    kl: torch.Tensor  # 0-d: KL per non-pad token, the sentence latent's included (the rate)
    kl_objective: torch.Tensor  # 0-d: the KL term that is optimised (free bits applied)
    kl_sentence: torch.Tensor | None  # 0-d: the sentence latent's mean KL per sentence
    bow: torch.Tensor | None  # 0-d: the weighted bag-of-words NLL from s, with bow_weights
    ntokens: torch.Tensor  # 0-d: non-pad target tokens
    logits: torch.Tensor | None  # (B, T, V) when asked for
    mask: torch.Tensor  # (B, T) bool, True at non-pad target tokens


def objective_terms(
    model: VAT,
    src: torch.Tensor,  # (B, T)
    tgt_in: torch.Tensor,  # (B, T)
    tgt_out: torch.Tensor,  # (B, T)
    prior_std: torch.Tensor,  # 0-d, s of the prior N(0, s^2 I)
    free_bits: float,
    sample: bool,
    generator: torch.Generator | None = None,
    with_logits: bool = False,
    fused_cross_entropy: bool = False,
    memory_keep: torch.Tensor | None = None,  # (B, T) bool: token latents left in the memory
    bow_weights: torch.Tensor | None = None,  # (V,) a word's weight in the bag-of-words loss
) -> Terms:
    fused = fused_cross_entropy and not with_logits
    out = model(src, tgt_in, sample, generator, not fused, memory_keep)
    # Both means run over non-pad tokens: the NLL's targets, the KL's encoder tokens (which
    # differ once encoder-input deletion shortened a sentence).
    target = tgt_out != model.config.pad_id
    if fused:  # the same mean, without (B, T, V) logits (vat/train/fused_ce.py)
        nll = fused_linear_cross_entropy(out.hidden, model.lm_head.weight, tgt_out, target)
    else:
        nll = masked_mean(reconstruction_nll(out.logits, tgt_out, target), target)
    kl_per_dim = gaussian_kl(out.mu.float(), out.logvar.float(), prior_std)  # (B, T, d)
    kl = masked_mean(kl_per_dim.sum(-1), out.mask)
    # without free bits the optimised KL is the KL itself: the same ops, not run twice
    kl_objective = kl
    if free_bits > 0:
        kl_objective = masked_mean(free_bits_kl(kl_per_dim, out.mask, free_bits), out.mask)
    kl_sentence = bow = None
    if out.sentence is not None:  # s's KL counts per token like the rest of the rate
        kl_s = gaussian_kl(out.sentence_mu.float(), out.sentence_logvar.float(), prior_std).sum(-1)
        per_token = kl_s.sum() / out.mask.sum().clamp_min(1)
        kl, kl_objective, kl_sentence = kl + per_token, kl_objective + per_token, kl_s.mean()
        if bow_weights is not None:  # one softmax over the vocabulary predicts every word
            logp = model.lm_head(model.sentence_memory(out.sentence)).float().log_softmax(-1)
            w = bow_weights[tgt_out] * target  # (B, T)
            bow = -(logp.gather(1, tgt_out) * w).sum() / w.sum().clamp_min(1e-8)
    logits = out.logits if with_logits else None
    return Terms(nll, kl, kl_objective, kl_sentence, bow, target.sum(), logits, target)


class CompiledObjective:
    """torch.compile of `objective_terms`: lengths padded to multiples of 8 and batch and
    length marked dynamic from the first call, so a run compiles at most 2 graphs (a batch
    of one gets its own), twice that with `fused_cross_entropy`."""

    def __init__(self, max_len: int) -> None:
        lengths = math.ceil(max_len / PAD_MULTIPLE)
        dyn = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):  # the name changed across releases
            if hasattr(dyn, name):
                setattr(dyn, name, max(getattr(dyn, name), 2 * lengths + 2))
        self._fn = torch.compile(objective_terms, backend=COMPILE_BACKEND)
        self._dynamic_dims = (0, 1) if lengths > 1 else (0,)
        self._graphs_before = graphs_compiled()
        self.shapes: set[tuple[int, int]] = set()  # (batch, padded length) seen; host ints

    def prepare(self, batch: dict[str, torch.Tensor], pad_id: int) -> dict[str, torch.Tensor]:
        extra = -batch["src"].shape[1] % PAD_MULTIPLE  # right-padding: pads are masked out
        if extra:
            batch = {k: F.pad(v, (0, extra), value=pad_id) for k, v in batch.items()}
        for v in batch.values():
            for dim in self._dynamic_dims:
                torch._dynamo.maybe_mark_dynamic(v, dim)
        self.shapes.add(tuple(batch["src"].shape))  # shapes are host metadata: no sync
        return batch

    def __call__(self, *args, **kwargs) -> Terms:
        return self._fn(*args, **kwargs)

    @property
    def graphs(self) -> int:
        return graphs_compiled() - self._graphs_before

    def summary(self) -> str:
        lengths = sorted({t for _, t in self.shapes})
        return (
            f"model.compile: {len(self.shapes)} batch shapes, {len(lengths)} padded lengths "
            f"({lengths[0] if lengths else 0}-{lengths[-1] if lengths else 0}), "
            f"{self.graphs} compiled graphs"
        )


def graphs_compiled() -> int:
    """Graphs dynamo has built in this process (a hit in the compile cache counts too)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
