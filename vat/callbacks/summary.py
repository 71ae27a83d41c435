"""What `vat train` prints when a fit ends: where the checkpoints are, how it did, what next.

    vat: 2000 steps in 3:05 (10.8 steps/s, 41,236 tokens/s)
    vat: best checkpoint runs/demo/checkpoints/best-step0002000.ckpt (val/loss 3.1234)
    vat: last checkpoint runs/demo/checkpoints/last.ckpt
    vat: final validation: NLL 2.9012 nats/token, KL 11.234 nats/token, BLEU 71.20
    next:
      vat evaluate --model runs/demo --tasks sts
      vat generate reconstruct --model runs/demo "A man is playing a guitar."
      vat export runs/demo my-vat --evaluate STS12,STSBenchmark

`--model runs/demo` (a run folder) means its best checkpoint (vat.share.resolve).
"""

from __future__ import annotations

import time
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only


class TrainingSummary(pl.Callback):
    """Prints the summary above at the end of `fit` (rank 0; not after an exception)."""

    def __init__(self) -> None:
        self._start: tuple[float, int] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = (time.perf_counter(), trainer.global_step)

    @rank_zero_only
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.interrupted:
            return
        print("\n".join(summary_lines(trainer, self._start)), flush=True)


def summary_lines(trainer: pl.Trainer, start: tuple[float, int] | None) -> list[str]:
    lines = []
    logged = trainer.callback_metrics
    if start is not None:
        seconds, steps = time.perf_counter() - start[0], trainer.global_step - start[1]
        rate = f"{steps / seconds:.3g} steps/s" if seconds > 0 else "-"
        tps = logged.get("train/tokens_per_s")
        tokens = f", {float(tps):,.0f} tokens/s" if tps is not None else ""
        lines.append(f"vat: {steps} steps in {_clock(seconds)} ({rate}{tokens})")
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
        lines.append(f"vat: best checkpoint {best[0]}{score}")
    if last is not None:
        lines.append(f"vat: last checkpoint {last}")
    parts = [
        f"{label} {float(logged[key]):.4f}{unit}"
        for key, label, unit in (
            ("val/nll", "NLL", " nats/token"),
            ("val/kl", "KL", " nats/token"),
            ("val/recon_bleu", "BLEU", ""),
        )
        if key in logged
    ]
    if "val/recon_bleu" not in logged:
        parts.append("BLEU not measured (add the vat.callbacks.SamplesCallback callback)")
    if parts:
        lines.append("vat: final validation: " + ", ".join(parts))
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


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
