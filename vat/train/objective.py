"""One batch through the VAT to the terms of the objective (the paper's eq. 5-6), and its
compiled form (`model.compile`).

The function is free of Lightning so that `torch.compile` sees plain torch: it is compiled
as a function that takes the model as an argument, so the model's state_dict keys never get
the `_orig_mod.` prefix of a compiled module, and a run can resume with compile on or off.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from vat.data.sampler import PAD_MULTIPLE  # compiled steps pad lengths to it: few shapes
from vat.model import VAT
from vat.train.fused_ce import fused_linear_cross_entropy
from vat.train.losses import free_bits_kl, gaussian_kl, masked_mean, reconstruction_nll

# torch.compile backend. Tests use "aot_eager" (traces the same graphs, no C++ build: inductor
# takes minutes on a small shared CPU); training uses inductor.
COMPILE_BACKEND = "inductor"


class Terms(NamedTuple):
    nll: torch.Tensor  # 0-d: mean reconstruction NLL per non-pad token
    kl: torch.Tensor  # 0-d: mean KL per non-pad token (the rate, nats per token)
    kl_objective: torch.Tensor  # 0-d: the KL term that is optimised (free bits applied)
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
) -> Terms:
    fused = fused_cross_entropy and not with_logits
    out = model(src, tgt_in, sample=sample, generator=generator, head=not fused)
    # Padding counts in neither term: both means run over non-pad tokens only (the paper).
    # The NLL runs over the targets and the KL over the latents (the encoder's tokens): the
    # same positions on clean inputs, not once encoder-input deletion shortened a sentence.
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
    logits = out.logits if with_logits else None
    return Terms(nll, kl, kl_objective, target.sum(), logits, target)


def pad_to_multiple(
    batch: dict[str, torch.Tensor], pad_id: int, multiple: int = PAD_MULTIPLE
) -> dict[str, torch.Tensor]:
    """Right-pad every (B, T) tensor to T a multiple of `multiple` (pads are masked out)."""
    T = batch["src"].shape[1]
    extra = -T % multiple
    if extra == 0:
        return batch
    return {k: torch.nn.functional.pad(v, (0, extra), value=pad_id) for k, v in batch.items()}


class CompiledObjective:
    """torch.compile of `objective_terms` for training steps, and what it compiled.

    Lengths are padded to multiples of 8 and the batch and length dimensions are marked
    dynamic from the first call, so a run compiles at most 2 graphs whatever max_len (a
    batch of one sentence gets its own: dynamo specialises size 1), twice that with
    `fused_cross_entropy` (tests/test_training_step.py). The recompile limit is raised above
    the number of padded lengths, so no length falls back to eager.
    """

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
        """Pad the lengths to a multiple of 8 and mark the batch and length dims dynamic."""
        batch = pad_to_multiple(batch, pad_id)
        for v in batch.values():
            for dim in self._dynamic_dims:
                torch._dynamo.maybe_mark_dynamic(v, dim)
        self.shapes.add(tuple(batch["src"].shape))  # shapes are host metadata: no sync
        return batch

    def __call__(self, *args, **kwargs) -> Terms:
        return self._fn(*args, **kwargs)

    @property
    def graphs(self) -> int:
        """Graphs dynamo compiled since this objective was made (process-wide counter)."""
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
