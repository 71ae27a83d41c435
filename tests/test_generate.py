"""vat.generate (decoding, latents, generator): decoding from latents, variational sampling,
prior, interpolation, BLEU.

Tiny configs, CPU, one thread (2 shared cores: torch's thread pool only adds contention).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config
from torch import nn

from vat.errors import VatError
from vat.generate.decoding import (
    DecodeOptions,
    beam_search,
    decode_latents,
    filter_logits,
    greedy_decode,
    sample_decode,
)
from vat.generate.generator import (
    TruncationWarning,
    VATGenerator,
    corpus_bleu,
    reconstruction_score,
)
from vat.generate.latents import (
    interpolate_latents,
    perturb_latents,
    prior_latents,
    sample_lengths,
    slerp,
)
from vat.model import VAT
from vat.tokenizer import BOS_ID, EOS_ID, make_batch


@pytest.fixture(scope="module")
def random_model(tiny_tokenizer) -> VAT:
    torch.manual_seed(0)
    return VAT(tiny_config(tiny_tokenizer.vocab_size)).eval()


def train_tiny_autoencoder(tokenizer, sentences: list[str], steps: int = 150) -> VAT:
    """A tiny VAT trained as a plain autoencoder (z = mu, KL off) with Adam; ~150 steps
    (a few seconds on one thread) reconstruct 8 sentences exactly."""
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = VAT(tiny_config(tokenizer.vocab_size))
    batch = make_batch(tokenizer.encode_batch(sentences))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        logits = model(batch["src"], batch["tgt_in"], sample=False).logits  # (B, S, V)
        loss = F.cross_entropy(logits.transpose(1, 2), batch["tgt_out"], ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.set_num_threads(n_threads)
    return model.eval()


@pytest.fixture(scope="module")
def overfit(tiny_tokenizer, tiny_sentences) -> tuple[VATGenerator, list[str]]:
    sentences = tiny_sentences[:8]
    model = train_tiny_autoencoder(tiny_tokenizer, sentences)
    return VATGenerator(
        model, tiny_tokenizer, prior_std=0.4, length_histogram=[0, 0, 1, 3, 5, 4, 2, 1]
    ), sentences


def _latents(
    B: int = 5, T: int = 7, d: int = 32, seed: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, T, d, generator=g)  # (B, T, d)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[2:, T - 3 :] = False  # ragged rows: the mask must be honoured in both paths
    return z, mask


# -- decoding from latents ---------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_uncached(tiny_tokenizer, norm_first):
    torch.manual_seed(0)
    model = VAT(tiny_config(tiny_tokenizer.vocab_size, norm_first=norm_first)).eval()
    z, mask = _latents()
    assert greedy_decode(model, z, mask, 20) == greedy_decode(model, z, mask, 20, use_cache=False)
    # Beam search reorders the cache along dim 0 every step: a wrong reorder shows up here.
    cached = beam_search(model, z, mask, 3, 1.0, 12)
    naive = beam_search(model, z, mask, 3, 1.0, 12, use_cache=False)
    assert [[h.ids for h in r] for r in cached] == [[h.ids for h in r] for r in naive]
    for rc, rn in zip(cached, naive):
        assert [h.score for h in rc] == pytest.approx([h.score for h in rn], abs=1e-4)
    s1 = sample_decode(model, z, mask, 15, top_k=20, generator=torch.Generator().manual_seed(3))
    s2 = sample_decode(
        model, z, mask, 15, top_k=20, use_cache=False, generator=torch.Generator().manual_seed(3)
    )
    assert [h.ids for h in s1] == [h.ids for h in s2]


def test_rows_that_finish_early_leave_the_batch(overfit):
    """On a trained model rows end at different steps and are dropped from the batch (and the
    cache); results must equal decoding each row alone, cached or not."""
    gen, sentences = overfit
    with torch.no_grad():
        post = gen.model.encode(make_batch(gen.tokenizer.encode_batch(sentences))["src"])
    z, mask = post.mu, post.mask  # (B, T, d), (B, T)
    batched = greedy_decode(gen.model, z, mask)
    assert len({len(x) for x in batched}) > 3  # lengths really differ
    alone = [
        greedy_decode(
            gen.model, z[i : i + 1, : int(mask[i].sum())], mask[i : i + 1, : int(mask[i].sum())]
        )[0]
        for i in range(len(sentences))
    ]
    assert batched == alone == greedy_decode(gen.model, z, mask, use_cache=False)
    s1 = sample_decode(
        gen.model, z, mask, temperature=1.5, generator=torch.Generator().manual_seed(0)
    )
    s2 = sample_decode(
        gen.model,
        z,
        mask,
        temperature=1.5,
        use_cache=False,
        generator=torch.Generator().manual_seed(0),
    )
    assert [h.ids for h in s1] == [h.ids for h in s2]


def test_beam_one_equals_greedy(random_model, overfit):
    z, mask = _latents()
    greedy = decode_latents(random_model, z, mask, DecodeOptions(max_len=20))
    beam1 = beam_search(random_model, z, mask, beam_size=1, length_penalty=1.0, max_len=20)
    assert [g[0].ids for g in greedy] == [b[0].ids for b in beam1]
    assert [g[0].logprob for g in greedy] == pytest.approx([b[0].logprob for b in beam1], abs=1e-4)
    # ...and on a model that does emit </s>, so that finishing is exercised too.
    gen, sentences = overfit
    mu = [m for m, _ in gen.posteriors(sentences)]
    g = gen.decode(mu, DecodeOptions())
    b = gen.decode(mu, DecodeOptions(strategy="beam", beam_size=1))
    assert [h[0].ids for h in g] == [h[0].ids for h in b]
    assert all(h[0].finished for h in b)


class TableLM(nn.Module):
    """A hand-built 'decoder' behind VAT's decode interface: next-token probabilities are a
    table keyed by the prefix, and Z is ignored. Greedy takes A (0.55) then C (0.36), total
    0.198; the better sequence starts with the less likely B: B </s> = 0.45 * 0.9 = 0.405."""

    A, B, C, D = 4, 5, 6, 7
    TABLE = {
        (): {A: 0.55, B: 0.45},
        (A,): {EOS_ID: 0.30, C: 0.36, D: 0.34},
        (B,): {EOS_ID: 0.90, C: 0.05, D: 0.05},
    }

    def __init__(self) -> None:
        super().__init__()
        self.config = tiny_config(8, max_len=6)
        self.dummy = nn.Parameter(torch.zeros(1))

    def _logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        p = torch.full((8,), 1e-9)
        for tok, prob in self.TABLE.get(prefix, {EOS_ID: 1.0}).items():
            p[tok] = prob
        return p.log()  # (V,)

    def decode(self, tgt_in, z, z_mask, cache=None, offset=0):  # (B, S) -> (B, S, V)
        assert cache is None, "TableLM reads the whole prefix"
        rows = [
            [self._logits(tuple(seq[1 : i + 1])) for i in range(len(seq))]
            for seq in tgt_in.tolist()
        ]
        return torch.stack([torch.stack(r) for r in rows])  # (B, S, V)


def test_beam_search_beats_greedy_on_hand_built_model():
    model = TableLM()
    z, mask = torch.zeros(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    A, B, C, D = TableLM.A, TableLM.B, TableLM.C, TableLM.D
    greedy = decode_latents(model, z, mask, DecodeOptions(use_cache=False))
    assert greedy[0][0].ids == [A, C]
    assert greedy[0][0].logprob == pytest.approx(math.log(0.55 * 0.36), abs=1e-5)

    for alpha in (0.0, 1.0):
        hyps = beam_search(model, z, mask, beam_size=2, length_penalty=alpha, use_cache=False)
        assert len(hyps) == 2 and hyps[0] == hyps[1]  # rows are independent
        # Closed form: B </s> (p 0.405, 2 tokens), then A C </s> (0.198, 3 tokens); A D </s>
        # (0.187) was the third finished hypothesis and dropped.
        assert [h.ids for h in hyps[0]] == [[B], [A, C]]
        expected = [math.log(0.45 * 0.9) / 2**alpha, math.log(0.55 * 0.36) / 3**alpha]
        assert [h.score for h in hyps[0]] == pytest.approx(expected, abs=1e-5)
        assert all(h.finished for h in hyps[0])
        scores = [h.score for h in hyps[0]]
        assert scores == sorted(scores, reverse=True)
    wide = beam_search(model, z, mask, beam_size=3, length_penalty=0.0, use_cache=False)[0]
    assert [h.ids for h in wide] == [[B], [A, C], [A, D]]
    assert [h.logprob for h in wide] == pytest.approx(
        [math.log(p) for p in (0.405, 0.198, 0.187)], abs=1e-5
    )


def test_beam_scores_are_the_models_log_probabilities(overfit):
    """Each hypothesis' logprob equals a teacher-forced forward pass of its tokens + </s>."""
    gen, sentences = overfit
    mu = [m for m, _ in gen.posteriors(sentences[:3])]
    alpha = 0.7
    for z, hyps in zip(
        mu, gen.decode(mu, DecodeOptions(strategy="beam", beam_size=4, length_penalty=alpha))
    ):
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True) and len(hyps) == 4
        for h in hyps:
            tgt = torch.tensor([[BOS_ID, *h.ids]])  # (1, S)
            with torch.no_grad():
                logp = gen.model.decode(
                    tgt, z[None], torch.ones(1, z.shape[0], dtype=torch.bool)
                ).log_softmax(-1)  # (1, S, V)
            expected = (
                logp[0, torch.arange(tgt.shape[1]), torch.tensor([*h.ids, EOS_ID])].sum().item()
            )
            assert h.logprob == pytest.approx(expected, abs=1e-3)
            assert h.score == pytest.approx(expected / (len(h.ids) + 1) ** alpha, abs=1e-3)


