"""`VATGenerator`: the paper's reconstruction, sampling (Tables 1-2), prior decoding and
interpolation (Table 3), on text; a single string is one sentence, its result comes back alone."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from functools import partial
from typing import NamedTuple

import torch
from torch import nn
from tqdm.auto import tqdm

from vat.errors import (
    OptionError,
    check_choice,
    check_count,
    check_number,
    check_seed,
    check_sentence,
    check_sentences,
)
from vat.features import iter_encoded_ids, length_sorted_batches
from vat.generate.decoding import GREEDY, DecodeOptions, Hypothesis, decode_latents
from vat.generate.latents import (
    InterpolationMethod,
    ResampleSource,
    interpolate_latents,
    pad_latents,
    perturb_latents,
    prior_at_positions,
    prior_latents,
    sample_lengths,
)
from vat.runtime import check_allocation, eval_mode
from vat.share.loaded import LoadedVAT, check_loaded
from vat.tokenizer import VATTokenizer


class TruncationWarning(UserWarning):
    """A sentence had more subwords than the model's max_len allows and was cut."""


class ReconstructionScore(NamedTuple):
    bleu: float  # corpus BLEU, 0-100
    exact_match: float  # fraction of sentences reproduced exactly
    exact: int  # number of sentences reproduced exactly
    n: int  # number of sentences


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Unsmoothed corpus BLEU (0-100) with sacrebleu's "13a" tokenizer, comparable to WMT tables."""
    from torchmetrics.text import SacreBLEUScore

    hypotheses, references = _paired(hypotheses, references)
    if not hypotheses:
        return 0.0
    metric = SacreBLEUScore(tokenize="13a")
    return 100.0 * float(metric(list(hypotheses), [[r] for r in references]))


def reconstruction_score(
    hypotheses: Sequence[str], references: Sequence[str]
) -> ReconstructionScore:
    """Corpus BLEU and exact-match rate of reconstructions against their inputs."""
    hypotheses, references = _paired(hypotheses, references)
    exact, n = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)), len(references)
    return ReconstructionScore(corpus_bleu(hypotheses, references), exact / max(n, 1), exact, n)


def _paired(hypotheses, references) -> tuple[list[str], list[str]]:
    """Equal-length lists (zip would silently drop the extra ones)."""
    hyps, _ = check_sentences(hypotheses, "hypotheses")
    refs, _ = check_sentences(references, "references")
    if len(hyps) != len(refs):
        raise OptionError(
            "references", f"has {len(refs)} sentences for {len(hyps)} hypotheses; give one each"
        )
    return hyps, refs


def _listed(value, name: str, what: str, check) -> list:
    """`value` as a list (a single item is one), each item passed through `check`."""
    if value is None or isinstance(value, str | bytes):
        raise OptionError(name, f"expected a list of {what}, got {value!r}")
    return [check(x, name) for x in (value if isinstance(value, Iterable) else [value])]


def _positions(positions: int | Sequence[int]) -> list[int]:
    return _listed(positions, "positions", "token positions", partial(check_count, minimum=0))


