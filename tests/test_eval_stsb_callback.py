"""vat.callbacks.sts.STSBSpearman: `val/stsb_spearman` equals the harness's STS-B dev score
for the same weights, and a ModelCheckpoint monitoring it keeps the best."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from eval_helpers import write_mini_senteval
from helpers import CheckpointSystem
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from vat.callbacks.sts import METRIC, STSBSpearman
from vat.errors import VatError
from vat.eval.encoders import vat_encoder
from vat.eval.engine import EvalSettings, evaluate
from vat.share.checkpoint import vat_metadata
from vat.share.resolve import load_model


class TrainingSystem(CheckpointSystem):
    """A real (tiny) VAT that learns between validations, so the score moves; it saves vat
    checkpoints that the harness reads."""

    def __init__(self, ckpt: Path, sentences: list[str]) -> None:
        # big SGD steps: the encoder changes a lot between validations
        super().__init__(ckpt, sentences, n_sentences=8, lr=0.5)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["vat"] = vat_metadata(self.model, self.tokenizer, self.prior_std, [0, 1])


class Record(Callback):
    """The value of the metric after each validation, with the step."""

    def __init__(self) -> None:
        self.values: list[tuple[int, float]] = []

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.values.append((trainer.global_step, float(trainer.callback_metrics[METRIC])))


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> Path:
    return write_mini_senteval(tmp_path_factory.mktemp("senteval"), n=60)


def test_metric_equals_harness_and_checkpoint_keeps_best(tmp_path, tiny_ckpt, tiny_sentences, mini):
    torch.manual_seed(0)
    module = TrainingSystem(tiny_ckpt, tiny_sentences)
    record = Record()
    best = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", monitor=METRIC, mode="max", save_top_k=1, filename="best-{step}"
    )
    every = ModelCheckpoint(
        dirpath=tmp_path / "all", save_top_k=-1, every_n_epochs=1, filename="{step}"
    )
    trainer = L.Trainer(
        max_epochs=6,
        logger=False,
        callbacks=[STSBSpearman(str(mini)), record, best, every],
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)

    assert len(record.values) == 6 and len({round(v, 6) for _, v in record.values}) > 1  # it moves
    settings = EvalSettings(relatedness="cosine", progress=False, device="cpu")
    for step, value in record.values:  # closed comparison, validation by validation
        path = tmp_path / "all" / f"step={step}.ckpt"
        res, _ = evaluate(vat_encoder(load_model(path), "mean"), ["STSBenchmark"], mini, settings)
        # the harness encodes train+dev+test together, the callback dev alone: other batches,
        # other padding, features equal to float rounding (~1e-7), Spearman to 1e-4 at worst
        assert value == pytest.approx(res["STSBenchmark-cosine"]["dev"]["spearman"], abs=1e-4), step
    best_step, best_value = max(record.values, key=lambda sv: sv[1])
    assert float(best.best_model_score) == pytest.approx(best_value)
    assert Path(best.best_model_path).name == f"best-step={best_step}.ckpt"
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 1


def test_every_n_validations_and_bad_arguments(tmp_path, tiny_ckpt, tiny_sentences, mini):
    module = TrainingSystem(tiny_ckpt, tiny_sentences)
    cb = STSBSpearman(str(mini), every_n_validations=2)
    record = Record()
    trainer = L.Trainer(
        max_epochs=4,
        logger=False,
        callbacks=[cb, record],
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)
    values = [v for _, v in record.values]
    assert cb.val_runs == 4 and len(values) == 4
    assert (
        values[0] == values[1] and values[2] == values[3] and values[1] != values[2]
    )  # computed at runs 1 and 3
    with pytest.raises(VatError, match="every_n_validations"):
        STSBSpearman(str(mini), every_n_validations=0)
    with pytest.raises(VatError, match="pooling"):
        STSBSpearman(str(mini), pooling="cls")
    with pytest.raises(VatError, match="STSBenchmark"):  # a missing data dir fails at setup
        STSBSpearman(str(tmp_path / "nowhere")).setup(None, module, "fit")