def test_eos_and_max_len(random_model):
    z, mask = _latents()
    # min_len = max_len forbids </s>: every row decodes exactly max_len tokens (used by the bench).
    out = greedy_decode(random_model, z, mask, 9, min_len=9)
    assert [len(x) for x in out] == [9] * 5
    assert all(EOS_ID not in x and BOS_ID not in x for x in out)
    with pytest.raises(VatError, match="max_len"):
        greedy_decode(random_model, z, mask, random_model.config.max_len + 1)


def test_filter_logits_top_k_top_p_closed_form():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()  # (1, V)
    assert filter_logits(logits, top_k=3).isinf().tolist() == [[False, False, False, True]]
    # Nucleus 0.7: 0.5 alone falls short, 0.5 + 0.3 reaches it; the rest goes.
    assert filter_logits(logits, top_p=0.7).isinf().tolist() == [[False, False, True, True]]
    assert filter_logits(logits, top_p=0.5).isinf().tolist() == [[False, True, True, True]]
    shuffled = logits[:, [2, 0, 3, 1]]  # order of the vocabulary must not matter
    assert filter_logits(shuffled, top_p=0.7).isinf().tolist() == [[True, False, True, False]]


def test_sampling_top_k_1_is_greedy_and_seeded(random_model):
    z, mask = _latents()
    greedy = greedy_decode(random_model, z, mask, 12)
    top1 = sample_decode(
        random_model, z, mask, 12, top_k=1, generator=torch.Generator().manual_seed(0)
    )
    assert [h.ids for h in top1] == greedy
    a = sample_decode(
        random_model, z, mask, 12, temperature=2.0, generator=torch.Generator().manual_seed(5)
    )
    b = sample_decode(
        random_model, z, mask, 12, temperature=2.0, generator=torch.Generator().manual_seed(5)
    )
    assert [h.ids for h in a] == [h.ids for h in b]


