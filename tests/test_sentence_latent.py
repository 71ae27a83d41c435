"""The sentence latent (model.sentence_latent): off, the model and its keys are the paper's; on,
s is pooled from the encoder, counted in the rate, decoded from one memory slot, predicts the
sentence's words, and the training-only memory drops are seeded per step (exact resumes).
Features, generation, the likelihood bound, export and the CLI take it."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from conftest import tiny_config
from helpers import export_folder, fit_args, one_line_error, resumes_exactly, scalars

import vat
from vat.feature_spec import FeatureSpec
from vat.model import VAT, VATConfig
from vat.tokenizer import PAD_ID, make_batch
from vat.train.config import SentenceLatentConfig
from vat.train.losses import gaussian_kl, masked_mean
from vat.train.noise import memory_keep
from vat.train.objective import objective_terms


def _model(vocab: int, k: int = 8) -> VAT:
    torch.manual_seed(0)
    return VAT(tiny_config(vocab, sentence_dim=k)).eval()


def _batch(tok, sentences, n=6):
    return make_batch(tok.encode_batch(sentences[:n]))


# -- the model -------------------------------------------------------------------------------
def test_off_is_the_paper_model_with_its_keys_and_config():
    torch.manual_seed(0)
    plain = VAT(tiny_config(50))
    assert "sentence_dim" not in plain.config.to_dict()  # old configs and checkpoints match
    assert not [k for k in plain.state_dict() if k.startswith("sentence")]
    on = VAT(tiny_config(50, sentence_dim=8))
    extra = set(on.state_dict()) - set(plain.state_dict())
    assert extra == {
        f"sentence_{name}.{p}"
        for name in ("query", "mu_head", "logvar_head", "memory")
        for p in ("weight", "bias")
    }
    assert on.config.to_dict()["sentence_dim"] == 8
    assert VATConfig.from_dict(on.config.to_dict()) == on.config


def test_the_sentence_latent_leads_the_memory_and_dropped_tokens_leave_it(
    tiny_tokenizer, tiny_sentences
):
    m = _model(tiny_tokenizer.vocab_size)
    b = _batch(tiny_tokenizer, tiny_sentences)
    post, sentence = m.encode_with_sentence(b["src"])
    assert sentence.mu.shape == (6, 8) and sentence.logvar.shape == (6, 8)
    # attention pooling: s depends only on a sentence's own real tokens, not on its padding
    alone = m.encode_with_sentence(b["src"][:1, : int(post.mask[0].sum())])[1]
    torch.testing.assert_close(alone.mu, sentence.mu[:1], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        out = m(b["src"], b["tgt_in"], sample=False)
        slot = m.sentence_memory(sentence.mu)[:, None]  # (B, 1, d)
        memory = torch.cat([slot, post.mu], 1)
        want = m.decode(b["tgt_in"], memory, torch.nn.functional.pad(post.mask, (1, 0), value=True))
        torch.testing.assert_close(out.logits, want)
        # every token latent dropped: the decoder reads the sentence slot alone
        none = torch.zeros_like(post.mask)
        dropped = m(b["src"], b["tgt_in"], sample=False, memory_keep=none).logits
        only_s = m.decode(b["tgt_in"], slot, torch.ones(6, 1, dtype=torch.bool))
        torch.testing.assert_close(dropped, only_s)
        assert torch.isfinite(dropped).all()


def test_the_objective_counts_the_sentence_kl_per_token_and_the_bag_of_words(
    tiny_tokenizer, tiny_sentences
):
    m = _model(tiny_tokenizer.vocab_size)
    b = _batch(tiny_tokenizer, tiny_sentences)
    weights = torch.rand(tiny_tokenizer.vocab_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        t = objective_terms(
            m, b["src"], b["tgt_in"], b["tgt_out"], torch.tensor(0.4), 0.0, False,
            bow_weights=weights,
        )  # fmt: skip
        post, s = m.encode_with_sentence(b["src"])
        kl_tokens = masked_mean(gaussian_kl(post.mu, post.logvar, 0.4).sum(-1), post.mask)
        kl_s = gaussian_kl(s.mu, s.logvar, 0.4).sum(-1)  # (B,)
        torch.testing.assert_close(t.kl, kl_tokens + kl_s.sum() / post.mask.sum())
        torch.testing.assert_close(t.kl_sentence, kl_s.mean())
        logp = m.lm_head(m.sentence_memory(s.mu)).log_softmax(-1)  # (B, V)
        nll, total = 0.0, 0.0
        for i, row in enumerate(b["tgt_out"].tolist()):
            for y in row:
                if y != PAD_ID:
                    nll -= float(weights[y] * logp[i, y])
                    total += float(weights[y])
        assert float(t.bow) == pytest.approx(nll / total, rel=1e-5)
    plain = objective_terms(
        m, b["src"], b["tgt_in"], b["tgt_out"], torch.tensor(0.4), 0.0, False
    )  # no weights: no bag of words
    assert plain.bow is None and plain.kl_sentence is not None


def test_memory_keep_drops_at_its_rates():
    src = torch.ones(2000, 30, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    assert memory_keep(src, 0.0, 0.0, g).all()
    assert not memory_keep(src, 0.0, 1.0, g).any()
    assert not memory_keep(src, 1.0, 0.0, g).any()
    keep = memory_keep(src, 0.5, 0.2, g)
    whole = ~keep.any(1)  # sentences with every latent dropped: the drop-all share (+ 0.5^30)
    assert abs(float(whole.float().mean()) - 0.2) < 0.03
    assert abs(float(keep[~whole].float().mean()) - 0.5) < 0.01
    again = memory_keep(src, 0.5, 0.2, torch.Generator().manual_seed(7))
    assert torch.equal(again, memory_keep(src, 0.5, 0.2, torch.Generator().manual_seed(7)))


def test_options_are_checked_naming_them():
    with pytest.raises(Exception, match=r"model.sentence_latent.memory_dropout must be 0 without"):
        SentenceLatentConfig(memory_dropout=0.5)
    with pytest.raises(Exception, match=r"model.sentence_latent.drop_all_rate must be a prob"):
        SentenceLatentConfig(dim=4, drop_all_rate=1.5)
    with pytest.raises(Exception, match=r"model.arch.sentence_dim must be at most"):
        tiny_config(50, sentence_dim=33)


def _step_loss(tok, batch, compile: bool = False) -> torch.Tensor:
    """training_step of a fresh sentence-latent system (z = mu) outside a fit loop."""
    import lightning as L

    import vat.train.system
    from vat.train.system import LossConfig, NoiseConfig, OptimConfig, VATSystem

    torch.manual_seed(0)
    system = VATSystem(
        arch=tiny_config(tok.vocab_size),
        loss=LossConfig(sample_latent=False),
        optim=OptimConfig(schedule="constant", lr=1e-3),
        noise=NoiseConfig(encoder_delete=0.3, seed=3),
        sentence_latent=SentenceLatentConfig(8, 1.0, 0.5, 0.25),
        compile=compile,
    )
    system.tokenizer = tok
    system.trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
    logs_now, vat.train.system.logs_now = vat.train.system.logs_now, lambda trainer, step: False
    try:
        return system.training_step(batch, 2)
    finally:
        vat.train.system.logs_now = logs_now


def test_the_training_loss_drops_latents_from_the_steps_generator(tiny_tokenizer, tiny_sentences):
    """training_step = objective_terms with the memory_keep the step's generator draws after
    the noise, plus bow_weight times the bag of words; compiled, the same loss."""
    from vat.train.noise import noised_batch, step_seed

    b = _batch(tiny_tokenizer, tiny_sentences)
    loss = _step_loss(tiny_tokenizer, b)
    g = torch.Generator().manual_seed(step_seed(3, 0, 2, 0))
    noised = noised_batch(b, g, encoder_delete=0.3).batch
    keep = memory_keep(noised["src"], 0.5, 0.25, g)
    torch.manual_seed(0)
    m = VAT(tiny_config(tiny_tokenizer.vocab_size, sentence_dim=8))
    ones = torch.ones(tiny_tokenizer.vocab_size)  # no counts set: every word weighs 1
    t = objective_terms(
        m, noised["src"], noised["tgt_in"], noised["tgt_out"], torch.tensor(0.4), 0.0, False,
        memory_keep=keep, bow_weights=ones,
    )  # fmt: skip
    weight = 0.00025  # the schedule's w0 at step 0 (logistic: initial_weight)
    torch.testing.assert_close(loss, t.nll + weight * t.kl + t.bow, rtol=1e-6, atol=1e-6)
    full = objective_terms(
        m, noised["src"], noised["tgt_in"], noised["tgt_out"], torch.tensor(0.4), 0.0, False,
        bow_weights=ones,
    )  # fmt: skip
    assert not torch.allclose(full.nll, t.nll)  # the drops changed what the decoder read


def test_a_compiled_step_drops_the_same_latents(tiny_tokenizer, tiny_sentences, fast_compile):
    torch._dynamo.reset()
    b = _batch(tiny_tokenizer, tiny_sentences)
    eager = _step_loss(tiny_tokenizer, b)
    compiled = _step_loss(tiny_tokenizer, b, compile=True)
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


# -- features, generation and the likelihood bound --------------------------------------------
def test_the_sentence_feature_is_s_mean_and_needs_a_sentence_latent(tiny_tokenizer, tiny_sentences):
    from vat.errors import VatError
    from vat.features.encoder import pooled_features

    m = _model(tiny_tokenizer.vocab_size)
    got = pooled_features(m, tiny_tokenizer, tiny_sentences[:6], [("sentence", "mean")])
    _, s = m.encode_with_sentence(_batch(tiny_tokenizer, tiny_sentences)["src"])
    torch.testing.assert_close(torch.from_numpy(got[("sentence", "mean")]), s.mu)
    with pytest.raises(VatError, match="its weighting is mean"):
        FeatureSpec.parse("sentence/sif")
    with pytest.raises(VatError, match="this model has no sentence latent"):
        FeatureSpec.parse("sentence").width(tiny_config(50))


def test_generation_decodes_the_full_memory(tiny_tokenizer, tiny_sentences):
    from vat.errors import OptionError
    from vat.generate.decoding import decode_latents
    from vat.generate.generator import VATGenerator

    m = _model(tiny_tokenizer.vocab_size)
    gen = VATGenerator(m, tiny_tokenizer, prior_std=0.4)
    texts = tiny_sentences[:3]
    b = _batch(tiny_tokenizer, texts, 3)
    with torch.no_grad():
        post, s = m.encode_with_sentence(b["src"])
        memory, mask = m.memory(post.mu, post.mask, s.mu)
        want = [gen.text(h[0]) for h in decode_latents(m, memory, mask)]
    assert gen.reconstruct(texts) == want
    mus = [mu for mu, _ in gen.posteriors(texts)]
    with pytest.raises(OptionError, match="sentences: this model takes one \\(8,\\) tensor"):
        gen.decode(mus)
    assert len(gen.interpolate(texts[0], texts[1], [0.0, 1.0])) == 2
    assert len(gen.prior(num_samples=2, length=4)) == 2


def test_the_bound_counts_the_sentence_latent_exactly(tiny_tokenizer, tiny_sentences):
    from vat.score.likelihood import closed_form_kl, model_bounds

    m = _model(tiny_tokenizer.vocab_size)
    b = _batch(tiny_tokenizer, tiny_sentences)
    bounds = model_bounds(m, b, 0.4, samples=4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        post, s = m.encode_with_sentence(b["src"])
        kl = closed_form_kl(post.mu.double(), post.logvar.double(), post.mask, 0.4)
        kl += gaussian_kl(s.mu.double(), s.logvar.double(), 0.4).sum(-1)
    torch.testing.assert_close(bounds.kl, kl)
    assert torch.equal(bounds.tokens, post.mask.sum(-1))
    assert (bounds.log_likelihood >= bounds.mean_log_weight - 1e-9).all()
    assert torch.isfinite(bounds.log_likelihood).all()
    # the padded dimensions have q = p: they add nothing to any importance weight
    assert math.isfinite(float(bounds.reconstruction.sum()))


# -- from the command line ---------------------------------------------------------------------
SENTENCE_ARGS = (
    *("--model.sentence_latent.dim", "8", "--model.sentence_latent.bow_weight", "1.0"),
    *("--model.sentence_latent.memory_dropout", "0.5"),
    *("--model.sentence_latent.drop_all_rate", "0.25"),
)
COMMON = (
    *("--trainer.max_steps", "8", "--checkpoint.every_n_train_steps", "2"),
    *("--trainer.val_check_interval", "2", "--trainer.check_val_every_n_epoch", "null"),
    *("--data.batch_size", "4", "--data.num_workers", "0"),
    *("--model.noise.encoder_delete", "0.2"),  # drawn first from the same generator
)


def test_a_bad_sentence_option_is_one_line_naming_it(tmp_path, capsys):
    err = one_line_error(
        capsys,
        ["train", *fit_args(tmp_path / "run", None, "--model.sentence_latent.bow_weight", "1")],
    )
    assert "model.sentence_latent.bow_weight must be 0 without model.sentence_latent.dim" in err


@pytest.mark.slow
def test_a_sentence_latent_run_logs_resumes_exactly_and_exports(tmp_path, capsys):
    """8 steps straight, and 5, a stop and a resume to 8: the same weights and optimiser state
    bit for bit; its curves logged; its card says how it trained; its folder encodes with
    `sentence/mean/none` through vat.load and sentence-transformers."""
    run, got = resumes_exactly(tmp_path, capsys, *COMMON, *SENTENCE_ARGS)
    assert got["vat"]["model_config"]["sentence_dim"] == 8
    curves = scalars(tmp_path / "ref")
    for tag in ("train/kl_sentence", "train/bow"):
        values = [v for _, v in curves[tag]]
        assert len(values) == 8 and all(v > 0 and math.isfinite(v) for v in values), tag
    folder = export_folder(run, tmp_path / "export", features="sentence/mean/none")
    card = (folder / "README.md").read_text()
    assert "its sentence features (8 dimensions)" in card.replace("\n", " ")
    (line,) = [x for x in card.splitlines() if x.startswith("- a sentence latent")]
    assert line.endswith(
        "8 dimensions; a bag-of-words loss from it, weight 1; token latents dropped from the "
        "decoder's memory with p = 0.5; all of a sentence's token latents dropped in 0.25 of "
        "sentences"
    )
    loaded = vat.load(folder, device="cpu")
    vectors = loaded.encode(["a man plays a guitar .", "a dog runs ."])
    assert vectors.shape == (2, 8)
    _, s = loaded.model.encode_with_sentence(
        make_batch(loaded.tokenizer.encode_batch(["a man plays a guitar ."]))["src"]
    )
    torch.testing.assert_close(torch.from_numpy(vectors[:1]), s.mu, atol=1e-5, rtol=1e-5)
    # `vat evaluate`, `vat features compare` and `vat score` on the run, as a user runs them
    from eval_helpers import write_mini_senteval

    from vat.cli import main as vat_main

    data = write_mini_senteval(tmp_path / "senteval", n=20)
    res = tmp_path / "eval.json"
    args = ["--model", str(run), "--features", "sentence/mean/none", "--tasks", "STS12"]
    assert vat_main(["evaluate", *args, "--data-dir", str(data), "--output", str(res)]) == 0
    got = json.loads(res.read_text())
    assert got["_meta"]["features"] == "sentence/mean/none" and got["STS12"]["all"]
    cmp = tmp_path / "cmp"
    assert vat_main(["features", "compare", "--model", str(run), "--output-dir", str(cmp),
                     "--data-dir", str(data), "--fit-sentences", "20"]) == 0  # fmt: skip
    specs = [r["spec"] for r in csv.DictReader((cmp / "compare.csv").open())]
    assert {f"sentence/mean/{p}" for p in ("none", "pc1", "whiten", "whiten4")} <= set(specs)
    scored = tmp_path / "score.json"
    sentences = tmp_path / "s.txt"
    sentences.write_text("a man plays a guitar .\na dog runs .\n")
    assert vat_main(["score", "--model", str(run), str(sentences), "--samples", "4",
                     "--no-representation", "--output", str(scored)]) == 0  # fmt: skip
    capsys.readouterr()
    from sentence_transformers import SentenceTransformer  # slow to import: only here

    st = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(
        st.encode(["a dog runs ."]), loaded.encode(["a dog runs ."]), atol=1e-5
    )
