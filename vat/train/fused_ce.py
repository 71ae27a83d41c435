"""The reconstruction NLL from the decoder's hidden states chunk by chunk, never holding the
full logits (`model.loss.fused_cross_entropy`; as Liger Kernel's fused linear cross-entropy)."""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 26  # logits per chunk: 256 MiB in fp32


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, targets, row_weight, chunk: int):
        # h (N, d), weight (V, d), targets (N,), row_weight (N,)
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        for i in range(0, h.shape[0], chunk):
            hc, yc, wc = h[i : i + chunk], targets[i : i + chunk], row_weight[i : i + chunk]
            logits = (hc @ weight.T).float()  # (C, V)
            lse = logits.logsumexp(-1)  # (C,)
            picked = logits.gather(1, yc[:, None]).squeeze(1)  # (C,)
            loss += ((lse - picked) * wc).sum()
            g = logits.sub_(lse[:, None]).exp_()  # softmax, in place: (C, V)
            g[torch.arange(len(yc), device=g.device), yc] -= 1.0
            g = (g * wc[:, None].float()).to(h.dtype)  # d loss / d logits
            grad_h[i : i + chunk] = g @ weight.to(g.dtype)
            grad_w += (g.T @ hc.to(g.dtype)).float()
        ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_loss.to(grad_h.dtype), grad_w * grad_loss, None, None, None


# eager even in a compiled step: dynamo would recompile the chunk loop per row count
@torch.compiler.disable
def fused_linear_cross_entropy(
    h: torch.Tensor,  # (B, T, d) the decoder's normalised output (the lm_head's input)
    weight: torch.Tensor,  # (V, d) the lm_head's weight
    targets: torch.Tensor,  # (B, T)
    mask: torch.Tensor,  # (B, T) bool, True at real tokens
    chunk_elements: int = CHUNK_ELEMENTS,
) -> torch.Tensor:
    """Mean cross-entropy over the masked tokens (0-d), as masked_mean(reconstruction_nll)."""
    d = h.shape[-1]
    row_weight = mask.reshape(-1).float()
    row_weight = row_weight / row_weight.sum().clamp_min(1.0)  # on the device: no sync
    chunk = max(1, chunk_elements // weight.shape[0])
    return _FusedLinearCrossEntropy.apply(
        h.reshape(-1, d), weight, targets.reshape(-1), row_weight, chunk
    )
