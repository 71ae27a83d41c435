"""The Variational Auto-Transformer (Ferner & Wegenkittl 2022) in plain torch, no training code.

The encoder reads `w_1..w_n </s>` and two parallel heads give each token mu_t and logvar_t;
z_t = mu_t + exp(logvar_t/2) * eps is the memory the decoder (reading `<s> w_1..w_n`)
cross-attends to, so each target token has exactly one latent (the paper's eq. 5-6).

Shapes: B batch, T encoder/latent length, S decoder length, d d_model, H heads,
hs = d / H head size, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from vat.errors import check, finite


@dataclass
class VATConfig:
    """Architecture of a Variational Auto-Transformer (the paper, Appendix A defaults)."""

    vocab_size: int = 32768
    """Size of the subword vocabulary (paper: 2^15). Must match the tokenizer."""
    d_model: int = 128
    """Width of the Transformer and of every latent z_t (paper: d = 128)."""
    n_encoder_layers: int = 4
    """Encoder layers (paper: N = 4)."""
    n_decoder_layers: int = 4
    """Decoder layers (paper: N = 4)."""
    n_heads: int = 8
    """Attention heads (paper: H = 8). Must divide d_model."""
    d_ff: int = 512
    """Feed-forward inner width (paper: 512)."""
    dropout: float = 0.1
    """Dropout on embeddings, attention outputs and feed-forward outputs (paper: 0.1)."""
    max_len: int = 128
    """Longest token sequence (including </s>) the model accepts; sets the position table."""
    pad_id: int = 0
    """Id of the padding token; the tokenizer defines it (vat.tokenizer.PAD_ID)."""
    tie_embeddings: bool = True
    """Share one embedding for encoder input, decoder input and output (Vaswani et al. 3.4)."""
    norm_first: bool = False
    """Pre-LayerNorm blocks (robust in short runs); False is the paper's post-LN Transformer."""
    logvar_min: float = -10.0
    """Lower clamp of the log-variance (sigma 6.7e-3): it only stops a run to -inf."""
    logvar_max: float = 4.0
    """Upper clamp of the log-variance (sigma 7.4): keeps exp(logvar) finite in fp16/bf16."""
    sentence_dim: int = 0
    """Size of a sentence latent s beside the token latents (0: none, the paper's model); set
    by model.sentence_latent.dim in training."""

    def __post_init__(self) -> None:
        sizes = ("vocab_size", "d_model", "n_encoder_layers", "n_decoder_layers", "n_heads", "d_ff")
        for name in (*sizes, "sentence_dim"):
            v, low = getattr(self, name), int(name == "sentence_dim")
            ok = isinstance(v, int) and not isinstance(v, bool) and v + low > 0
            check(ok, f"model.arch.{name}", "an integer >= 0" if low else "a positive integer", v)
        lv_min, lv_max = self.logvar_min, self.logvar_max
        rules = (
            ("max_len", isinstance(self.max_len, int) and self.max_len >= 2, "an integer >= 2"),
            ("d_model", self.d_model % self.n_heads == 0,
             f"divisible by model.arch.n_heads={self.n_heads}"),
            ("dropout", finite(self.dropout) and 0 <= self.dropout < 1, "in [0, 1)"),
            ("sentence_dim", self.sentence_dim <= self.d_model,
             f"at most model.arch.d_model={self.d_model} (model.sentence_latent.dim sets it)"),
            ("pad_id", isinstance(self.pad_id, int) and 0 <= self.pad_id < self.vocab_size,
             f"in [0, vocab_size={self.vocab_size})"),
            ("logvar_min", finite(lv_min), "finite"),
            ("logvar_max", finite(lv_min) and finite(lv_max) and lv_max > lv_min,
             f"finite and above model.arch.logvar_min={lv_min}"),
        )  # fmt: skip
        for name, ok, expected in rules:
            check(ok, f"model.arch.{name}", expected, getattr(self, name))

    def to_dict(self) -> dict:
        d = asdict(self)
        if not self.sentence_dim:  # a model without one records the config it always did
            del d["sentence_dim"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> VATConfig:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown model config keys: {sorted(unknown)}")
        return cls(**d)


def prior_std_problem(s: object) -> str | None:
    """Why `s` cannot be the prior's scale (the KL divides by s^2), or None when it can."""
    if not (finite(s) and s > 0):
        return f"must be a positive number, got {s!r}"
    try:
        square = float(s) ** 2
    except OverflowError:
        square = math.inf
    if not 0 < square < math.inf:
        return (
            f"must be a number whose square is a finite non-zero float (1e-150..1e150), got {s!r}"
        )
    return None


class Posterior(NamedTuple):
    """q(z_t | x) = N(mu_t, diag(exp(logvar_t))) for every token."""

    mu: torch.Tensor  # (B, T, d)
    logvar: torch.Tensor  # (B, T, d)
    mask: torch.Tensor  # (B, T) bool, True at real (non-pad) tokens


class SentencePosterior(NamedTuple):
    """q(s | x) = N(mu, diag(exp(logvar))) of the sentence latent."""

    mu: torch.Tensor  # (B, k)
    logvar: torch.Tensor  # (B, k)


class VATOutput(NamedTuple):
    logits: torch.Tensor | None  # (B, S, V); None from forward(..., head=False)
    mu: torch.Tensor  # (B, T, d)
    logvar: torch.Tensor  # (B, T, d)
    z: torch.Tensor  # (B, T, d)
    mask: torch.Tensor  # (B, T) bool
    hidden: torch.Tensor | None = None  # (B, S, d) the lm_head's input, with head=False
    sentence_mu: torch.Tensor | None = None  # (B, k) with a sentence latent
    sentence_logvar: torch.Tensor | None = None  # (B, k)
    sentence: torch.Tensor | None = None  # (B, k) s as decoded: sampled, or its mean


def sinusoidal_positions(max_len: int, d_model: int) -> torch.Tensor:
    """The fixed sinusoidal table of Vaswani et al. (2017), eq. in sec. 3.5."""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
    div = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div[: d_model // 2])
    return table  # (L, d)


class Attention(nn.Module):
    """Multi-head attention over torch's fused scaled_dot_product_attention."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, d = x.shape
        return x.view(B, L, self.n_heads, d // self.n_heads).transpose(1, 2)  # (B, H, L, hs)

    def project_kv(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv_proj(source).chunk(2, dim=-1)  # 2 x (B, L, d)
        return self._heads(k), self._heads(v)  # 2 x (B, H, L, hs)

    def forward(
        self,
        x: torch.Tensor,  # (B, Lq, d)
        kv: tuple[torch.Tensor, torch.Tensor],  # 2 x (B, H, Lk, hs)
        key_mask: torch.Tensor | None = None,  # (B, Lk) bool, True = attend
        causal: bool = False,
    ) -> torch.Tensor:
        B, Lq, d = x.shape
        q = self._heads(self.q_proj(x))  # (B, H, Lq, hs)
        k, v = kv
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, Lk)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        y = y.transpose(1, 2).reshape(B, Lq, d)  # (B, H, Lq, hs) -> (B, Lq, d)
        return self.out_proj(y)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: VATConfig) -> None:
        super().__init__()
        self.attn = Attention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # x (B, T, d)
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop(self.attn(h, self.attn.project_kv(h), key_mask=mask))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self.attn(x, self.attn.project_kv(x), key_mask=mask)))
        return self.norm2(x + self.drop(self.ff(x)))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to Z, feed-forward; with a `cache` (a dict) it
    takes only the new positions, so a decoding step costs O(T)."""

    def __init__(self, cfg: VATConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.cross_attn = Attention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.drop = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def _self_attention(self, h: torch.Tensor, cache: dict | None) -> torch.Tensor:
        k, v = self.self_attn.project_kv(h)  # 2 x (B, H, S_new, hs)
        if cache is None:
            return self.self_attn(h, (k, v), causal=True)
        if "self_k" in cache:
            k = torch.cat([cache["self_k"], k], dim=2)  # (B, H, S_past + S_new, hs)
            v = torch.cat([cache["self_v"], v], dim=2)
        cache["self_k"], cache["self_v"] = k, v
        # A cached step feeds one new position (S_new = 1), whose query may see every cached
        # key; a multi-token prefill into an empty cache needs the causal mask.
        return self.self_attn(h, (k, v), causal=h.shape[1] > 1)

    def _cross_attention(
        self, h: torch.Tensor, z: torch.Tensor, z_mask: torch.Tensor, cache: dict | None
    ) -> torch.Tensor:
        if cache is not None and "cross_k" in cache:
            kv = cache["cross_k"], cache["cross_v"]
        else:
            kv = self.cross_attn.project_kv(z)  # 2 x (B, H, T, hs)
            if cache is not None:
                cache["cross_k"], cache["cross_v"] = kv
        return self.cross_attn(h, kv, key_mask=z_mask)

    def forward(
        self, x: torch.Tensor, z: torch.Tensor, z_mask: torch.Tensor, cache: dict | None = None
    ) -> torch.Tensor:
        if self.norm_first:
            x = x + self.drop(self._self_attention(self.norm1(x), cache))
            x = x + self.drop(self._cross_attention(self.norm2(x), z, z_mask, cache))
            return x + self.drop(self.ff(self.norm3(x)))
        x = self.norm1(x + self.drop(self._self_attention(x, cache)))
        x = self.norm2(x + self.drop(self._cross_attention(x, z, z_mask, cache)))
        return self.norm3(x + self.drop(self.ff(x)))


class VAT(nn.Module):
    """Encoder -> per-token Gaussian posterior -> sampled Z -> autoregressive decoder."""

    def __init__(self, config: VATConfig) -> None:
        super().__init__()
        self.config = cfg = config
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.register_buffer(
            "positions", sinusoidal_positions(cfg.max_len + 1, cfg.d_model), persistent=False
        )
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        # Pre-LN stacks need a final norm; post-LN blocks already end in one.
        self.enc_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        # The two *parallel* posterior heads of the paper (Figure 1): d -> d each.
        self.mu_head = nn.Linear(cfg.d_model, cfg.d_model)
        self.logvar_head = nn.Linear(cfg.d_model, cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.sentence_dim:  # attention pooling of the last states, its own heads, one slot
            k = cfg.sentence_dim
            self.sentence_query = nn.Linear(cfg.d_model, 1)
            self.sentence_mu_head = nn.Linear(cfg.d_model, k)
            self.sentence_logvar_head = nn.Linear(cfg.d_model, k)
            self.sentence_memory = nn.Linear(k, cfg.d_model)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            # N(0, d^-1/2) so that embedding * sqrt(d) has unit scale (Vaswani et al. 3.4).
            nn.init.normal_(module.weight, std=module.embedding_dim**-0.5)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()

    def _embed(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        L = ids.shape[1]
        if offset + L > self.positions.shape[0]:
            raise ValueError(
                f"sequence of {offset + L} tokens exceeds model.max_len={self.config.max_len}"
            )
        x = self.embed(ids) * math.sqrt(self.config.d_model)  # (B, L, d)
        return self.drop(x + self.positions[offset : offset + L])  # (B, L, d)

    def encode(self, src_ids: torch.Tensor) -> Posterior:
        """src_ids (B, T) -> per-token posterior mean and log-variance, and the pad mask."""
        return self.encode_with_sentence(src_ids)[0]

    def encode_with_sentence(
        self, src_ids: torch.Tensor
    ) -> tuple[Posterior, SentencePosterior | None]:
        """`encode`, and the sentence latent's posterior (None for a model without one)."""
        mask = src_ids != self.config.pad_id  # (B, T)
        h = self._embed(src_ids)  # (B, T, d)
        for layer in self.encoder:
            h = layer(h, mask)
        return self.posteriors(self.enc_norm(h), mask)

    def posteriors(
        self, h: torch.Tensor, mask: torch.Tensor
    ) -> tuple[Posterior, SentencePosterior | None]:
        """Both posteriors from the encoder's last states h (B, T, d)."""
        lo, hi = self.config.logvar_min, self.config.logvar_max
        post = Posterior(self.mu_head(h), self.logvar_head(h).clamp(lo, hi), mask)  # (B, T, d)
        if not self.config.sentence_dim:
            return post, None
        scores = self.sentence_query(h).squeeze(-1).masked_fill(~mask, float("-inf"))  # (B, T)
        pooled = (scores.softmax(-1)[..., None] * h).sum(1)  # (B, d)
        s_logvar = self.sentence_logvar_head(pooled).clamp(lo, hi)  # (B, k)
        return post, SentencePosterior(self.sentence_mu_head(pooled), s_logvar)

    def memory(
        self, z: torch.Tensor, z_mask: torch.Tensor, sentence: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's memory (B, T', d) and its mask: the token latents z, after the slot
        of the sentence latent (B, k) when there is one."""
        if sentence is None:
            return z, z_mask
        slot = self.sentence_memory(sentence.to(z.dtype))[:, None]  # (B, 1, d)
        return torch.cat([slot, z], 1), F.pad(z_mask, (1, 0), value=True)  # (B, 1 + T, d)

    @staticmethod
    def reparameterize(
        mu: torch.Tensor,
        logvar: torch.Tensor,
        tau: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """z = mu + tau * exp(logvar / 2) * eps, eps ~ N(0, I) (the paper; tau = 1 in training)."""
        if generator is None:  # randn_like: traceable by torch.compile with a dynamic batch
            eps = torch.randn_like(mu)
        else:
            eps = torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
        return mu + tau * torch.exp(0.5 * logvar) * eps  # (B, T, d)

    def decode(
        self,
        tgt_in: torch.Tensor,  # (B, S) decoder input ids, starting with <s>
        z: torch.Tensor,  # (B, T, d) latent memory: sampled, mu, or any given sequence
        z_mask: torch.Tensor,  # (B, T) bool, True at real latent positions
        cache: list[dict] | None = None,
        offset: int = 0,
    ) -> torch.Tensor:
        """Next-token logits (B, S, V) from any latent sequence Z. With `cache` (from
        `new_cache()`), pass only the new ids and the number already decoded as `offset`."""
        return self.lm_head(self.decode_hidden(tgt_in, z, z_mask, cache, offset))  # (B, S, V)

    def decode_hidden(self, tgt_in, z, z_mask, cache=None, offset: int = 0) -> torch.Tensor:
        """`decode` without the output projection: the (B, S, d) input of lm_head."""
        x = self._embed(tgt_in, offset)  # (B, S, d)
        for i, layer in enumerate(self.decoder):
            x = layer(x, z, z_mask, None if cache is None else cache[i])
        return self.dec_norm(x)  # (B, S, d)

    def new_cache(self) -> list[dict]:
        """An empty key/value cache for incremental decoding, one dict per decoder layer."""
        return [{} for _ in self.decoder]

    def forward(
        self,
        src_ids: torch.Tensor,  # (B, T)
        tgt_in: torch.Tensor,  # (B, S), S = T
        sample: bool = True,
        generator: torch.Generator | None = None,
        head: bool = True,
        memory_keep: torch.Tensor | None = None,
    ) -> VATOutput:
        """Encode, sample Z (or use mu), decode; head=False gives hidden states (fused CE).
        `memory_keep` (B, T) bool drops token latents from the decoder's memory (the sentence
        latent's slot always stays)."""
        (mu, logvar, mask), sentence = self.encode_with_sentence(src_ids)
        z = self.reparameterize(mu, logvar, generator=generator) if sample else mu  # (B, T, d)
        s_mu, s_logvar = sentence or (None, None)
        s = s_mu
        if sentence is not None and sample:
            s = self.reparameterize(s_mu, s_logvar, generator=generator)  # (B, k)
        keep = mask if memory_keep is None else mask & memory_keep
        hidden = self.decode_hidden(tgt_in, *self.memory(z, keep, s))  # (B, S, d)
        logits = self.lm_head(hidden) if head else None  # (B, S, V)
        return VATOutput(logits, mu, logvar, z, mask, None if head else hidden, s_mu, s_logvar, s)