class VATGenerator:
    """Generation on text in length-sorted batches; `labels` name sentences in warnings."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: VATTokenizer,
        *,
        prior_std: float = 1.0,
        length_histogram: Sequence[int] = (),
        batch_size: int = 64,
        progress: bool = False,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.prior_std = check_number(prior_std, "prior_std", low=0, low_open=True)
        self.length_histogram = list(length_histogram)
        self.batch_size = check_count(batch_size, "batch_size")
        self.progress = bool(progress)  # bars on stderr while encoding and decoding

    @classmethod
    def from_loaded(cls, loaded: LoadedVAT, batch_size: int = 64) -> VATGenerator:
        check_loaded(loaded, "VATGenerator.from_loaded")
        return cls(
            loaded.model,
            loaded.tokenizer,
            prior_std=loaded.prior_std,
            length_histogram=loaded.length_histogram,
            batch_size=batch_size,
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_len(self) -> int:
        return int(self.model.config.max_len)

    def tokenize(
        self, sentences: str | Sequence[str], labels: Sequence[str] | None = None
    ) -> list[list[int]]:
        """Subword ids cut to max_len - 1 (room for </s>), with one TruncationWarning per call."""
        texts, single = check_sentences(sentences)
        if labels is not None:
            labels, _ = check_sentences(labels, "labels")
            if len(labels) != len(texts):
                raise OptionError("labels", f"has {len(labels)} names for {len(texts)} sentences")
        keep = self.max_len - 1
        clipped = [self.tokenizer.clip(t, keep) for t in texts]
        ids = self.tokenizer.encode_batch(clipped)
        cut = [i for i, x in enumerate(ids) if len(x) > keep]
        names = [labels[i] if labels is not None else f"sentence {i + 1}" for i in cut]
        limit = f"the model's max_len={self.max_len} allows"
        if len(cut) == 1:  # a clipped text has at least the subwords its clip has
            n = len(ids[cut[0]])
            n = f"at least {n}" if len(clipped[cut[0]]) < len(texts[cut[0]]) else n
            msg = f"{names[0]} has {n} subwords, more than {limit}; truncated to its first {keep}"
        elif cut:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            msg = (
                f"{len(cut)} of {len(texts)} sentences have more subwords than {limit} and "
                f"were truncated to their first {keep} ({shown})"
            )
        if cut:
            warnings.warn(msg, TruncationWarning, stacklevel=3)
        ids = [x[:keep] for x in ids]
        return ids[0] if single else ids

    def posteriors(
        self, sentences: Sequence[str], labels: Sequence[str] | None = None
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per sentence, its posterior (mu, logvar), each (T_i, d) with T_i = subwords + 1."""
        texts, single = check_sentences(sentences)
        out = [(mu, logvar) for mu, logvar, _ in self.latents(texts, labels)]
        return out[0] if single else out

    def latents(self, sentences: Sequence[str], labels: Sequence[str] | None = None) -> list:
        """Per sentence (a list) (mu, logvar, the sentence latent's mean (k,) or None): its
        `posteriors` and what `decode` takes as `sentences`."""
        texts, _ = check_sentences(sentences)  # a single string is a list of one here
        ids = self.tokenize(texts, labels)
        out: list = [None] * len(ids)
        for b in iter_encoded_ids(self.model, ids, self.batch_size, self.progress):
            for row, i in enumerate(b.index):
                T_i = len(ids[i]) + 1  # 2 x (T_i, d)
                s = None if b.sentence_mu is None else b.sentence_mu[row]
                out[i] = (b.mu[row, :T_i], b.logvar[row, :T_i], s)
        return out

    def decode(
        self,
        zs: Sequence[torch.Tensor],
        options: DecodeOptions = GREEDY,
        seed: int | None = None,
        sentences: Sequence[torch.Tensor] | None = None,
    ) -> list[list[Hypothesis]]:
        """Decode latent sequences zs[i] (T_i, d), with the sentence latents sentences[i] (k,)
        of a model that has them; hypotheses per item, best first."""
        if not isinstance(options, DecodeOptions):
            raise OptionError("options", f"expected a DecodeOptions, got {type(options).__name__}")
        seed = check_seed(seed)
        zs = list(zs)
        d, k = self.model.config.d_model, self.model.config.sentence_dim
        for i, z in enumerate(zs):
            if not (torch.is_tensor(z) and z.dim() == 2 and z.shape[1] == d and z.shape[0] >= 1):
                shape = tuple(z.shape) if torch.is_tensor(z) else type(z).__name__
                raise OptionError("zs", f"item {i} must be a (T, {d}) tensor, T >= 1, got {shape}")
        shapes = None if sentences is None else [tuple(getattr(s, "shape", ())) for s in sentences]
        if (k and shapes != [(k,)] * len(zs)) or (not k and sentences is not None):
            wanted = f"one ({k},) tensor per latent sequence" if k else "None (no sentence latent)"
            raise OptionError("sentences", f"this model takes {wanted}, got {shapes}")
        vocab = self.model.config.vocab_size
        if options.beam_size > vocab:  # a wider beam only repeats hypotheses, at beam x cost
            raise OptionError(
                "beam", f"{options.beam_size} is more than the model's vocabulary ({vocab} tokens)"
            )
        generator = self._generator(seed)
        out: list[list[Hypothesis]] = [[] for _ in zs]
        size = self.batch_size
        if options.strategy == "beam":
            size = max(1, size // options.beam_size)
        dtype = next(self.model.parameters()).dtype
        quiet = not self.progress
        bar = tqdm(total=len(zs), desc="decoding", unit="sent", disable=quiet, leave=False)
        with eval_mode(self.model), bar:
            for index in length_sorted_batches([z.shape[0] for z in zs], size):
                z, mask = pad_latents([zs[i].to(self.device, dtype) for i in index])  # (B, T, d)
                if k:  # the sentence latent's slot leads the memory (B, 1 + T, d)
                    s = torch.stack([sentences[i] for i in index]).to(self.device, dtype)
                    z, mask = self.model.memory(z, mask, s)
                for i, hyps in zip(index, decode_latents(self.model, z, mask, options, generator)):
                    out[i] = hyps
                bar.update(len(index))
        return out

    def _generator(self, seed: int | None, device: torch.device | None = None):
        if seed is None:
            return None
        return torch.Generator(device=self.device if device is None else device).manual_seed(seed)

    def text(self, hyp: Hypothesis) -> str:
        if not isinstance(hyp, Hypothesis):
            raise OptionError("hyp", f"expected a Hypothesis, got {type(hyp).__name__}")
        return self.tokenizer.decode(hyp.ids)

    def _best_texts(
        self, zs: Sequence[torch.Tensor], options: DecodeOptions, seed: int | None, sentences=None
    ) -> list[str]:
        return [self.text(h[0]) for h in self.decode(zs, options, seed, sentences)]

    def reconstruct_hypotheses(
        self,
        sentences: Sequence[str],
        options: DecodeOptions = GREEDY,
        labels: Sequence[str] | None = None,
    ) -> list[list[Hypothesis]]:
        """Decode each sentence's token means mu (the paper: z_t = mu_t at test time)."""
        texts, single = check_sentences(sentences)
        encoded = self.latents(texts, labels)
        sentences = None if encoded[0][2] is None else [s for _, _, s in encoded]
        hyps = self.decode([mu for mu, _, _ in encoded], options, None, sentences)
        return hyps[0] if single else hyps

    def reconstruct(
        self,
        sentences: Sequence[str],
        options: DecodeOptions = GREEDY,
        labels: Sequence[str] | None = None,
    ) -> list[str]:
        """The best decoding of each sentence's token means."""
        texts, single = check_sentences(sentences)
        out = [self.text(h[0]) for h in self.reconstruct_hypotheses(texts, options, labels)]
        return out[0] if single else out

    def sample(
        self,
        sentences: Sequence[str],
        num_samples: int = 5,
        tau: float = 1.0,
        options: DecodeOptions = GREEDY,
        seed: int | None = 0,
        positions: Sequence[int] | None = None,
        labels: Sequence[str] | None = None,
        source: ResampleSource = "posterior",
    ) -> list[list[str]]:
        """z_t = mu_t + tau * sigma_t * eps at every token (Table 1) or only at `positions`
        (Table 2; n_i is the </s> latent); source="prior" draws them from N(0, s^2 I). A
        sentence latent stays at its mean: the samples vary the token latents."""
        sentences, single = check_sentences(sentences)
        n = check_count(num_samples, "num_samples")
        tau = check_number(tau, "tau", low=0)
        seed = check_seed(seed)
        source = check_choice(source, "source", ("posterior", "prior"))
        if positions is not None:
            positions = _positions(positions)
        if source == "prior" and positions is None:
            raise OptionError("source", "'prior' redraws chosen positions; give positions")
        cfg = self.model.config  # every latent is (T <= max_len, d) float32
        check_allocation(
            4.0 * n * len(sentences) * cfg.max_len * cfg.d_model, "num_samples", self.device
        )
        posts = self.latents(sentences, labels)
        generator = self._generator(seed)
        zs = []
        for i, (mu, logvar, _) in enumerate(posts):
            where = None
            if positions is not None:
                if bad := [p for p in positions if p >= mu.shape[0]]:
                    name = labels[i] if labels is not None else f"sentence {i + 1}"
                    raise OptionError(
                        "positions",
                        f"{bad} out of range for {name}, which has latent positions "
                        f"0..{mu.shape[0] - 1}",
                    )
                where = torch.zeros(n, mu.shape[0], dtype=torch.bool, device=mu.device)  # (n, T_i)
                where[:, positions] = True
            mu_n, lv_n = mu.expand(n, *mu.shape), logvar.expand(n, *logvar.shape)  # (n, T_i, d)
            if source == "prior":
                z = prior_at_positions(mu_n, where, self.prior_std, generator)  # (n, T_i, d)
            else:
                z = perturb_latents(mu_n, lv_n, tau, where, generator)  # (n, T_i, d)
            zs.extend(z.unbind(0))
        kept = None if posts[0][2] is None else [s for *_, s in posts for _ in range(n)]
        texts = self._best_texts(zs, options, None if seed is None else seed + 1, kept)
        out = [texts[i * n : (i + 1) * n] for i in range(len(posts))]
        return out[0] if single else out

    def resample_token(
        self,
        sentences: Sequence[str],
        positions: Sequence[int],
        num_samples: int = 5,
        tau: float = 1.0,
        options: DecodeOptions = GREEDY,
        seed: int | None = 0,
        labels: Sequence[str] | None = None,
        source: ResampleSource = "posterior",
    ) -> list[list[str]]:
        """`sample` redrawing only the latents at `positions` (a single int is one)."""
        positions = _positions(positions)
        if not positions:
            raise OptionError("positions", "needs at least one token position")
        return self.sample(sentences, num_samples, tau, options, seed, positions, labels, source)

    def interpolate(
        self,
        a: str,
        b: str,
        alphas: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
        method: InterpolationMethod = "linear",
        options: DecodeOptions = GREEDY,
        labels: Sequence[str] | None = None,
    ) -> list[str]:
        """Decode (1 - alpha) Z_a + alpha Z_b (or slerp) of two sentences' token means (and of
        their sentence latents' means)."""
        a, b = check_sentence(a, "a"), check_sentence(b, "b")
        alphas = _listed(alphas, "alphas", "numbers", check_number)
        if not alphas:
            raise OptionError("alphas", "needs at least one weight")
        method = check_choice(method, "method", ("linear", "slerp"))
        (mu_a, _, s_a), (mu_b, _, s_b) = self.latents([a, b], labels)
        sentences = None
        if s_a is not None:  # (1, k) sequences of one: the same mix
            sentences = [s[0] for s in interpolate_latents(s_a[None], s_b[None], alphas, method)]
        zs = interpolate_latents(mu_a, mu_b, alphas, method)
        return self._best_texts(zs, options, None, sentences)

    def prior(
        self,
        num_samples: int = 10,
        length: int | None = None,
        options: DecodeOptions = GREEDY,
        seed: int | None = 0,
        prior_std: float | None = None,
    ) -> list[tuple[int, str]]:
        """(T, text) decodings of z ~ N(0, s^2 I), T drawn from training lengths unless given."""
        n = check_count(num_samples, "num_samples")
        seed = check_seed(seed)
        if prior_std is not None:
            prior_std = check_number(prior_std, "prior_std", low=0, low_open=True)
        cfg = self.model.config
        check_allocation(4.0 * n * cfg.max_len * cfg.d_model, "num_samples", self.device)
        generator = self._generator(seed, torch.device("cpu"))
        if length is None:
            lengths = sample_lengths(self.length_histogram, n, self.max_len, generator)
        elif 1 <= check_count(length, "length") <= self.max_len:
            lengths = [int(length)] * n
        else:
            raise OptionError(
                "length", f"must be in 1..{self.max_len} (the model's max_len), got {length}"
            )
        s = self.prior_std if prior_std is None else prior_std
        zs = prior_latents(lengths, cfg.d_model, s, generator)
        sentences = None  # drawn after the token latents: a model without one draws as before
        if cfg.sentence_dim:
            sentences = [x[0] for x in prior_latents([1] * n, cfg.sentence_dim, s, generator)]
        seed = None if seed is None else seed + 1
        return list(zip(lengths, self._best_texts(zs, options, seed, sentences)))

    def score(
        self,
        sentences: Sequence[str],
        options: DecodeOptions = GREEDY,
        labels: Sequence[str] | None = None,
    ) -> ReconstructionScore:
        """Corpus BLEU and exact match of mu-decodings against the inputs."""
        texts, _ = check_sentences(sentences)
        return reconstruction_score(self.reconstruct(texts, options, labels), texts)
