"""Noise on the training inputs (vat/train/noise.py): decoder word dropout, encoder-input
deletion, masking and local shuffle. The functions against their definitions, the training
step against the loss of the batch the noise made, clean validation, compile, the CLI and an
exact resume."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from conftest import tiny_config
from helpers import fit_args, one_line_error, resumes_exactly, scalars, train_main
from torch.utils.data import DataLoader

from vat.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, make_batch
from vat.train.config import NoiseConfig
from vat.train.noise import (
    FIRST_WORD_ID,
    delete_words,
    noised_batch,
    replace_words,
    shuffle_words,
    step_seed,
    words_of,
)
from vat.train.objective import objective_terms
from vat.train.system import LossConfig, OptimConfig, VATSystem


def _ids(rows: int = 300, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    """Rows of 1-30 words, then </s>, then padding to 32 (the encoder's layout)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 31, (rows,), generator=g)
    out = torch.full((rows, 32), PAD_ID)
    for i, n in enumerate(lengths.tolist()):
        out[i, :n] = torch.randint(FIRST_WORD_ID, vocab, (n,), generator=g)
        out[i, n] = EOS_ID
    return out


def _gen(seed: int = 1) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _within_binomial(hits: int, n: int, p: float) -> bool:
    """hits within 5 standard deviations of n * p (false alarm: about 6e-7)."""
    return abs(hits - n * p) <= 5 * (n * p * (1 - p)) ** 0.5


# -- the functions --------------------------------------------------------------------------
def test_replacing_touches_words_only_at_the_rate_asked():
    ids = _ids()
    words = words_of(ids)
    out, hit = replace_words(ids, 0.3, _gen())
    assert torch.equal(out[~words], ids[~words])  # </s> and padding never change
    assert torch.equal(out[hit], torch.full_like(out[hit], UNK_ID))
    assert torch.equal(out[words & ~hit], ids[words & ~hit])
    assert not (hit & ~words).any()
    assert _within_binomial(int(hit.sum()), int(words.sum()), 0.3)
    everything, _ = replace_words(ids, 1.0, _gen())
    assert torch.equal(everything, ids.masked_fill(words, UNK_ID))
    nothing, none_hit = replace_words(ids, 0.0, _gen())
    assert torch.equal(nothing, ids) and not none_hit.any()


def test_random_replacement_draws_words_never_special_tokens():
    ids = _ids()
    out, hit = replace_words(ids, 1.0, _gen(), "random", vocab_size=60)
    assert hit.equal(words_of(ids))
    assert out[hit].min() >= FIRST_WORD_ID and out[hit].max() < 60
    assert len(out[hit].unique()) == 60 - FIRST_WORD_ID  # every word id comes up
    with pytest.raises(ValueError, match="replace_with"):
        replace_words(ids, 0.5, _gen(), "random")  # no vocabulary to draw from


def test_deletion_is_the_sentence_without_the_deleted_words():
    ids = _ids()
    out, deleted = delete_words(ids, 0.4, _gen())
    assert out.shape == ids.shape
    for row, gone, got in zip(ids.tolist(), deleted.tolist(), out.tolist(), strict=True):
        kept = [t for t, d in zip(row, gone, strict=True) if not d and t != PAD_ID]
        assert got == kept + [PAD_ID] * (len(row) - len(kept))
    words = words_of(ids)
    assert not (deleted & ~words).any()
    assert _within_binomial(int(deleted.sum()), int(words.sum()), 0.4)
    only_ends, _ = delete_words(ids, 1.0, _gen())  # every word gone: </s> is left, one latent
    assert torch.equal(only_ends[:, 0], torch.full((len(ids),), EOS_ID))
    assert (only_ends[:, 1:] == PAD_ID).all()


@pytest.mark.parametrize("distance", [1, 3])
def test_local_shuffle_moves_no_word_more_than_the_distance(distance):
    ids = _ids(vocab=10_000)  # distinct words in a row almost surely: positions are traceable
    out, moved = shuffle_words(ids, distance, _gen())
    words = words_of(ids)
    assert torch.equal(out[~words], ids[~words])  # </s> and padding stay in place
    farthest = 0
    for row, got in zip(ids.tolist(), out.tolist(), strict=True):
        n = row.index(EOS_ID)
        assert sorted(got[:n]) == sorted(row[:n])  # a permutation of the words
        if len(set(row[:n])) == n:
            farthest = max(farthest, *(abs(got.index(t) - i) for i, t in enumerate(row[:n])))
    assert farthest == distance  # reached, never exceeded, over 300 sentences
    assert torch.equal(moved, words & (out != ids)) and moved.any()
    same, _ = shuffle_words(ids, 0, _gen())  # keys i + U(0, 1) keep the order
    assert torch.equal(same, ids)


def test_noised_batch_keeps_targets_and_is_a_function_of_the_generator_state():
    src = _ids()
    tgt_in = torch.cat([torch.full((len(src), 1), BOS_ID), src[:, :-1]], 1).masked_fill(
        torch.cat([torch.zeros(len(src), 1, dtype=torch.bool), src[:, :-1] == EOS_ID], 1),
        PAD_ID,
    )
    batch = {"src": src, "tgt_in": tgt_in, "tgt_out": src.clone()}
    kw = dict(
        decoder_word_dropout=0.2, encoder_delete=0.2, encoder_mask=0.2, encoder_shuffle_distance=2
    )
    a, b = noised_batch(batch, _gen(5), **kw), noised_batch(batch, _gen(5), **kw)
    c = noised_batch(batch, _gen(6), **kw)
    assert all(torch.equal(a.batch[k], b.batch[k]) for k in batch)
    assert not torch.equal(a.batch["src"], c.batch["src"])
    assert torch.equal(a.batch["tgt_out"], src)  # the targets are always the clean sentence
    assert a.batch["tgt_in"][:, 0].eq(BOS_ID).all()  # <s> is never dropped
    assert int(a.encoder_words) == int(words_of(src).sum())
    assert int(a.decoder_words) == int(words_of(tgt_in).sum())
    assert int(a.decoder_dropped) == int((a.batch["tgt_in"] == UNK_ID).sum())
    kept = int(words_of(a.batch["src"]).sum())
    assert kept == int(a.encoder_words) - int(a.encoder_deleted)
    clean = noised_batch(batch, _gen(5))  # every rate 0: nothing drawn, nothing changed
    assert all(torch.equal(clean.batch[k], batch[k]) for k in batch)


def test_step_seeds_differ_for_every_step_batch_rank_and_seed():
    seeds = {
        step_seed(s, k, b, r)
        for s in range(3)
        for k in range(50)
        for b in range(3)
        for r in range(2)
    }
    assert len(seeds) == 3 * 50 * 3 * 2
    assert all(0 <= x < 2**63 for x in seeds)
    assert step_seed(0, 10, 0, 0) == step_seed(0, 10, 0, 0)


def test_noise_options_are_checked_naming_the_option():
    assert not NoiseConfig().active
    assert NoiseConfig(encoder_shuffle_distance=1).active
    for field, bad in (
        ("decoder_word_dropout", 1.5),
        ("encoder_mask", -0.1),
        ("encoder_delete", float("nan")),
        ("encoder_delete", True),
        ("encoder_shuffle_distance", 2.5),
        ("replace_with", "mask"),
        ("seed", -1),
    ):
        with pytest.raises(Exception, match=f"model.noise.{field}"):
            NoiseConfig(**{field: bad})


# -- the training step ----------------------------------------------------------------------
def _system(tok, noise=None, compile=False) -> VATSystem:
    torch.manual_seed(0)
    system = VATSystem(
        arch=tiny_config(tok.vocab_size),
        loss=LossConfig(sample_latent=False),  # z = mu: losses comparable exactly
        optim=OptimConfig(schedule="constant", lr=1e-3),
        noise=noise or NoiseConfig(),
        compile=compile,
    )
    system.tokenizer = tok
    return system


def _step_loss(system: VATSystem, batch, batch_idx=0) -> torch.Tensor:
    """training_step outside a fit loop (so with no logging step): its loss."""
    import vat.train.system

    system.trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
    logs_now = vat.train.system.logs_now
    vat.train.system.logs_now = lambda trainer, step: False
    try:
        return system.training_step(batch, batch_idx)
    finally:
        vat.train.system.logs_now = logs_now


@pytest.mark.parametrize(
    "noise",
    [
        NoiseConfig(decoder_word_dropout=0.5, seed=3),
        NoiseConfig(encoder_delete=0.5, encoder_shuffle_distance=2, seed=3),
        NoiseConfig(encoder_mask=0.4, replace_with="random", seed=3),
    ],
    ids=["word-dropout", "delete-shuffle", "mask-random"],
)
def test_the_training_loss_is_the_loss_of_the_noised_batch(tiny_tokenizer, tiny_sentences, noise):
    """training_step's loss is objective_terms on exactly the batch noised_batch makes from
    the step's seed; the NLL averages over the clean targets, the KL over the latents left."""
    system = _system(tiny_tokenizer, noise)
    batch = make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:8]))
    loss = _step_loss(system, batch, batch_idx=0)
    g = torch.Generator().manual_seed(step_seed(noise.seed, 0, 0, 0))
    noised = noised_batch(
        batch,
        g,
        decoder_word_dropout=noise.decoder_word_dropout,
        encoder_delete=noise.encoder_delete,
        encoder_mask=noise.encoder_mask,
        encoder_shuffle_distance=noise.encoder_shuffle_distance,
        replace_with=noise.replace_with,
        vocab_size=tiny_tokenizer.vocab_size,
    ).batch
    assert not torch.equal(noised["src"], batch["src"]) or not torch.equal(
        noised["tgt_in"], batch["tgt_in"]
    )
    terms = objective_terms(
        system.model, noised["src"], noised["tgt_in"], noised["tgt_out"],
        system.prior_std, 0.0, False,
    )  # fmt: skip
    weight = system.kl_weight()
    torch.testing.assert_close(loss, terms.nll + weight * terms.kl, rtol=0, atol=0)
    clean = _system(tiny_tokenizer)
    assert not torch.allclose(_step_loss(clean, batch), loss)
    # the NLL's mean runs over every target token, deleted or not
    assert int(terms.ntokens) == int((batch["tgt_out"] != PAD_ID).sum())


