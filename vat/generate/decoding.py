"""Greedy, beam and sampled decoding of any latent sequence Z (B, T, d) with its mask (B, T),
over one cached step function; outputs are subword ids without <s>, cut at the first </s>."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from torch import nn

from vat.errors import OptionError, check_choice, check_count, check_number
from vat.tokenizer import BOS_ID, EOS_ID, PAD_ID

Strategy = Literal["greedy", "beam", "sample"]


@dataclass(frozen=True)
class DecodeOptions:
    """How to turn a latent sequence into tokens."""

    strategy: Strategy = "greedy"  # greedy (argmax), beam, or sample (ancestral)
    beam_size: int = 5  # the paper decodes with beam 5
    length_penalty: float = 1.0  # beam score = log-prob / length**length_penalty (</s> counts)
    temperature: float = 1.0
    top_k: int = 0  # sample among the k most probable tokens (0 = no limit)
    top_p: float = 1.0  # sample among the smallest set of tokens whose probability reaches p
    max_len: int | None = None  # most tokens to generate, </s> included (None: the model's)
    min_len: int = 0  # </s> is forbidden before this many tokens
    use_cache: bool = True  # reuse cached self-attention keys/values (O(T) per step)

    def __post_init__(self) -> None:
        checked = {
            "strategy": check_choice(self.strategy, "strategy", ("greedy", "beam", "sample")),
            "beam_size": check_count(self.beam_size, "beam"),
            "length_penalty": check_number(self.length_penalty, "length_penalty"),
            "temperature": check_number(self.temperature, "temperature", low=0, low_open=True),
            "top_k": check_count(self.top_k, "top_k", minimum=0),
            "top_p": check_number(self.top_p, "top_p", low=0, high=1, low_open=True),
            "max_len": None if self.max_len is None else check_count(self.max_len, "max_len"),
            "min_len": check_count(self.min_len, "min_len", minimum=0),
        }
        if not isinstance(self.use_cache, bool):
            raise OptionError("use_cache", f"must be True or False, got {self.use_cache!r}")
        if checked["max_len"] is not None and checked["min_len"] > checked["max_len"]:
            # else every output would stop unfinished at max_len, silently
            raise OptionError(
                "min_len", f"must be at most max_len ({self.max_len}), got {self.min_len}"
            )
        for name, value in checked.items():  # numpy scalars become plain int and float
            object.__setattr__(self, name, value)


GREEDY = DecodeOptions()


class Hypothesis(NamedTuple):
    ids: list[int]  # generated subword ids, without <s> and </s>
    score: float  # what the hypotheses are ranked by (beam: logprob / length**length_penalty)
    logprob: float  # sum of the model's log-probabilities of the generated tokens, </s> included
    finished: bool  # True if </s> was generated within max_len


class _Stepper:
    """Next-token log-probabilities, one position at a time (O(T) a step with the cache)."""

    def __init__(
        self, model: nn.Module, z: torch.Tensor, z_mask: torch.Tensor, use_cache: bool
    ) -> None:
        self.model, self.z, self.z_mask = model, z, z_mask
        self.cache = model.new_cache() if use_cache else None

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:  # tokens (N, L) -> (N, V)
        if self.cache is None:
            logits = self.model.decode(tokens, self.z, self.z_mask)  # (N, L, V)
        else:
            last, offset = tokens[:, -1:], tokens.shape[1] - 1
            logits = self.model.decode(last, self.z, self.z_mask, cache=self.cache, offset=offset)
        return logits[:, -1].float().log_softmax(-1)  # (N, V)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (A',) of the batch: Z, its mask and every cached tensor."""
        self.z, self.z_mask = self.z[rows], self.z_mask[rows]  # (A', T, d), (A', T)
        for layer in self.cache or []:
            for key, value in layer.items():
                layer[key] = value.index_select(0, rows)  # (A', H, L, hs)

    def reorder(self, rows: torch.Tensor) -> None:
        """Row i continues row rows[i]; a sentence's beams share Z, so only self-attention moves."""
        for layer in self.cache or []:
            for key in ("self_k", "self_v"):
                if key in layer:
                    layer[key] = layer[key].index_select(0, rows)  # (N, H, L, hs)


def _check_latents(z: torch.Tensor, z_mask: torch.Tensor) -> None:
    if not (torch.is_tensor(z) and z.dim() == 3 and z.is_floating_point()):
        what = f"a {z.dim()}-D {z.dtype} tensor" if torch.is_tensor(z) else type(z).__name__
        raise OptionError("z", f"expected latents as a float tensor (B, T, d), got {what}")
    if not (torch.is_tensor(z_mask) and tuple(z_mask.shape) == tuple(z.shape[:2])):
        shape = tuple(z_mask.shape) if torch.is_tensor(z_mask) else type(z_mask).__name__
        raise OptionError("z_mask", f"expected a (B, T) = {tuple(z.shape[:2])} mask, got {shape}")


