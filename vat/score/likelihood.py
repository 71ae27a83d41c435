"""The likelihood columns of the text-VAE table for a VAT with a latent per token (docs/score.md):
-ELBO with its parts, and the importance-weighted NLL -L_K (Burda et al. 2016)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from vat.model import VAT
from vat.runtime import check_allocation, eval_mode
from vat.train.losses import gaussian_kl

LOG_2PI = math.log(2 * math.pi)

# decoded (sample x sentence x position) rows per decoder pass: d_ff = 512 in 64 MiB of float32
ROWS_PER_PASS = 1 << 15
LOGIT_ELEMENTS = 1 << 24  # logits per output-projection chunk: 64 MiB of float32


def prior_log_density(z: torch.Tensor, prior_std: float) -> torch.Tensor:
    """log N(z; 0, s^2 I), summed over the last axis: (..., d) -> (...)."""
    d, s2 = z.shape[-1], float(prior_std) ** 2
    return -0.5 * (d * (LOG_2PI + math.log(s2)) + z.square().sum(-1) / s2)


def log_importance_weights(
    log_px_given_z: torch.Tensor,  # (K, B) log p(x | Z_k)
    eps: torch.Tensor,  # (K, B, T, d) the standard-normal draws: Z_k = mu + exp(logvar / 2) eps
    mu: torch.Tensor,  # (B, T, d)
    logvar: torch.Tensor,  # (B, T, d)
    mask: torch.Tensor,  # (B, T) bool, True at real latent positions
    prior_std: float,
) -> torch.Tensor:
    """log w_k = log p(x|Z_k) + log p(Z_k) - log q(Z_k|x), summed over real positions: (K, B).
    log q is taken at the draw itself ((z - mu)^2 / var = eps^2 exactly), so q = p gives 0."""
    z = mu + torch.exp(0.5 * logvar) * eps  # (K, B, T, d)
    d = mu.shape[-1]
    log_q = -0.5 * (d * LOG_2PI + logvar.sum(-1) + eps.square().sum(-1))  # (K, B, T)
    log_p = prior_log_density(z, prior_std)  # (K, B, T)
    return log_px_given_z + ((log_p - log_q) * mask).sum(-1)  # (K, B)


def closed_form_kl(
    mu: torch.Tensor, logvar: torch.Tensor, mask: torch.Tensor, prior_std: float
) -> torch.Tensor:
    """KL(q(Z|x) || p(Z)) per sentence, summed over real positions and dimensions: (B,)."""
    return (gaussian_kl(mu, logvar, prior_std).sum(-1) * mask).sum(-1)


class Bounds(NamedTuple):
    """Per sentence, in nats (each (B,) float64)."""

    log_likelihood: torch.Tensor  # L_K, the importance-weighted lower bound on log p(x)
    reconstruction: torch.Tensor  # mean_k log p(x | Z_k), the ELBO's first term
    kl: torch.Tensor  # KL(q(Z|x) || p(Z)) in closed form
    mean_log_weight: torch.Tensor  # mean_k log w_k, the ELBO from the same draws (<= L_K)
    tokens: torch.Tensor  # target tokens (subwords + </s>), long


# z (N, T, d) -> log p(x | z) (N,) for N = draws x sentences, rows draw-major
LogLikelihood = Callable[[torch.Tensor], torch.Tensor]


def samples_per_pass(batch_rows: int, samples: int, rows: int = ROWS_PER_PASS) -> int:
    """How many of the K draws fit through the decoder together (at least 1)."""
    return max(1, min(samples, rows // max(1, batch_rows)))


def importance_weighted_bounds(
    log_likelihood: LogLikelihood,
    mu: torch.Tensor,  # (B, T, d)
    logvar: torch.Tensor,  # (B, T, d)
    mask: torch.Tensor,  # (B, T) bool
    prior_std: float,
    samples: int,
    per_pass: int,
    generator: torch.Generator | None = None,
) -> Bounds:
    """L_K, the ELBO's parts and mean_k log w_k for a batch, drawing the K samples in passes
    of `per_pass` draws (a running logsumexp: memory does not grow with K)."""
    B = mu.shape[0]
    mu, logvar = mu.double(), logvar.double()
    lse = torch.full((B,), -math.inf, dtype=torch.float64, device=mu.device)
    recon = torch.zeros(B, dtype=torch.float64, device=mu.device)
    mean_log_w = torch.zeros_like(recon)
    draw = {"generator": generator, "device": mu.device, "dtype": torch.float32}
    for start in range(0, samples, per_pass):
        k = min(per_pass, samples - start)
        # (k, B, T, d), one draw per call: the draws (and the bounds) do not depend on `per_pass`
        eps = torch.stack([torch.randn(mu.shape, **draw) for _ in range(k)]).double()
        z = mu + torch.exp(0.5 * logvar) * eps  # (k, B, T, d)
        log_px = log_likelihood(z.flatten(0, 1).float()).double().view(k, B)  # (k, B)
        log_w = log_importance_weights(log_px, eps, mu, logvar, mask, prior_std)  # (k, B)
        lse = torch.logaddexp(lse, torch.logsumexp(log_w, 0))
        recon += log_px.sum(0)
        mean_log_w += log_w.sum(0)
    kl = closed_form_kl(mu, logvar, mask, prior_std)
    return Bounds(lse - math.log(samples), recon / samples, kl, mean_log_w / samples, mask.sum(-1))


def decoder_log_likelihood(
    model: VAT,
    tgt_in: torch.Tensor,  # (B, T)
    tgt_out: torch.Tensor,  # (B, T)
    mask: torch.Tensor,  # (B, T) bool
) -> LogLikelihood:
    """A LogLikelihood under the teacher-forced decoder, summed over the real target tokens; the
    output projection runs in chunks of LOGIT_ELEMENTS, so (N, T, V) logits never exist at once.
    With a sentence latent, z's first row holds s in its first k dimensions (`model_bounds`)."""
    V, k = model.config.vocab_size, model.config.sentence_dim

    def log_likelihood(z: torch.Tensor) -> torch.Tensor:
        reps = z.shape[0] // tgt_in.shape[0]
        m = mask.repeat(reps, 1)  # (N, T)
        dtype = next(model.parameters()).dtype
        z, s = (z[:, 1:], z[:, 0, :k]) if k else (z, None)
        memory = model.memory(z.to(dtype), m, s)
        hidden = model.decode_hidden(tgt_in.repeat(reps, 1), *memory)  # (N, T, d)
        h, y = hidden.flatten(0, 1), tgt_out.repeat(reps, 1).flatten()  # (N T, d), (N T,)
        out = torch.empty(len(y), dtype=torch.float32, device=h.device)
        step = max(1, LOGIT_ELEMENTS // V)
        for i in range(0, len(y), step):
            logits = model.lm_head(h[i : i + step]).float()  # (C, V)
            picked = logits.gather(1, y[i : i + step, None]).squeeze(1)
            out[i : i + step] = picked - logits.logsumexp(-1)  # (C,)
        return (out.view_as(m) * m).sum(-1)  # (N,)

    return log_likelihood


def model_bounds(
    model: VAT,
    batch: dict[str, torch.Tensor],
    prior_std: float,
    samples: int,
    generator: torch.Generator | None = None,
    rows: int = ROWS_PER_PASS,
) -> Bounds:
    """`importance_weighted_bounds` of a VAT on one `vat.tokenizer.make_batch` batch, in eval
    mode (no dropout) without autograd; the memory of a pass is checked before it is taken."""
    device = next(model.parameters()).device
    src, tgt_in, tgt_out = (batch[k].to(device) for k in ("src", "tgt_in", "tgt_out"))
    B, T = src.shape
    per_pass, cfg = samples_per_pass(B * T, samples, rows), model.config
    # a pass at its widest: draws, latents, hidden state, feed-forward, attention, a logit chunk
    widest = per_pass * B * T * (6 * cfg.d_model + cfg.d_ff + cfg.n_heads * T) + LOGIT_ELEMENTS
    check_allocation(4.0 * widest, "samples", device)
    with eval_mode(model):
        post, sentence = model.encode_with_sentence(src)  # mu, logvar (B, T, d)
        log_px = decoder_log_likelihood(model, tgt_in, tgt_out, post.mask)
        mu, logvar, mask = post.mu.float(), post.logvar.float(), post.mask
        if sentence is not None:
            # s as one more latent row, padded to d with q = p = N(0, s^2) in the extra
            # dimensions: they add 0 to log w and to the KL, and the decoder never reads them
            pad = cfg.d_model - cfg.sentence_dim
            s_mu = F.pad(sentence.mu.float(), (0, pad))
            s_logvar = F.pad(sentence.logvar.float(), (0, pad), value=2 * math.log(prior_std))
            mu, logvar = (
                torch.cat([s_mu[:, None], mu], 1),
                torch.cat([s_logvar[:, None], logvar], 1),
            )
            mask = F.pad(mask, (1, 0), value=True)  # (B, 1 + T)
        bounds = importance_weighted_bounds(
            log_px, mu, logvar, mask, prior_std, samples, per_pass, generator
        )
        return bounds._replace(tokens=post.mask.sum(-1))
