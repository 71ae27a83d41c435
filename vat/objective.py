"""One batch through the VAT to the terms of the objective (PAPER.md eq. 5-6), and its
compiled form (`model.compile`).

The function is free of Lightning so that `torch.compile` sees plain torch: it is compiled
as a function that takes the model as an argument, so the model's state_dict keys never get
the `_orig_mod.` prefix of a compiled module, and a run can resume with compile on or off.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from vat.losses import free_bits_kl, gaussian_kl, masked_mean, reconstruction_nll
from vat.model import VAT

# Sequence lengths are padded to a multiple of this under `model.compile`: with static
# shapes, a compiled graph exists per padded length (at most ceil(max_len / 8) of them).
PAD_MULTIPLE = 8
# torch.compile backend. Tests use "aot_eager" (traces the same graphs, no C++ build: inductor
# takes minutes on a small shared CPU); training uses inductor.
COMPILE_BACKEND = "inductor"


class Terms(NamedTuple):
    nll: torch.Tensor  # 0-d: mean reconstruction NLL per non-pad token
    kl: torch.Tensor  # 0-d: mean KL per non-pad token (the rate, nats per token)
    kl_objective: torch.Tensor  # 0-d: the KL term that is optimised (free bits applied)
    ntokens: torch.Tensor  # 0-d: non-pad tokens
    logits: torch.Tensor | None  # (B, T, V) when asked for


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
) -> Terms:
    out = model(src, tgt_in, sample=sample, generator=generator)
    nll_t = reconstruction_nll(out.logits, tgt_out, out.mask)  # (B, T)
    kl_per_dim = gaussian_kl(out.mu.float(), out.logvar.float(), prior_std)  # (B, T, d)
    # Padding counts in neither term: both means run over non-pad tokens only (PAPER.md).
    nll = masked_mean(nll_t, out.mask)
    kl = masked_mean(kl_per_dim.sum(-1), out.mask)
    kl_objective = masked_mean(free_bits_kl(kl_per_dim, out.mask, free_bits), out.mask)
    return Terms(nll, kl, kl_objective, out.mask.sum(), out.logits if with_logits else None)


def pad_to_multiple(
    batch: dict[str, torch.Tensor], pad_id: int, multiple: int = PAD_MULTIPLE
) -> dict[str, torch.Tensor]:
    """Right-pad every (B, T) tensor to T a multiple of `multiple` (pads are masked out)."""
    T = batch["src"].shape[1]
    extra = -T % multiple
    if extra == 0:
        return batch
    return {k: torch.nn.functional.pad(v, (0, extra), value=pad_id) for k, v in batch.items()}


def compiled_objective(max_len: int):
    """torch.compile of `objective_terms` for training steps.

    Shapes: lengths are padded to multiples of 8, so at most ceil(max_len / 8) lengths occur;
    the batch dimension is marked dynamic (`maybe_mark_dynamic` in the caller), so batches of
    different sizes (the epoch's last, token budgets) share a graph. The recompile limit is
    raised to the number of lengths (+ slack) so no length silently falls back to eager.
    """
    limit = math.ceil(max_len / PAD_MULTIPLE) + 4
    dyn = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):  # the name changed across releases
        if hasattr(dyn, name):
            setattr(dyn, name, max(getattr(dyn, name), limit))
    return torch.compile(objective_terms, backend=COMPILE_BACKEND)