def test_decode_options_validate():
    for bad in (
        dict(beam_size=0),
        dict(temperature=0.0),
        dict(top_p=0.0),
        dict(top_k=-1),
        dict(strategy="nucleus"),
    ):
        with pytest.raises(VatError):
            DecodeOptions(**bad)


# -- variational sampling and the prior --------------------------------------------------------


def test_perturb_latents_closed_form():
    mu = torch.randn(2, 4, 3)
    logvar = torch.full((2, 4, 3), math.log(4.0))  # sigma = 2
    assert torch.equal(perturb_latents(mu, logvar, tau=0.0), mu)
    where = torch.tensor([[False, True, False, False], [True, False, False, True]])
    z = perturb_latents(mu, logvar, 1.0, where, torch.Generator().manual_seed(0))
    assert torch.equal(z[~where], mu[~where]) and (z[where] != mu[where]).all()
    # z - mu = tau * sigma * eps: standard deviation tau * 2 = 1 for tau = 0.5.
    big = perturb_latents(
        torch.zeros(20000, 1, 1),
        torch.full((20000, 1, 1), math.log(4.0)),
        0.5,
        generator=torch.Generator().manual_seed(0),
    )
    assert big.std().item() == pytest.approx(1.0, abs=0.03)


def test_tau_zero_equals_mu_decoding(overfit, random_model, tiny_tokenizer):
    gen, sentences = overfit
    assert gen.sample(sentences[:4], num_samples=2, tau=0.0) == [
        [r, r] for r in gen.reconstruct(sentences[:4])
    ]
    assert gen.resample_token(sentences[:2], [1], num_samples=2, tau=0.0) == [
        [r, r] for r in gen.reconstruct(sentences[:2])
    ]
    rand = VATGenerator(random_model, tiny_tokenizer)
    opts = DecodeOptions(max_len=10)
    assert rand.sample(sentences[:3], num_samples=1, tau=0.0, options=opts) == [
        [r] for r in rand.reconstruct(sentences[:3], opts)
    ]


def test_variational_samples_vary_and_resample_token_validates(overfit):
    gen, sentences = overfit
    samples = gen.sample(sentences[:2], num_samples=4, tau=3.0, seed=0)
    assert len(samples) == 2 and all(len(s) == 4 for s in samples)
    assert samples == gen.sample(sentences[:2], num_samples=4, tau=3.0, seed=0)  # seeded
    assert any(len(set(s)) > 1 for s in samples)  # noise that large must change something
    with pytest.raises(VatError, match="out of range"):
        gen.resample_token(["The cat sat."], [50], num_samples=1)


