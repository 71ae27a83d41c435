"""vat.callbacks: a tiny real Trainer writes geometry scalars, histograms, projector and text."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from helpers import CheckpointSystem
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vat.callbacks import GeometryMetrics, LatentProjector, SamplesCallback
from vat.callbacks.geometry import projector_label
from vat.errors import VatError
from vat.features import token_posteriors, token_vectors
from vat.generate.decoding import DecodeOptions
from vat.generate.generator import VATGenerator
from vat.geometry.metrics import METRICS, geometry_report
from vat.share.resolve import load_model
from vat.tokenizer import BOS_ID, EOS_ID, make_batch


def fit(module, tmp_path, callbacks, epochs=2):
    logger = TensorBoardLogger(tmp_path, name="tb", version=0)
    trainer = L.Trainer(
        max_epochs=epochs,
        logger=logger,
        callbacks=callbacks,
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        log_every_n_steps=1,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)
    return trainer, Path(logger.log_dir)


def test_callbacks_write_tensorboard(tmp_path, tiny_ckpt, tiny_sentences, probe_file):
    module = CheckpointSystem(tiny_ckpt, tiny_sentences)
    callbacks = [
        GeometryMetrics(probe_file=str(probe_file), min_count=2),
        LatentProjector(every_n_validations=2, probe_file=str(probe_file), max_tokens=50),
        SamplesCallback(sentences=tiny_sentences[:3], num_show=3, num_samples=1, max_len=6),
    ]
    _, log_dir = fit(module, tmp_path, callbacks)
    ea = EventAccumulator(
        str(log_dir), size_guidance={"tensors": 0, "histograms": 0, "scalars": 0}
    ).Reload()
    tags = ea.Tags()

    # Scalars: one per validation run (2 epochs; the sanity check does not count).
    tv = token_vectors(module.model, module.tokenizer, callbacks[0].sentences)
    expected = geometry_report(
        tv.vectors, tv.token_ids, tv.sentence_ids, tv.logvar, 0.4, min_count=2
    )
    assert len(METRICS) == 10  # one list: the callback logs every scalar metric of the report
    for name in METRICS:
        events = ea.Scalars(f"geometry/{name}")
        assert len(events) == 2, name
        assert events[-1].value == pytest.approx(getattr(expected, name), rel=1e-5, abs=1e-5), name
    assert len(ea.Scalars("geometry/seconds")) == 2
    assert len(ea.Scalars("val/recon_exact_match")) == 2 and len(ea.Scalars("val/recon_bleu")) == 2

    # Histograms of KL and mu-variance per latent dimension: d = 32 values each.
    assert {"geometry/kl_per_dim", "geometry/mu_variance_per_dim"} <= set(tags["histograms"])
    hist = ea.Histograms("geometry/kl_per_dim")
    assert len(hist) == 2 and hist[-1].histogram_value.num == 32
    assert hist[-1].histogram_value.sum == pytest.approx(expected.kl_per_token, rel=1e-4)

    # Projector: written once (every 2nd run), 50 token vectors, token text as metadata.
    config = (log_dir / "projector_config.pbtxt").read_text()
    assert config.count("embeddings {") == 1 and "geometry/token_mu" in config
    paths = dict(
        line.strip().split(": ") for line in config.splitlines() if line.strip().endswith('.tsv"')
    )
    meta = (log_dir / paths["metadata_path"].strip('"')).read_text().splitlines()
    assert meta[0] == "token\tsentence" and len(meta) == 51
    first_tokens = [
        module.tokenizer.token_text(i) for i in module.tokenizer.encode(tiny_sentences[0])
    ]
    assert [row.split("\t")[0] for row in meta[1 : 1 + len(first_tokens)]] == [
        projector_label(t) for t in first_tokens
    ]
    assert len((log_dir / paths["tensor_path"].strip('"')).read_text().splitlines()) == 50

    # Reconstructions as text, two table rows (input, mu-decoding) per sentence.
    text_tag = "val/reconstructions/text_summary"
    assert text_tag in tags["tensors"]
    table = ea.Tensors(text_tag)[-1].tensor_proto.string_val[0].decode()
    assert table.count("\n| ") == 6 and tiny_sentences[0] in table


class Spy(GeometryMetrics):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls: list[tuple[bool, bool]] = []

    def _run(self, trainer, pl_module):
        self.calls.append((pl_module.model.training, torch.is_grad_enabled()))


def fake_trainer(**overrides):
    base = dict(sanity_checking=False, is_global_zero=True, loggers=[], global_step=7)
    base.update(overrides)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("train_mode", [True, False])
def test_runs_in_eval_mode_without_grad_and_restores_mode(tiny_ckpt, tiny_sentences, train_mode):
    module = CheckpointSystem(tiny_ckpt, tiny_sentences)
    module.model.train(train_mode)
    spy = Spy()
    spy.on_validation_epoch_end(fake_trainer(), module)
    assert spy.calls == [(False, False)]
    assert module.model.training is train_mode and torch.is_grad_enabled()


def test_schedule_sanity_check_and_rank(tiny_ckpt, tiny_sentences):
    module = CheckpointSystem(tiny_ckpt, tiny_sentences)
    spy = Spy(every_n_validations=3)
    spy.on_validation_epoch_end(fake_trainer(sanity_checking=True), module)  # never counts
    for _ in range(6):
        spy.on_validation_epoch_end(fake_trainer(), module)
    assert len(spy.calls) == 2 and spy.val_runs == 6  # runs 3 and 6
    other_rank = Spy()
    other_rank.on_validation_epoch_end(fake_trainer(is_global_zero=False), module)
    assert other_rank.calls == []
    spy.load_state_dict({"val_runs": 5})  # resumed runs keep the schedule
    spy.on_validation_epoch_end(fake_trainer(), module)
    assert len(spy.calls) == 3


def test_projector_without_tensorboard_warns_and_writes_nothing(
    tiny_ckpt, tiny_sentences, probe_file
):
    module = CheckpointSystem(tiny_ckpt, tiny_sentences)
    cb = LatentProjector(probe_file=str(probe_file))
    cb.setup(fake_trainer(), module, "fit")
    with pytest.warns(UserWarning, match="needs a TensorBoardLogger"):
        cb.on_validation_epoch_end(fake_trainer(), module)


def test_bad_probe_and_arguments_fail_at_setup(tmp_path, tiny_ckpt, tiny_sentences):
    module = CheckpointSystem(tiny_ckpt, tiny_sentences)
    with pytest.raises(VatError, match="cannot read the probe set"):
        GeometryMetrics(probe_file=str(tmp_path / "missing.txt")).setup(
            fake_trainer(), module, "fit"
        )
    with pytest.raises(VatError, match="STS12"):
        GeometryMetrics(senteval_dir=str(tmp_path)).setup(fake_trainer(), module, "fit")
    with pytest.raises(VatError, match="every_n_validations"):
        GeometryMetrics(every_n_validations=0)
    with pytest.raises(VatError, match="max_tokens"):
        LatentProjector(max_tokens=0)


def test_sts12_is_the_default_probe(senteval_dir, monkeypatch, tiny_ckpt, tiny_sentences):
    monkeypatch.setenv("VAT_SENTEVAL_DIR", str(senteval_dir))
    cb = GeometryMetrics(max_sentences=100)
    cb.setup(fake_trainer(), CheckpointSystem(tiny_ckpt, tiny_sentences), "fit")
    assert len(cb.sentences) == 100


def test_greedy_reconstruct_matches_uncached_argmax(tiny_ckpt, tiny_sentences):
    """The one greedy loop (vat.generate.decoding, batched, cached) that SamplesCallback
    also uses."""
    loaded = load_model(tiny_ckpt)
    model, tok = loaded.model, loaded.tokenizer
    sentences = tiny_sentences[:3]
    got = VATGenerator(model, tok, batch_size=2).reconstruct(sentences, DecodeOptions(max_len=6))
    # Reference: re-run the whole decoder prefix every step, one sentence at a time.
    for s, text in zip(sentences, got):
        src = make_batch([tok.encode(s)])["src"]
        with torch.no_grad():
            mu, _, mask = model.encode(src)
            seq = [BOS_ID]
            for _ in range(6):
                nxt = int(model.decode(torch.tensor([seq]), mu, mask)[0, -1].argmax())
                seq.append(nxt)
                if nxt == EOS_ID:
                    break
        assert text == tok.decode(seq[1:])


def test_callbacks_instantiate_from_yaml(probe_file):
    # LightningCLI builds trainer.callbacks from class_path / init_args with jsonargparse.
    from jsonargparse import ArgumentParser
    from lightning.pytorch import Callback

    parser = ArgumentParser()
    parser.add_argument("--callbacks", type=list[Callback])
    yaml = f"""
