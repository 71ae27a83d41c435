"""The table text-VAE papers report, for a loaded VAT on any sentences (formulas: docs/score.md)."""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from vat.data.paths import default_senteval_dir
from vat.errors import OptionError, check_sentences
from vat.eval.encoders import vat_encoder
from vat.eval.tasks.registry import load_task
from vat.eval.tasks.sts import read_stsb_file
from vat.features import length_sorted_batches
from vat.generate.generator import TruncationWarning, VATGenerator, reconstruction_score
from vat.generate.variation import SampleAgreement, deterministic_note, sample_agreement
from vat.geometry.collapse import active_units, mutual_information
from vat.io import folder as existing_folder
from vat.io import regular_file
from vat.runtime import check_allocation, eval_mode
from vat.score.diversity import distinct_n, self_bleu
from vat.score.likelihood import Bounds, model_bounds
from vat.score.representation import POSITIVE_SCORE, alignment, uniformity
from vat.score.settings import ScoreSettings
from vat.share.loaded import LoadedVAT, takes_loaded
from vat.tokenizer import make_batch

# tokens per MI batch, whose q(z) is the batch's: MI <= log(512) = 6.24 nats, so compare alike
MI_BATCH = 512


@dataclass
class RepresentationPairs:
    """STS pairs for alignment and uniformity, and where they came from."""

    a: list[str]
    b: list[str]
    scores: np.ndarray
    source: str


def representation_pairs(
    sts_pairs: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None
) -> RepresentationPairs | str:
    """The pairs alignment and uniformity are measured on: `sts_pairs` (STS-B's layout), else STS-B
    test under `data_dir` or the default SentEval folder; why not (a string) if that has none."""
    if sts_pairs is not None:
        path = regular_file(Path(sts_pairs), "sts_pairs")
        pairs = read_stsb_file(path)
        return RepresentationPairs(pairs.a, pairs.b, pairs.y, str(path))
    folder = (
        existing_folder(data_dir, "data_dir") if data_dir is not None else default_senteval_dir()
    )
    test = folder / "STS" / "STSBenchmark" / "sts-test.csv"
    if data_dir is None and not test.is_file():
        return f"no STS-B test split at {test}; give sts_pairs or data_dir"
    pairs = load_task(folder, "STSBenchmark").splits["test"]
    return RepresentationPairs(pairs.a, pairs.b, pairs.y, "STS-B test")  # type: ignore[union-attr]


@dataclass
class ScoreTable:
    """One row of the text-VAE table (nats unless named otherwise; see docs/score.md)."""

    model: str
    data: dict[str, Any]
    settings: dict[str, Any]
    likelihood: dict[str, float]
    latent: dict[str, Any]
    reconstruction: dict[str, Any]
    samples: dict[str, Any] = field(default_factory=dict)
    representation: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """The table as `vat score` prints it."""
        return format_table(self)


