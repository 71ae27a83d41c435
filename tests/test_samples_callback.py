"""vat.callbacks.samples.SamplesCallback: `val/recon_bleu` and text samples in TensorBoard."""

from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_generate import train_tiny_autoencoder
from torch.utils.data import DataLoader

from vat.callbacks.samples import SamplesCallback
from vat.generate.generator import VATGenerator, corpus_bleu
from vat.tokenizer import make_batch


class TinySystem(pl.LightningModule):
    """The attributes SamplesCallback reads from vat's LightningModule, and nothing else.
    lr = 0, so the weights at every validation equal the ones the test recomputes with."""

    def __init__(self, model, tokenizer) -> None:
        super().__init__()
        self.model, self.tokenizer = model, tokenizer
        self.prior_std, self.length_histogram = 0.4, [0, 0, 1, 3, 5, 4, 2, 1]
        self.modes_seen: list[bool] = []
        self.train()  # the fixture model comes in eval mode; Lightning keeps submodule modes

    def training_step(self, batch, batch_idx):
        self.modes_seen.append(self.model.training)
        logits = self.model(batch["src"], batch["tgt_in"], sample=False).logits  # (B, S, V)
        return torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), batch["tgt_out"], ignore_index=0
        )

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


@pytest.fixture(scope="module")
def partly_trained(tiny_tokenizer, tiny_sentences):
    """40 steps: some sentences come back, some do not, so BLEU lies strictly inside (0, 100)."""
    return train_tiny_autoencoder(tiny_tokenizer, tiny_sentences[:8], steps=40)


def _loader(tokenizer, sentences, batch_size=4):
    return DataLoader(
        tokenizer.encode_batch(sentences), batch_size=batch_size, collate_fn=make_batch
    )


def test_callback_writes_bleu_and_text_to_tensorboard(
    tmp_path, tiny_tokenizer, tiny_sentences, partly_trained
):
    sentences = tiny_sentences[:8]
    cb = SamplesCallback(
        num_sentences=6, every_n_validations=2, num_show=2, num_samples=2, max_len=24
    )
    logger = TensorBoardLogger(tmp_path, name="run", version=0)
    trainer = pl.Trainer(
        max_epochs=3,
        limit_train_batches=2,
        limit_val_batches=2,
        num_sanity_val_steps=1,
        logger=logger,
        callbacks=[cb],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    system = TinySystem(partly_trained, tiny_tokenizer)
    loader = _loader(tiny_tokenizer, sentences)
    trainer.fit(system, loader, loader)

    assert cb.val_runs == 3  # the sanity check does not count
    assert all(system.modes_seen)  # training went on in train mode after each callback run
    acc = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0, "scalars": 0}).Reload()
    events = acc.Scalars("val/recon_bleu")
    assert len(events) == 1  # every 2nd of 3 validation runs (a counted sanity check would give 2)
    # The fixed set is the first 6 validation sentences, read back from the val batches.
    assert cb.sentences(trainer, tiny_tokenizer) == sentences[:6]
    expected = corpus_bleu(
        VATGenerator(partly_trained, tiny_tokenizer).reconstruct(sentences[:6]), sentences[:6]
    )
    assert 0 < expected < 100
    assert events[0].value == pytest.approx(expected, abs=1e-3)

    texts = {
        t: acc.Tensors(t)[0].tensor_proto.string_val[0].decode() for t in acc.Tags()["tensors"]
    }
    by_tag = {t.split("/text_summary")[0]: v for t, v in texts.items()}
    assert set(by_tag) >= {"val/reconstructions", "val/variational_samples", "val/interpolation"}
    assert (
        sentences[0] in by_tag["val/reconstructions"]
        and "mu-decoded" in by_tag["val/reconstructions"]
    )
    assert by_tag["val/variational_samples"].count("sample") == 4  # 2 shown sentences x 2 samples
    assert "a=0.5" in by_tag["val/interpolation"] and sentences[1] in by_tag["val/interpolation"]


def test_callback_unit_restores_train_mode_and_reads_sentences_file(
    tmp_path, tiny_tokenizer, tiny_sentences, partly_trained
):
    """Called directly: sentences come from a file, the module's train mode comes back, and
    a logger that is not TensorBoard gets the scalar only (no crash)."""
    f = tmp_path / "fixed.txt"
    f.write_text("\n".join(["", *tiny_sentences[:3]]) + "\n")
    cb = SamplesCallback(sentences_file=str(f), num_sentences=2, max_len=20)
    system = TinySystem(partly_trained, tiny_tokenizer)
    system.train()
    logged = {}
    system.log = lambda name, value, **kw: logged.update({name: (value, kw)})
    trainer = SimpleNamespace(
        sanity_checking=False, is_global_zero=True, loggers=[object()], global_step=0
    )
    cb.on_validation_epoch_end(trainer, system)
    assert system.training and system.model.training
    assert cb.sentences(trainer, tiny_tokenizer) == tiny_sentences[:2]
    value, kw = logged["val/recon_bleu"]
    assert kw == {"rank_zero_only": True} and 0 <= value <= 100
    # Not rank zero: nothing runs.
    logged.clear()
    cb.on_validation_epoch_end(SimpleNamespace(sanity_checking=False, is_global_zero=False), system)
    assert logged == {}