def test_validation_sees_clean_inputs(tiny_tokenizer, tiny_sentences, tmp_path):
    """The same weights validate to the same numbers with and without noise configured."""
    batches = [make_batch(tiny_tokenizer.encode_batch(tiny_sentences[i : i + 4])) for i in (0, 4)]
    results = []
    for noise in (
        NoiseConfig(),
        NoiseConfig(decoder_word_dropout=0.9, encoder_delete=0.9, encoder_mask=0.9),
    ):
        system = _system(tiny_tokenizer, noise)
        trainer = L.Trainer(
            accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False,
            enable_progress_bar=False,
        )  # fmt: skip
        (result,) = trainer.validate(system, DataLoader(batches, batch_size=None), verbose=False)
        results.append(result)
    assert results[0] == results[1] and results[0]["val/nll"] > 0


def test_compiled_step_with_noise_matches_eager(tiny_tokenizer, tiny_sentences, fast_compile):
    torch._dynamo.reset()
    noise = NoiseConfig(decoder_word_dropout=0.3, encoder_delete=0.3, encoder_shuffle_distance=2)
    batch = make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:6]))
    eager = _step_loss(_system(tiny_tokenizer, noise), batch, batch_idx=2)
    compiled_system = _system(tiny_tokenizer, noise, compile=True)
    compiled = _step_loss(compiled_system, batch, batch_idx=2)
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    assert compiled_system._compiled.graphs >= 1