callbacks:
  - class_path: vat.callbacks.GeometryMetrics
    init_args: {{probe_file: {probe_file}, every_n_validations: 2, min_count: 3}}
  - class_path: vat.callbacks.LatentProjector
    init_args: {{probe_file: {probe_file}, max_tokens: 100}}
  - class_path: vat.callbacks.SamplesCallback
    init_args: {{sentences: [a b, c d]}}
"""
    cfg = parser.parse_string(yaml)
    cbs = parser.instantiate_classes(cfg).callbacks
    assert [type(c).__name__ for c in cbs] == [
        "GeometryMetrics",
        "LatentProjector",
        "SamplesCallback",
    ]
    assert cbs[0].every_n_validations == 2 and cbs[0].min_count == 3 and cbs[1].max_tokens == 100
    assert cbs[2].sentences(None, None) == ["a b", "c d"]


def test_projector_label_escapes():
    assert projector_label("a\tb\nc") == "a\\tb\\nc"
    assert projector_label(" ") == "' '"
    assert np.asarray([projector_label("x")]).dtype.kind == "U"


def test_token_posteriors_match_token_vectors(tiny_ckpt, tiny_sentences):
    loaded = load_model(tiny_ckpt)
    sentences = tiny_sentences + [""]  # an empty sentence contributes no token
    # Several length-sorted batches, put back in input order (padding changes float round-off only).
    mu, logvar, tok, sent = token_posteriors(
        loaded.model, loaded.tokenizer, sentences, batch_size=5
    )
    tv = token_vectors(loaded.model, loaded.tokenizer, sentences, batch_size=5)
    np.testing.assert_array_equal(mu.numpy(), tv.vectors)
    np.testing.assert_array_equal(logvar.numpy(), tv.logvar)
    assert tok.tolist() == tv.token_ids.tolist() and sent.tolist() == tv.sentence_ids.tolist()
    assert len(tok) == sum(len(ids) for ids in loaded.tokenizer.encode_batch(sentences))
