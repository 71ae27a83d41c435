"""The plain-torch model: shapes, masking, determinism, caching, an overfit check."""

import torch
from conftest import tiny_config

from vat.model import VAT, sinusoidal_positions
from vat.tokenizer import BOS_ID, EOS_ID, make_batch
from vat.train.losses import masked_mean, reconstruction_nll


def _model(vocab=50, **kw):
    torch.manual_seed(0)
    return VAT(tiny_config(vocab, **kw))


def test_shapes_and_mask():
    m = _model()
    b = make_batch([[5, 6, 7], [8, 9]])
    out = m(b["src"], b["tgt_in"])
    assert out.logits.shape == (2, 4, 50)
    assert out.mu.shape == out.logvar.shape == out.z.shape == (2, 4, 32)
    assert out.mask.tolist() == [[True] * 4, [True, True, True, False]]


def test_sinusoidal_table():
    t = sinusoidal_positions(10, 8)
    assert torch.allclose(t[0, 0::2], torch.zeros(4)) and torch.allclose(t[0, 1::2], torch.ones(4))
    assert torch.allclose(t[3, 0], torch.sin(torch.tensor(3.0)))


def test_padding_changes_neither_loss_term():
    """A sentence's mu, logvar and per-token NLL do not depend on how much padding its batch has."""
    m = _model().eval()
    short, long = [5, 6, 7], [8, 9, 10, 11, 12, 13, 14]
    alone = make_batch([short])
    padded = make_batch([short, long])
    a = m(alone["src"], alone["tgt_in"], sample=False)
    p = m(padded["src"], padded["tgt_in"], sample=False)
    n = alone["src"].shape[1]
    torch.testing.assert_close(p.mu[0, :n], a.mu[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(p.logvar[0, :n], a.logvar[0], atol=1e-5, rtol=1e-5)
    nll_a = reconstruction_nll(a.logits, alone["tgt_out"], a.mask)
    nll_p = reconstruction_nll(p.logits, padded["tgt_out"], p.mask)
    torch.testing.assert_close(
        masked_mean(nll_p[:1], p.mask[:1]), masked_mean(nll_a, a.mask), atol=1e-5, rtol=1e-5
    )


def test_mu_decoding_is_deterministic_in_eval():
    m = _model().eval()
    b = make_batch([[5, 6, 7, 8]])
    o1, o2 = m(b["src"], b["tgt_in"], sample=False), m(b["src"], b["tgt_in"], sample=False)
    assert torch.equal(o1.logits, o2.logits)
    s1, s2 = m(b["src"], b["tgt_in"], sample=True), m(b["src"], b["tgt_in"], sample=True)
    assert not torch.equal(s1.z, s2.z)  # sampling does add noise


def test_reparameterize_tau_zero_is_mu():
    mu, logvar = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    assert torch.equal(VAT.reparameterize(mu, logvar, tau=0.0), mu)


def test_cached_decoding_equals_full_pass():
    m = _model().eval()
    b = make_batch([[5, 6, 7, 8], [9, 10]])
    post = m.encode(b["src"])
    full = m.decode(b["tgt_in"], post.mu, post.mask)
    cache = m.new_cache()
    steps = [
        m.decode(b["tgt_in"][:, t : t + 1], post.mu, post.mask, cache=cache, offset=t)
        for t in range(b["tgt_in"].shape[1])
    ]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_logvar_is_clamped():
    m = _model(logvar_min=-2.0, logvar_max=1.0)
    with torch.no_grad():
        m.logvar_head.bias.fill_(50.0)
    lv = m.encode(make_batch([[5, 6]])["src"]).logvar
    assert lv.max() <= 1.0


def _greedy(m, mu, mask, max_steps):
    out = torch.full((mu.shape[0], 1), BOS_ID)
    for _ in range(max_steps):
        nxt = m.decode(out, mu, mask)[:, -1].argmax(-1)
        out = torch.cat([out, nxt[:, None]], 1)
    return out[:, 1:]


def test_tiny_model_overfits_eight_sentences(tiny_tokenizer, tiny_sentences):
    """Trained with a small KL weight, greedy mu-decoding reconstructs all 8 sentences exactly."""
    from vat.train.losses import gaussian_kl

    sents = tiny_sentences[:8]
    ids = tiny_tokenizer.encode_batch(sents)
    b = make_batch(ids)
    torch.manual_seed(0)
    m = VAT(
        tiny_config(tiny_tokenizer.vocab_size, d_model=64, n_heads=4, d_ff=128, norm_first=True)
    )
    opt = torch.optim.Adam(m.parameters(), lr=2e-3)
    for _ in range(300):
        out = m(b["src"], b["tgt_in"])
        nll = masked_mean(reconstruction_nll(out.logits, b["tgt_out"], out.mask), out.mask)
        kl = masked_mean(gaussian_kl(out.mu, out.logvar, 0.4).sum(-1), out.mask)
        loss = nll + 1e-3 * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        post = m.encode(b["src"])
        hyp = _greedy(m, post.mu, post.mask, b["src"].shape[1])
    decoded = [tiny_tokenizer.decode(h.tolist()) for h in hyp]
    assert decoded == sents
    assert all(EOS_ID in h.tolist() for h in hyp)