# -- from the command line ------------------------------------------------------------------
NOISE_ARGS = (
    *("--model.noise.decoder_word_dropout", "0.3", "--model.noise.encoder_delete", "0.2"),
    *("--model.noise.encoder_mask", "0.2", "--model.noise.encoder_shuffle_distance", "2"),
)
COMMON = (
    *("--trainer.max_steps", "8", "--checkpoint.every_n_train_steps", "2"),
    *("--trainer.val_check_interval", "2", "--trainer.check_val_every_n_epoch", "null"),
    *("--data.batch_size", "4", "--data.num_workers", "0"),
)


def test_a_bad_noise_option_is_one_line_naming_it(tmp_path, capsys):
    err = one_line_error(
        capsys,
        ["train", *fit_args(tmp_path / "run", None, "--model.noise.encoder_mask", "1.5")],
    )
    assert "model.noise.encoder_mask must be a probability in [0, 1], got 1.5" in err


@pytest.mark.slow
def test_a_noised_run_logs_its_noise_and_resumes_exactly(tmp_path, capsys):
    """8 steps straight, and 5 steps, a stop, and a resume to 8: the same weights and
    optimiser state bit for bit (the noise of step k does not depend on the interruption),
    the noise's shares logged, its settings in the run's config and checkpoint."""
    run, got = resumes_exactly(tmp_path, capsys, *COMMON, *NOISE_ARGS)
    cache = tmp_path / "cache"
    assert got["hyper_parameters"]["noise"]["encoder_delete"] == 0.2
    curves = scalars(tmp_path / "ref")
    for tag, rate in (
        ("train/noise/decoder_dropped", 0.3),
        ("train/noise/encoder_deleted", 0.2),
        ("train/noise/encoder_moved", None),
    ):
        values = [v for _, v in curves[tag]]
        assert len(values) == 8 and all(0 < v < 1 for v in values), (tag, values)
        if rate is not None:  # 8 batches of about 40 words: the mean is near the rate
            assert abs(sum(values) / 8 - rate) < 0.1, (tag, values)
    # a clean run logs no noise curves
    clean = tmp_path / "clean"
    code, err = train_main(fit_args(clean, cache, "--data.num_workers", "0"), capsys)
    assert code == 0, err
    assert not [t for t in scalars(clean) if t.startswith("train/noise/")]
    # the exported model's card says what it was trained with; a clean run's says nothing
    from helpers import export_folder

    card = (export_folder(run, tmp_path / "noised-export") / "README.md").read_text()
    (line,) = [x for x in card.splitlines() if x.startswith("- input noise in training")]
    assert line == (
        "- input noise in training (validation and evaluation were clean): decoder word "
        "dropout 0.3 (Bowman et al. 2016); encoder-input deletion 0.2; encoder-input masking "
        "0.2; encoder-input local shuffle over at most 2 places; a dropped or masked word "
        "became <unk>"
    )
    clean_card = (export_folder(clean, tmp_path / "clean-export") / "README.md").read_text()
    assert "input noise" not in clean_card