def test_prior_lengths_follow_histogram():
    hist = [0, 0, 1, 3, 5, 4, 2, 1, 7]  # lengths 2..8; 8 is above max_len=7 and must be cut
    n = 20000
    lengths = sample_lengths(hist, n, max_len=7, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(torch.tensor(lengths), minlength=9).double() / n
    expected = torch.tensor([0, 0, 1, 3, 5, 4, 2, 1, 0], dtype=torch.float64) / 16
    assert counts.tolist() == pytest.approx(expected.tolist(), abs=0.012)
    assert counts[[0, 1, 8]].sum() == 0
    with pytest.raises(VatError, match="histogram"):
        sample_lengths([], 3, 7)
    zs = prior_latents([3, 400], 16, 0.4, torch.Generator().manual_seed(0))
    assert [z.shape for z in zs] == [(3, 16), (400, 16)]
    assert zs[1].std().item() == pytest.approx(0.4, abs=0.02)


def test_generator_prior(overfit):
    gen, _ = overfit
    out = gen.prior(num_samples=6, seed=1)
    assert len(out) == 6 and all(2 <= T <= 7 for T, _ in out)
    assert [T for T, _ in gen.prior(num_samples=3, length=4)] == [4, 4, 4]
    assert gen.prior(num_samples=6, seed=1) == out


# -- interpolation ----------------------------------------------------------------------------


def test_slerp_closed_form():
    e1, e2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert slerp(e1, e2, 0.5).tolist() == pytest.approx([2**-0.5, 2**-0.5])
    assert torch.equal(slerp(e1, e2, 0.0), e1) and torch.equal(slerp(e1, e2, 1.0), e2)
    zero = torch.zeros(2)  # a padding vector: angle undefined, falls back to lerp
    assert slerp(e1, zero, 0.25).tolist() == pytest.approx([0.75, 0.0])


@pytest.mark.parametrize("method", ["linear", "slerp"])
def test_interpolate_latents_pads_and_moves_length(method):
    z1, z2 = torch.randn(3, 4), torch.randn(7, 4)
    out = interpolate_latents(z1, z2, [0.0, 0.25, 0.5, 1.0], method)
    assert [z.shape[0] for z in out] == [3, 4, 5, 7]  # round((1 - a) 3 + a 7)
    assert torch.equal(out[0], z1) and torch.equal(out[-1], z2)
    if method == "linear":  # beyond z1's end, z1 is padded with zeros (the prior mean)
        assert torch.allclose(out[1][3], 0.25 * z2[3])


def test_interpolation_endpoints_decode_to_the_endpoints(overfit, random_model, tiny_tokenizer):
    gen, sentences = overfit
    a, b = sentences[0], sentences[1]  # 8 and 10 subwords: unequal lengths on purpose
    for method in ("linear", "slerp"):
        out = gen.interpolate(a, b, [0.0, 0.5, 1.0], method)
        assert out[0] == a and out[-1] == b
    rand = VATGenerator(random_model, tiny_tokenizer)
    opts = DecodeOptions(max_len=10)
    ends = rand.interpolate(a, sentences[2], [0.0, 1.0], options=opts)
    assert ends == rand.reconstruct([a, sentences[2]], opts)


# -- reconstruction ---------------------------------------------------------------------------


def test_overfit_model_reconstructs_exactly(overfit):
    gen, sentences = overfit
    assert gen.reconstruct(sentences) == sentences
    assert gen.reconstruct(sentences, DecodeOptions(strategy="beam", beam_size=5)) == sentences
    score = gen.score(sentences)
    assert score.bleu == pytest.approx(100.0) and score.exact_match == 1.0 and score.exact == 8


def test_bleu_and_exact_match():
    refs = ["The cat sat on the mat.", "Two dogs run through the snow."]
    assert corpus_bleu(refs, refs) == pytest.approx(100.0)
    assert corpus_bleu(["xyz qqq", "abc"], refs) == 0.0
    s = reconstruction_score(["The cat sat on the mat.", "Two dogs ran through the snow."], refs)
    assert s.exact == 1 and s.exact_match == 0.5 and s.n == 2 and 0 < s.bleu < 100
    # 13a tokenisation splits the final period off: "mat." vs "mat" differ in one token only.
    assert corpus_bleu(["The cat sat on the mat"], ["The cat sat on the mat."]) > 50


def test_long_sentence_is_truncated_with_a_warning(random_model, tiny_tokenizer):
    gen = VATGenerator(random_model, tiny_tokenizer)
    long = " ".join(["the cat"] * 60)
    with pytest.warns(TruncationWarning, match="truncated"):
        ((mu, _),) = gen.posteriors([long])
    assert mu.shape[0] == random_model.config.max_len  # max_len - 1 subwords + </s>