@takes_loaded
def score_table(
    loaded: LoadedVAT,
    sentences: Sequence[str],
    settings: ScoreSettings | None = None,
    pairs: RepresentationPairs | str | None = None,
    source: str = "given sentences",
) -> ScoreTable:
    """Score `sentences` (named `source`); `pairs` adds alignment and uniformity."""
    settings = settings if settings is not None else ScoreSettings()
    sentences = _checked_sentences(sentences)
    if settings.prior_samples and not any(loaded.length_histogram[1 : loaded.config.max_len + 1]):
        # their lengths come from the training length histogram: said before any work
        raise OptionError(
            "prior_samples",
            f"{loaded.name} records no length histogram to draw the prior samples' lengths "
            "from; set it to 0 to leave prior samples out",
        )
    cfg = loaded.config  # the samples' latents, refused before any work if they cannot fit
    latents = 4.0 * cfg.max_len * cfg.d_model
    for name, per in (("diversity_samples", len(sentences)), ("prior_samples", 1)):
        check_allocation(latents * getattr(settings, name) * per, name, loaded.device)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    ids, truncated = _subwords(loaded, sentences)
    lik, mu, logvar = _likelihood(loaded, ids, settings)
    seconds["likelihood"] = time.perf_counter() - start

    t = time.perf_counter()
    latent = {
        "mi": mutual_information(
            mu, logvar, batch_size=MI_BATCH, max_tokens=None, seed=settings.seed
        ),
        "mi_batch_tokens": MI_BATCH,
        "au": active_units(mu),
        "dims": int(mu.shape[1]),
        "latent_tokens": int(mu.shape[0]),
    }
    seconds["latent"] = time.perf_counter() - t

    gen = VATGenerator.from_loaded(loaded, batch_size=max(settings.batch_size, 64))
    gen.progress = settings.progress
    t = time.perf_counter()
    with warnings.catch_warnings():  # counted once above as `truncated`, not once per line
        warnings.simplefilter("ignore", TruncationWarning)
        means = gen.reconstruct(sentences)
        recon = reconstruction_score(means, sentences)
        seconds["reconstruction"] = time.perf_counter() - t
        t = time.perf_counter()
        samples = _diversity(gen, sentences, means, settings)
    seconds["samples"] = time.perf_counter() - t
    t = time.perf_counter()
    representation = _representation(loaded, pairs, settings.batch_size)
    seconds["representation"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - start
    return ScoreTable(
        model=loaded.name,
        data={
            "source": source,
            "sentences": len(sentences),
            "target_tokens": lik["target_tokens"],
            "truncated": truncated,
            "max_len": int(loaded.config.max_len),
        },
        settings={
            **{k: v for k, v in asdict(settings).items() if k != "progress"},
            "prior_std": loaded.prior_std,
        },
        likelihood={k: v for k, v in lik.items() if k != "target_tokens"},
        latent=latent,
        reconstruction={
            "bleu": recon.bleu,
            "exact_match": recon.exact_match,
            "decoding": "greedy from mu",
            "bleu_metric": "torchmetrics SacreBLEUScore(tokenize='13a')",
        },
        samples=samples,
        representation=representation,
        seconds=seconds,
    )


def _checked_sentences(sentences: Sequence[str]) -> list[str]:
    out, _ = check_sentences(sentences)
    if not out:
        raise OptionError("sentences", "is empty; give at least one sentence")
    blank = next((i for i, s in enumerate(out, 1) if not s.strip()), None)
    if blank is not None:
        raise OptionError("sentences", f"item {blank} is empty; every sentence needs a word")
    return out


def _subwords(loaded: LoadedVAT, sentences: list[str]) -> tuple[list[list[int]], int]:
    """Subword ids cut to max_len - 1 (the </s> takes the last place), and how many were cut."""
    keep = loaded.config.max_len - 1
    ids = loaded.tokenizer.encode_batch(sentences, max_tokens=keep + 1)  # + 1: see the cut
    return [x[:keep] for x in ids], sum(len(x) > keep for x in ids)


def _likelihood(
    loaded: LoadedVAT, ids: list[list[int]], settings: ScoreSettings
) -> tuple[dict[str, float], torch.Tensor, torch.Tensor]:
    """The likelihood columns, and every latent position's mu and logvar (for MI and AU)."""
    n, K = len(ids), settings.samples
    parts = {k: np.zeros(n) for k in Bounds._fields}  # per sentence
    mus, logvars = [], []
    device = loaded.device
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    quiet = not settings.progress
    bar = tqdm(total=n * K, desc=f"scoring (K={K})", unit="sample", disable=quiet, leave=False)
    with bar:
        for index in length_sorted_batches([len(x) for x in ids], settings.batch_size):
            batch = make_batch([ids[i] for i in index])
            b = model_bounds(loaded.model, batch, loaded.prior_std, K, generator)
            for key, value in b._asdict().items():
                parts[key][index] = value.cpu().numpy()
            with eval_mode(loaded.model):
                post = loaded.model.encode(batch["src"].to(device))
            mus.append(post.mu[post.mask].float().cpu())
            logvars.append(post.logvar[post.mask].float().cpu())
            bar.update(len(index) * K)
    total = int(parts["tokens"].sum())
    recon, kl = parts["reconstruction"], parts["kl"]
    nll = -parts["log_likelihood"].sum()
    neg_elbo = -(recon - kl).sum()
    lik = {
        "nll": nll / n,
        "nll_per_token": nll / total,
        "ppl": _perplexity(nll / total),
        "neg_elbo": neg_elbo / n,
        "neg_elbo_per_token": neg_elbo / total,
        "ppl_elbo": _perplexity(neg_elbo / total),
        "reconstruction": -recon.sum() / n,
        "reconstruction_per_token": -recon.sum() / total,
        "kl": kl.sum() / n,
        "kl_per_token": kl.sum() / total,
        "neg_elbo_same_draws": -parts["mean_log_weight"].sum() / n,
        "target_tokens": total,
    }
    return lik, torch.cat(mus), torch.cat(logvars)


def _perplexity(nats_per_token: float) -> float:
    """exp(nats per token), inf past float range (a point posterior's -ELBO is thousands)."""
    return math.exp(nats_per_token) if nats_per_token < 709.0 else math.inf


def _diversity(
    gen: VATGenerator, sentences: list[str], means: list[str], settings: ScoreSettings
) -> dict:
    """Sample diversity; `means`, the mu-decodings, serve the near-deterministic rule."""
    out: dict[str, Any] = {}
    M, P = settings.diversity_samples, settings.prior_samples
    if M:
        groups = gen.sample(sentences, M, 1.0, seed=settings.seed)
        agreement = sample_agreement(groups, means, sentences)
        out["variational"] = {
            "agreement_identical": agreement.identical,
            "agreement_samples": agreement.total,
            "nearly_deterministic": agreement.nearly_deterministic,
            "per_sentence": M,
            "tau": 1.0,
            "distinct_1": float(np.mean([distinct_n(g, 1) for g in groups])),
            "distinct_2": float(np.mean([distinct_n(g, 2) for g in groups])),
            "self_bleu": float(np.mean([self_bleu(g) for g in groups])),
            "same_as_input": float(
                np.mean([[s == x for s in g] for g, x in zip(groups, sentences)])
            ),
        }
    if P:
        texts = [text for _, text in gen.prior(P, seed=settings.seed)]
        out["prior"] = {
            "samples": P,
            "distinct_1": distinct_n(texts, 1),
            "distinct_2": distinct_n(texts, 2),
            "self_bleu": self_bleu(texts),
        }
    return out


def _representation(
    loaded: LoadedVAT, pairs: RepresentationPairs | str | None, batch_size: int
) -> dict[str, Any]:
    if pairs is None:
        return {}
    if isinstance(pairs, str):
        return {"skipped": pairs}
    encode = vat_encoder(loaded, batch_size=max(batch_size, 64))  # the model's own vectors
    positive = pairs.scores >= POSITIVE_SCORE
    if not positive.any():
        raise OptionError(
            "sts_pairs", f"{pairs.source} has no pair scored {POSITIVE_SCORE:g} or more"
        )
    distinct = sorted(set(pairs.a) | set(pairs.b))
    fa = encode([a for a, p in zip(pairs.a, positive) if p])
    fb = encode([b for b, p in zip(pairs.b, positive) if p])
    return {
        "features": encode.features,  # type: ignore[attr-defined]
        "pairs": pairs.source,
        "alignment": alignment(fa, fb),
        "positive_pairs": int(positive.sum()),
        "uniformity": uniformity(encode(distinct)),
        "sentences": len(distinct),
    }


PPL_NOTE = (  # a PPL with a latent per token reads as broken to anyone who knows LM perplexities
    "note: PPL bounds the likelihood of a model with a latent per token and includes what those "
    "latents cost (the rate, KL above): it is not comparable to a language model's perplexity"
)


def format_table(t: ScoreTable) -> str:
    lik, lat, s = t.likelihood, t.latent, t.settings
    K = s["samples"]
    rows = [
        f"{t.model} on {t.data['source']}: {t.data['sentences']} sentences, "
        f"{t.data['target_tokens']} target tokens (subwords + </s>), K = {K}, seed {s['seed']}",
        f"{'':<44}{'per sentence':>14}{'per token':>12}",
        _row(f"NLL (importance-weighted, K={K})", lik["nll"], lik["nll_per_token"]),
        _row("PPL = exp(NLL per token)", None, lik["ppl"]),
        _row("-ELBO", lik["neg_elbo"], lik["neg_elbo_per_token"]),
        _row(
            "  reconstruction -E_q log p(x|z)",
            lik["reconstruction"],
            lik["reconstruction_per_token"],
        ),
        _row("  KL(q(z|x) || p(z)) (the rate)", lik["kl"], lik["kl_per_token"]),
        _row(
            f"MI I(x;z) (per token latent, {lat['mi_batch_tokens']}-token batches)", None, lat["mi"]
        ),
        f"{'AU active units (Cov > 0.01)':<44}{'':>14}{lat['au']:>9} / {lat['dims']}",
        _row("reconstruction BLEU (greedy from mu)", None, t.reconstruction["bleu"]),
    ]
    v, p = t.samples.get("variational"), t.samples.get("prior")
    named = [(f"  variational (M={v['per_sentence']} each, tau 1)", v)] if v else []
    named += [(f"  prior N(0, {s['prior_std']:g}^2 I) (P={p['samples']})", p)] if p else []
    if named:
        rows.append(f"{'samples':<44}{'distinct-1':>14}{'distinct-2':>12}{'self-BLEU':>11}")
    for name, x in named:
        rows.append(
            f"{name:<44}{x['distinct_1']:>14.3f}{x['distinct_2']:>12.3f}{x['self_bleu']:>11.1f}"
        )
    r = t.representation
    if r.get("skipped"):
        rows.append(f"alignment and uniformity: skipped ({r['skipped']})")
    elif r:
        rows.append(
            f"features {r['features']} on {r['pairs']}: alignment {r['alignment']:.3f} "
            f"({r['positive_pairs']} pairs scored >= {POSITIVE_SCORE:g}), uniformity "
            f"{r['uniformity']:.3f} ({r['sentences']} sentences)"
        )
    if v and v.get("nearly_deterministic"):  # the one rule, vat.generate.variation
        agreement = SampleAgreement(v["agreement_identical"], v["agreement_samples"])
        rows.append(
            f"note: {deterministic_note(agreement, v['tau'])} "
            f"(this model: {lik['kl_per_token']:.1f} nats per token)"
        )
    rows.append(PPL_NOTE)
    if t.data["truncated"]:
        rows.append(
            f"note: {t.data['truncated']} sentence(s) had more than max_len - 1 = "
            f"{t.data['max_len'] - 1} subwords and were scored cut to that length"
        )
    return "\n".join(rows)


def _row(label: str, per_sentence: float | None, per_token: float) -> str:
    first = "" if per_sentence is None else _number(per_sentence, 2)
    return f"{label:<44}{first:>14}{_number(per_token, 3):>12}"


def _number(x: float, digits: int) -> str:
    # a perplexity at tens of nats per token is astronomically large: print it as 1.2e+71
    return f"{x:.3e}" if abs(x) >= 1e6 else f"{x:.{digits}f}"