def _resolve_max_len(model: nn.Module, max_len: int | None) -> int:
    limit = int(model.config.max_len)
    if max_len is not None and max_len > limit:
        raise OptionError("max_len", f"{max_len} exceeds the model's max_len={limit}")
    return limit if max_len is None else max_len


def _mask_specials(logp: torch.Tensor, step: int, min_len: int) -> torch.Tensor:
    """<pad> and <s> are never outputs; </s> waits for min_len tokens. In place, (N, V)."""
    logp[:, [PAD_ID, BOS_ID]] = -math.inf
    if step < min_len:
        logp[:, EOS_ID] = -math.inf
    return logp


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set every token outside the top-k and outside the top-p nucleus to -inf. (N, V)."""
    top_k = check_count(top_k, "top_k", minimum=0)
    top_p = check_number(top_p, "top_p", low=0, high=1, low_open=True)
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
        cum = sorted_logits.softmax(-1).cumsum(-1)  # (N, V)
        # Drop a token when the tokens ranked above it already reach p; the top one stays.
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p  # (N, V)
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, -math.inf)
    return logits


@torch.no_grad()
def _autoregress(
    model: nn.Module,
    z: torch.Tensor,
    z_mask: torch.Tensor,
    o: DecodeOptions,
    choose: Callable[[torch.Tensor], torch.Tensor],
) -> list[Hypothesis]:
    """`choose` maps log-probs (A, V) to next tokens (A,); finished rows leave the batch."""
    B = z.shape[0]
    stepper = _Stepper(model, z, z_mask, o.use_cache)
    tokens = torch.full((B, 1), BOS_ID, dtype=torch.long, device=z.device)  # (A, L)
    active = torch.arange(B, device=z.device)  # (A,) original row of each active row
    generated: list[list[int]] = [[] for _ in range(B)]
    logprob = torch.zeros(B, device=z.device)
    finished = torch.zeros(B, dtype=torch.bool, device=z.device)
    for step in range(_resolve_max_len(model, o.max_len)):
        logp = _mask_specials(stepper(tokens), step, o.min_len)  # (A, V)
        nxt = choose(logp)  # (A,)
        logprob[active] += logp.gather(1, nxt[:, None]).squeeze(1)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)  # (A, L + 1)
        ended = nxt == EOS_ID  # (A,)
        if bool(ended.any()):
            for row, ids in zip(active[ended].tolist(), tokens[ended, 1:-1].tolist()):
                generated[row] = ids
            finished[active[ended]] = True
            keep = (~ended).nonzero().squeeze(1)  # (A',)
            if keep.numel() == 0:
                break
            active, tokens = active[keep], tokens[keep]  # (A',), (A', L + 1)
            stepper.select(keep)
    else:  # max_len reached: the rows still active stop unfinished
        for row, ids in zip(active.tolist(), tokens[:, 1:].tolist()):
            generated[row] = ids
    lps = logprob.tolist()
    return list(map(Hypothesis, generated, lps, lps, finished.tolist()))


def greedy_decode(
    model: nn.Module,
    z: torch.Tensor,
    z_mask: torch.Tensor,
    max_len: int | None = None,
    *,
    min_len: int = 0,
    use_cache: bool = True,
) -> list[list[int]]:
    """Argmax decoding of latents z (B, T, d) with mask (B, T): subword ids per row."""
    o = DecodeOptions(max_len=max_len, min_len=min_len, use_cache=use_cache)  # checked
    return [h.ids for (h,) in decode_latents(model, z, z_mask, o)]


def sample_decode(
    model: nn.Module,
    z: torch.Tensor,
    z_mask: torch.Tensor,
    max_len: int | None = None,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_len: int = 0,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> list[Hypothesis]:
    """Ancestral sampling; scores are the model's own (temperature 1) log-probabilities."""
    o = DecodeOptions(
        "sample",
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        max_len=max_len,
        min_len=min_len,
        use_cache=use_cache,
    )  # checked
    return [h for (h,) in decode_latents(model, z, z_mask, o, generator)]


def beam_search(
    model: nn.Module,
    z: torch.Tensor,
    z_mask: torch.Tensor,
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len: int | None = None,
    *,
    min_len: int = 0,
    use_cache: bool = True,
    n_best: int | None = None,
) -> list[list[Hypothesis]]:
    """Per row the n_best hypotheses, best first. A row stops once it holds beam_size finished
    hypotheses and its best live beam is no better than their worst (Hugging Face's rule: exact
    for length_penalty = 0); rows that never finish return their live beams."""
    o = DecodeOptions(
        "beam",
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_len=max_len,
        min_len=min_len,
        use_cache=use_cache,
    )  # checked
    _check_latents(z, z_mask)
    n_best = o.beam_size if n_best is None else min(check_count(n_best, "n_best"), o.beam_size)
    return _beam(model, z, z_mask, o, n_best)


