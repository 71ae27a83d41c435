"""What `vat train` prints when a fit ends: checkpoints, final validation, what next."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only

from vat.callbacks.base import clock_text, relative_to_cwd
from vat.callbacks.samples import SamplesCallback
from vat.generate.generator import TruncationWarning, VATGenerator
from vat.generate.variation import SampleAgreement, deterministic_note, measure_agreement


class TrainingSummary(pl.Callback):
    """Prints the summary at the end of `fit` (rank 0; not after an exception)."""

    def __init__(self) -> None:
        self._start: tuple[float, int] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = (time.perf_counter(), trainer.global_step)

    @rank_zero_only
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.interrupted:
            return
        agreement = posterior_agreement(trainer, pl_module)
        print("\n".join(summary_lines(trainer, self._start, agreement)), flush=True)


def posterior_agreement(
    trainer: pl.Trainer, pl_module: pl.LightningModule, sentences: int = 32, samples: int = 4
) -> SampleAgreement | None:
    """`measure_agreement` on the first validation sentences, or None without them."""
    model, tokenizer = getattr(pl_module, "model", None), getattr(pl_module, "tokenizer", None)
    loaders = trainer.val_dataloaders
    if model is None or tokenizer is None or not loaders:
        return None
    loader = loaders[0] if isinstance(loaders, list | tuple) else loaders
    batch = next(iter(loader), None)
    if batch is None:
        return None
    texts = [t for t in tokenizer.decode_batch(batch["src"][:sentences].tolist()) if t.strip()]
    if not texts:
        return None
    gen = VATGenerator(model, tokenizer, prior_std=float(pl_module.prior_std))
    with warnings.catch_warnings():  # validation sentences already fit max_len
        warnings.simplefilter("ignore", TruncationWarning)
        return measure_agreement(gen, texts, samples)


def summary_lines(
    trainer: pl.Trainer,
    start: tuple[float, int] | None,
    agreement: SampleAgreement | None = None,
) -> list[str]:
    lines = []
    logged = trainer.callback_metrics
    if start is not None:
        seconds, steps = time.perf_counter() - start[0], trainer.global_step - start[1]
        rate = f"{steps / seconds:.3g} steps/s" if seconds > 0 else "-"
        tps = logged.get("train/tokens_per_s")
        tokens = f", {float(tps):,.0f} tokens/s" if tps is not None else ""
        lines.append(f"vat: {steps} steps in {clock_text(seconds)} ({rate}{tokens})")
    best, last = None, None
    for cb in trainer.checkpoint_callbacks:
        if not isinstance(cb, ModelCheckpoint):
            continue
        if cb.monitor and cb.best_model_path:
            best = (cb.best_model_path, cb.monitor, cb.best_model_score)
        if cb.save_last and cb.last_model_path:
            last = cb.last_model_path
    if best is not None:
        score = f" ({best[1]} {float(best[2]):.4f})" if best[2] is not None else ""
        lines.append(f"vat: best checkpoint {relative_to_cwd(best[0])}{score}")
    if last is not None:
        lines.append(f"vat: last checkpoint {relative_to_cwd(last)}")
    parts = [
        f"{label} {float(logged[key]):.4f}{unit}"
        for key, label, unit in (
            ("val/nll", "NLL given z", " nats/token"),
            ("val/kl", "KL", " nats/token"),
            ("val/recon_bleu", "BLEU", ""),
        )
        if key in logged
    ]
    if "val/nll" in logged and "val/ppl" in logged:
        parts[0] += f" (reconstruction perplexity {float(logged['val/ppl']):.4g})"
    if "val/nll" not in logged:  # no validation data, validation off, or a run too short
        limit = getattr(trainer, "limit_val_batches", 1.0)
        if limit and getattr(trainer, "num_val_batches", None) and trainer.global_step:
            lines.append(
                f"vat: no validation ran: the run ended before the first "
                f"(--trainer.val_check_interval {trainer.val_check_interval})"
            )
    elif "val/recon_bleu" not in logged and not any(
        isinstance(c, SamplesCallback) for c in getattr(trainer, "callbacks", [])
    ):
        parts.append("BLEU not measured (add the vat.callbacks.SamplesCallback callback)")
    if parts:
        lines.append("vat: final validation: " + ", ".join(parts))
    if agreement is not None and agreement.nearly_deterministic:
        lines.append(f"vat: note: {deterministic_note(agreement, 1.0)}")
    where = best[0] if best is not None else last
    if where is not None:
        run = Path(where).parent.parent  # RUN/checkpoints/x.ckpt
        lines += [
            "next:",
            f"  vat evaluate --model {run} --tasks sts",
            f'  vat generate reconstruct --model {run} "A man is playing a guitar."',
            f"  vat export {run} {run.name}-model --evaluate STS12,STSBenchmark",
        ]
    return lines
