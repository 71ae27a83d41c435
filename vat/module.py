"""The training *system*: objective, logging and optimisation around `vat.model.VAT`.

Lightning's style guide separates the model (plain torch, `vat/model.py`) from the system
(this LightningModule). Methods follow the guide's order: init, forward, training_step,
validation_step, test_step, configure_optimizers, then hooks.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from vat.checkpoint import vat_metadata
from vat.errors import VatError
from vat.losses import (
    KLSchedule,
    free_bits_kl,
    gaussian_kl,
    masked_mean,
    noam_lr,
    reconstruction_nll,
)
from vat.model import VAT, VATConfig
from vat.tokenizer import PAD_ID, VATTokenizer


@dataclass
class LossConfig:
    """The objective of PAPER.md eq. 5-6."""

    prior_std: float = 0.4
    """s, the standard deviation of the scaled prior N(0, s^2 I). Paper: 0.4."""
    learn_prior_std: bool = False
    """Learn s as a parameter (the abstract's reading), starting from `prior_std`. Off in the paper's experiments."""
    kl_schedule: KLSchedule = field(default_factory=KLSchedule)
    """The KL weight w(step) times beta."""
    free_bits: float = 0.0
    """Free bits per latent dimension (Kingma et al. 2016); 0 turns them off."""
    sample_latent: bool = True
    """Sample z = mu + sigma * eps in training and validation (the VAT). False decodes from
    z = mu: with a zero KL weight, the paper's plain Transformer-autoencoder baseline; also
    makes runs noise-free for comparisons."""


@dataclass
class OptimConfig:
    """Adam with the Noam schedule (Vaswani et al. 2017, eq. 3)."""

    schedule: Literal["noam", "constant"] = "noam"
    """noam: lr = lr_scale * d^-0.5 * min(step^-0.5, step * warmup^-1.5); constant: lr."""
    warmup_steps: int = 50_000
    """Noam warm-up steps. Paper: 50,000."""
    lr_scale: float = 1.0
    """Multiplier of the Noam curve."""
    lr: float = 5e-4
    """Learning rate of the constant schedule."""
    betas: tuple[float, float] = (0.9, 0.98)
    """Adam betas (Vaswani et al. 2017)."""
    eps: float = 1e-9
    """Adam epsilon (Vaswani et al. 2017)."""
    weight_decay: float = 0.0
    """AdamW-style decoupled weight decay (0: plain Adam)."""


def _as(cls, value):
    """Accept a dataclass or a plain dict (checkpoints store plain dicts for safe loading)."""
    value = asdict(value) if isinstance(value, cls) else dict(value)
    if cls is LossConfig and isinstance(value.get("kl_schedule"), dict):
        value["kl_schedule"] = KLSchedule(**value["kl_schedule"])
    if cls is OptimConfig and "betas" in value:
        value["betas"] = tuple(value["betas"])
    return cls(**value)


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/inf loss; raised before the optimiser step touches the weights."""


class VATSystem(L.LightningModule):
    """Trains a VAT on L = mean_t [ CE_t + beta * w(step) * KL_t ] (PAPER.md eq. 5-6)."""

    def __init__(
        self,
        arch: VATConfig = VATConfig(),  # noqa: B008 - copied below, never mutated
        loss: LossConfig = LossConfig(),  # noqa: B008
        optim: OptimConfig = OptimConfig(),  # noqa: B008
    ) -> None:
        """
        Args:
            arch: The model architecture. vocab_size and max_len are linked from the data section.
            loss: The objective: prior scale, KL schedule, free bits.
            optim: Optimiser and learning-rate schedule.
        """
        super().__init__()
        self.arch = _as(VATConfig, arch)
        self.loss_cfg = _as(LossConfig, loss)
        self.optim_cfg = _as(OptimConfig, optim)
        # Plain dicts only, so checkpoints load with torch.load(weights_only=True).
        self.save_hyperparameters({"arch": self.arch.to_dict(), "loss": asdict(self.loss_cfg), "optim": asdict(self.optim_cfg)})
        self.model = VAT(self.arch)
        self.kl_schedule = self.loss_cfg.kl_schedule
        if not 0 < self.loss_cfg.prior_std:
            raise VatError(f"model.loss.prior_std must be positive, got {self.loss_cfg.prior_std}")
        log_s = torch.tensor(math.log(self.loss_cfg.prior_std))
        if self.loss_cfg.learn_prior_std:
            self.log_prior_std = nn.Parameter(log_s)
        else:
            self.register_buffer("log_prior_std", log_s)
        self.tokenizer: VATTokenizer | None = None
        self.length_histogram: list[int] = []
        self.val_nll, self.val_kl, self.val_kl_weighted, self.val_loss = (MeanMetric() for _ in range(4))
        self.val_ppl = Perplexity(ignore_index=PAD_ID)
        self._val_generator: torch.Generator | None = None
        self._rng_to_restore: torch.Tensor | None = None
        self._last_step_end: float | None = None
        self._val_batches = 0

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, hparams_file=None, strict=None, **kwargs):
        """Lightning's loader, always weights-only (issue 11, section 4): vat checkpoints hold
        tensors and plain types, and an explicit weights_only=True is the one setting that
        TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD cannot override. The file is checked first
        (vat.checkpoint.read_checkpoint), so a corrupt one is a one-line CheckpointError."""
        from vat.checkpoint import read_checkpoint

        if kwargs.pop("weights_only", True) is not True:
            raise VatError("VATSystem.load_from_checkpoint loads weights only (weights_only=True)")
        read_checkpoint(checkpoint_path)
        return super().load_from_checkpoint(checkpoint_path, map_location, hparams_file, strict, weights_only=True, **kwargs)

    @property
    def prior_std(self) -> torch.Tensor:
        return self.log_prior_std.exp()

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, sample: bool = True):
        return self.model(src, tgt_in, sample=sample)

    def _shared_step(self, batch: dict[str, torch.Tensor], stage: str, generator: torch.Generator | None = None) -> dict:
        mu, logvar, mask = self.model.encode(batch["src"])  # (B, T, d), (B, T, d), (B, T)
        z = self.model.reparameterize(mu, logvar, generator=generator) if self.loss_cfg.sample_latent else mu  # (B, T, d)
        logits = self.model.decode(batch["tgt_in"], z, mask)  # (B, T, V)
        nll_t = reconstruction_nll(logits, batch["tgt_out"], mask)  # (B, T)
        kl_per_dim = gaussian_kl(mu.float(), logvar.float(), self.prior_std)  # (B, T, d)
        kl_t = kl_per_dim.sum(-1)  # (B, T)
        kl_objective_t = free_bits_kl(kl_per_dim, mask, self.loss_cfg.free_bits)  # (B, T)
        weight = self.kl_schedule(self.global_step)
        nll = masked_mean(nll_t, mask)
        kl = masked_mean(kl_t, mask)
        # Padding counts in neither term: both means run over non-pad tokens only (PAPER.md).
        loss = nll + weight * masked_mean(kl_objective_t, mask)
        return {"loss": loss, "nll": nll, "kl": kl, "kl_weight": weight, "kl_weighted": weight * kl,
                "logits": logits, "ntokens": mask.sum(), "mask": mask}

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        out = self._shared_step(batch, "train")
        if not torch.isfinite(out["loss"]):
            raise NonFiniteLossError(self._non_finite_message(out))
        now = time.perf_counter()
        ntok = out["ntokens"].item()
        log = {
            "train/loss": out["loss"], "train/nll": out["nll"], "train/ppl": out["nll"].exp(), "train/kl": out["kl"],
            "train/kl_weight": out["kl_weight"], "train/kl_weighted": out["kl_weighted"],
            "train/nonpad_frac": ntok / batch["src"].numel(),
        }
        if self._last_step_end is not None:
            log["train/tokens_per_s"] = ntok * self.trainer.world_size / max(now - self._last_step_end, 1e-9)
        if self.loss_cfg.learn_prior_std:
            log["train/prior_std"] = self.prior_std.detach()
        # sync_dist: under DDP the logged values are the mean over processes, not rank 0's alone.
        self.log_dict(log, on_step=True, on_epoch=False, prog_bar=False, batch_size=batch["src"].shape[0], sync_dist=True)
        self.log("loss", out["loss"], prog_bar=True, logger=False, batch_size=batch["src"].shape[0])
        self._last_step_end = now
        return out["loss"]

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def _eval_step(self, batch: dict[str, torch.Tensor], stage: str) -> None:
        if self._val_generator is None or self._val_generator.device != self.device:
            self._val_generator = torch.Generator(device=self.device)
        if self._val_batches == 0:
            # A fixed noise stream for every evaluation: comparable numbers across runs, and
            # no draw from the global RNG, so evaluation never perturbs training's randomness.
            self._val_generator.manual_seed(1234 + self.global_rank)
        self._val_batches += 1
        out = self._shared_step(batch, stage, generator=self._val_generator)
        n = out["ntokens"]
        self.val_nll.update(out["nll"], n)
        self.val_kl.update(out["kl"], n)
        self.val_kl_weighted.update(out["kl_weighted"], n)
        self.val_loss.update(out["loss"], n)
        self.val_ppl.update(out["logits"].float(), batch["tgt_out"])
        bs = batch["src"].shape[0]
        self.log_dict({f"{stage}/nll": self.val_nll, f"{stage}/kl": self.val_kl, f"{stage}/kl_weighted": self.val_kl_weighted,
                       f"{stage}/loss": self.val_loss, f"{stage}/ppl": self.val_ppl}, on_step=False, on_epoch=True, batch_size=bs)
        self.log(f"{stage}/kl_weight", out["kl_weight"], on_step=False, on_epoch=True, batch_size=bs)

    def configure_optimizers(self):
        o = self.optim_cfg
        base_lr = 1.0 if o.schedule == "noam" else o.lr
        opt_cls = torch.optim.AdamW if o.weight_decay > 0 else torch.optim.Adam
        optimizer = opt_cls(self.parameters(), lr=base_lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
        if o.schedule == "noam":
            d = self.arch.d_model
            # LambdaLR's step counts from 0 at the first update; Noam's step counts from 1.
            sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: noam_lr(s + 1, d, o.warmup_steps, o.lr_scale))
        else:
            sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": sched, "interval": "step", "name": "train/lr"}}

    # -- hooks ------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or getattr(dm, "tokenizer", None) is None:
            return
        if dm.tokenizer.vocab_size > self.arch.vocab_size:
            raise VatError(f"model.arch.vocab_size={self.arch.vocab_size} is smaller than the tokenizer's {dm.tokenizer.vocab_size} tokens")
        self.tokenizer = dm.tokenizer
        self.length_histogram = list(dm.length_histogram)
        if stage == "fit":
            # trainer.log_dir is a collective call under DDP: every rank must ask for it.
            self._save_tokenizer(self.trainer.log_dir)

    @rank_zero_only
    def _save_tokenizer(self, log_dir: str | None) -> None:
        if log_dir and self.tokenizer is not None:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            self.tokenizer.save(Path(log_dir) / "tokenizer.json")

    def on_validation_epoch_start(self) -> None:
        self._val_batches = 0

    on_test_epoch_start = on_validation_epoch_start

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        if self._rng_to_restore is not None:
            # Restored here, at the first step after loading, rather than in
            # on_load_checkpoint, because Lightning may run code between the two.
            torch.set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.tokenizer is None:
            raise VatError("cannot save a vat checkpoint before the tokenizer is set (run through `vat train`)")
        checkpoint["vat"] = vat_metadata(self.model, self.tokenizer, float(self.prior_std), self.length_histogram)
        checkpoint["vat_rng"] = {"torch": torch.get_rng_state()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        meta = checkpoint.get("vat")
        if meta is None:
            raise VatError("the checkpoint is not a vat checkpoint (no 'vat' metadata)")
        if meta["model_config"] != self.arch.to_dict():
            diff = {k: (v, self.arch.to_dict().get(k)) for k, v in meta["model_config"].items() if self.arch.to_dict().get(k) != v}
            raise VatError(f"--ckpt_path: the checkpoint's model config differs from this run's: {diff} (checkpoint, config)")
        if self.tokenizer is not None and meta["tokenizer"] != self.tokenizer.to_str():
            raise VatError("--ckpt_path: the checkpoint's tokenizer differs from this run's data.tokenizer (different corpus, vocab_size or tokenizer_path)")
        if self.tokenizer is None:
            self.tokenizer = VATTokenizer.from_str(meta["tokenizer"])
            self.length_histogram = list(meta.get("length_histogram", []))
        rng = checkpoint.get("vat_rng", {}).get("torch")
        if rng is not None:
            self._rng_to_restore = rng

    def _non_finite_message(self, out: dict) -> str:
        saved = [getattr(cb, "last_model_path", "") for cb in self.trainer.checkpoint_callbacks]
        saved += [getattr(cb, "best_model_path", "") for cb in self.trainer.checkpoint_callbacks]
        last = next((p for p in saved if p), None)  # last.ckpt first, else the best one
        return (f"non-finite loss at step {self.global_step} (nll={out['nll'].item():.4g}, kl={out['kl'].item():.4g}); "
                f"stopped before the update, weights untouched; last good checkpoint: {last or 'none saved yet'}")