@torch.no_grad()
def _beam(
    model: nn.Module, z: torch.Tensor, z_mask: torch.Tensor, o: DecodeOptions, n_best: int
) -> list[list[Hypothesis]]:
    B, K, dev = z.shape[0], o.beam_size, z.device
    # Every beam of a sentence decodes the same Z: row b * K + k is beam k of sentence b.
    stepper = _Stepper(model, *(t.repeat_interleave(K, 0) for t in (z, z_mask)), o.use_cache)
    tokens = torch.full((B * K, 1), BOS_ID, dtype=torch.long, device=dev)  # (B*K, 1)
    scores = torch.full((B, K), -math.inf, device=dev)  # (B, K) summed log-probs of live beams
    scores[:, 0] = 0.0  # the K beams start identical; keep one so the first step is not K copies
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    done = [False] * B
    base = torch.arange(B, device=dev)[:, None] * K  # (B, 1)

    def norm(logprob: float, length: int) -> float:
        return logprob / length**o.length_penalty

    length = 0
    for step in range(_resolve_max_len(model, o.max_len)):
        length = step + 1  # generated tokens after this step, </s> included
        logp = _mask_specials(stepper(tokens), step, o.min_len)  # (B*K, V)
        V = logp.shape[-1]
        cand = scores[:, :, None] + logp.view(B, K, V)  # (B, K, V)
        top_s, top_i = cand.view(B, K * V).topk(min(2 * K, K * V), dim=1)  # (B, 2K), best first
        beam, tok = top_i // V, top_i % V  # (B, 2K) source beam and token of each candidate
        is_eos = tok == EOS_ID  # (B, 2K)
        # A beam has one </s> continuation, so 2K candidates always hold K that go on.
        ended = is_eos & (torch.arange(top_s.shape[1], device=dev) < K) & top_s.isfinite()
        ended_at = ended.nonzero().tolist()
        if ended_at:  # one host transfer per step, not one per hypothesis
            beam_l, top_l = beam.tolist(), top_s.tolist()
            for b, j in ended_at:
                if done[b]:
                    continue
                ids, lp = tokens[b * K + beam_l[b][j]].tolist()[1:], top_l[b][j]
                finished[b].append(Hypothesis(ids, norm(lp, length), lp, True))
                finished[b] = sorted(finished[b], key=lambda h: -h.score)[:K]
        live_s, live_j = top_s.masked_fill(is_eos, -math.inf).topk(K, dim=1)  # (B, K)
        rows = (base + beam.gather(1, live_j)).view(-1)  # (B*K,) the beam each new row extends
        tokens = torch.cat(
            [tokens.index_select(0, rows), tok.gather(1, live_j).view(-1, 1)], dim=1
        )  # (B*K, L + 1)
        stepper.reorder(rows)
        scores = live_s
        best_live = scores.max(dim=1).values.tolist()  # (B,)
        for b in range(B):
            if not done[b] and len(finished[b]) >= K:
                done[b] = norm(best_live[b], length) <= finished[b][-1].score
        if all(done):
            break
    out = []
    for b in range(B):
        hyps = list(finished[b])
        if len(hyps) < n_best:  # ran out of steps: the live beams are the best there is
            for k in range(K):
                if math.isfinite(lp := float(scores[b, k])):
                    hyps.append(
                        Hypothesis(tokens[b * K + k].tolist()[1:], norm(lp, length), lp, False)
                    )
        out.append(sorted(hyps, key=lambda h: -h.score)[:n_best])
    return out


def decode_latents(
    model: nn.Module,
    z: torch.Tensor,
    z_mask: torch.Tensor,
    options: DecodeOptions = GREEDY,
    generator: torch.Generator | None = None,
) -> list[list[Hypothesis]]:
    """Per row a list of hypotheses, best first (one for greedy and sample)."""
    if not isinstance(options, DecodeOptions):
        raise OptionError(
            "options", f"expected a DecodeOptions, got {type(options).__name__} {options!r:.60}"
        )
    _check_latents(z, z_mask)
    if options.strategy == "beam":
        return _beam(model, z, z_mask, options, options.beam_size)

    def choose(logp: torch.Tensor) -> torch.Tensor:  # (A, V) -> (A,)
        if options.strategy == "greedy":
            return logp.argmax(-1)
        probs = filter_logits(logp / options.temperature, options.top_k, options.top_p).softmax(-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return [[h] for h in _autoregress(model, z, z_mask, options, choose)]
