"""The training *system*: objective, logging and optimisation around `vat.model.VAT`."""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import NamedTuple

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from vat.errors import VatError, check
from vat.io import atomic_write
from vat.model import VAT, VATConfig
from vat.share.checkpoint import check_same_model_config, read_checkpoint, vat_metadata
from vat.share.training_record import training_record
from vat.tokenizer import PAD_ID, VATTokenizer
from vat.train.config import (
    LossConfig,
    NoiseConfig,
    OptimConfig,
    SentenceLatentConfig,
    as_config,
)
from vat.train.noise import NoisedBatch, memory_keep, noised_batch, step_seed
from vat.train.non_finite import check_finite_weights, stop_if_non_finite
from vat.train.objective import CompiledObjective, objective_terms
from vat.train.rate import KLController
from vat.train.schedules import noam_lr
from vat.train.state import TrainState
from vat.train.step_logging import (
    TokenRate,
    host_scalars,
    logs_now,
    matmul_flops_per_token,
    train_scalars,
)


class StepOutput(NamedTuple):
    """What `_shared_step` computes for one batch (scalars are 0-d tensors on the device)."""

    loss: torch.Tensor  # nll + weight * KL objective (free bits applied)
    nll: torch.Tensor  # mean per non-pad token
    kl: torch.Tensor  # mean per non-pad token, summed over latent dimensions (the rate)
    kl_weight: torch.Tensor | float  # the effective weight (schedule or controller, times beta)
    logits: torch.Tensor | None  # (B, T, V); None in training (not needed, not kept)
    mask: torch.Tensor  # (B, T) bool
    ntokens: torch.Tensor  # non-pad tokens
    kl_sentence: torch.Tensor | None = None  # the sentence latent's KL per sentence
    bow: torch.Tensor | None = None  # its bag-of-words loss


class VATSystem(L.LightningModule):
    """Trains a VAT on L = mean_t [ CE_t + beta * w * KL_t ] (the paper's eq. 5-6), w from the
    KL schedule or the rate controller. training_step never waits for the device: scalars
    reach the host at logging steps only (bench/bench_sync_ops.py counts the syncs)."""

    def __init__(
        self,
        arch: VATConfig = VATConfig(),  # noqa: B008 - copied below, never mutated
        loss: LossConfig = LossConfig(),  # noqa: B008
        optim: OptimConfig = OptimConfig(),  # noqa: B008
        noise: NoiseConfig = NoiseConfig(),  # noqa: B008
        sentence_latent: SentenceLatentConfig = SentenceLatentConfig(),  # noqa: B008
        compile: bool = False,
    ) -> None:
        """
        Args:
            arch: The model architecture. vocab_size and max_len are linked from the data section.
            loss: The objective: prior scale, KL schedule or target rate, free bits.
            optim: Optimiser and learning-rate schedule.
            noise: Noise on the training inputs (off by default).
            sentence_latent: A sentence latent beside the token latents (off by default).
            compile: torch.compile the training step's forward and loss (lengths padded to
                multiples of 8); checkpoints are the same either way.
        """
        super().__init__()
        self.sentence_cfg = sl = as_config(SentenceLatentConfig, sentence_latent)
        arch = as_config(VATConfig, arch)
        dim = arch.sentence_dim
        check(
            dim in (0, sl.dim),
            "model.arch.sentence_dim",
            f"{sl.dim} (model.sentence_latent.dim)",
            dim,
        )
        self.arch = replace(arch, sentence_dim=sl.dim)
        self.loss_cfg = as_config(LossConfig, loss)
        self.optim_cfg = as_config(OptimConfig, optim)
        self.noise_cfg = as_config(NoiseConfig, noise)
        self.compile = bool(compile)
        # Plain dicts only, so checkpoints load with torch.load(weights_only=True).
        self.save_hyperparameters(
            {
                "arch": arch.to_dict(),  # as given: a resume compares it with its options
                "loss": asdict(self.loss_cfg),
                "optim": asdict(self.optim_cfg),
                "noise": asdict(self.noise_cfg),
                "sentence_latent": asdict(sl),
                "compile": self.compile,
            }
        )
        self.model = VAT(self.arch)
        lc = self.loss_cfg
        self.kl_schedule = lc.kl_schedule
        log_s = torch.tensor(math.log(lc.prior_std))
        if lc.learn_prior_std:
            self.log_prior_std = nn.Parameter(log_s)
        else:
            self.register_buffer("log_prior_std", log_s)
        self.rate = None if lc.target_kl is None else KLController.from_config(lc)
        if sl.bow_weight:  # set from the training counts in setup (not saved: derived)
            self.register_buffer("bow_weights", torch.ones(self.arch.vocab_size), persistent=False)
        self.train_state = TrainState()
        self.tokenizer: VATTokenizer | None = None
        self.length_histogram: list[int] = []
        self.token_counts: list[int] = []
        self.fit_sample: dict | None = None  # vat.data.token_counts.fit_sample
        self.val_nll, self.val_kl, self.val_kl_weighted, self.val_loss = (
            MeanMetric() for _ in range(4)
        )
        self.val_ppl = Perplexity(ignore_index=PAD_ID)
        self._val_generator: torch.Generator | None = None
        self._rng_to_restore: torch.Tensor | None = None
        self._compiled: CompiledObjective | None = None
        self._step_generator: torch.Generator | None = None
        self._noised: NoisedBatch | None = None  # the step's noise counts, for logging
        self._step_terms: tuple[torch.Tensor, torch.Tensor] | None = None  # (nll, kl)
        self._token_rate = TokenRate(matmul_flops_per_token(self.model))
        self._log_step = False
        self.init_record: dict | None = None  # where a continued run started (init_from)

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path, map_location=None, hparams_file=None, strict=None, **kwargs
    ):
        """Lightning's loader, always weights-only (explicitly: TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD
        cannot undo it), a corrupt file one line."""
        if kwargs.pop("weights_only", True) is not True:
            raise VatError("VATSystem.load_from_checkpoint loads weights only (weights_only=True)")
        read_checkpoint(checkpoint_path)
        return super().load_from_checkpoint(
            checkpoint_path, map_location, hparams_file, strict, weights_only=True, **kwargs
        )

    @property
    def prior_std(self) -> torch.Tensor:
        return self.log_prior_std.exp()

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        sample: bool = True,
        generator: torch.Generator | None = None,
    ):
        return self.model(src, tgt_in, sample=sample, generator=generator)

    def kl_weight(self) -> torch.Tensor | float:
        """The effective KL weight now: beta times the controller's weight or w(progress)."""
        if self.rate is not None:
            beta = self.kl_schedule.beta
            return self.rate.weight if beta == 1.0 else beta * self.rate.weight  # 1 * w is w
        unit = self.kl_schedule.unit
        if unit == "steps":
            return self.kl_schedule(self.global_step)  # a Python float: no kernel, no sync
        return self.kl_schedule(self.train_state.seen(unit))

    def _shared_step(
        self, batch: dict[str, torch.Tensor], stage: str, generator: torch.Generator | None = None
    ) -> StepOutput:
        """Loss terms of one batch: training may run compiled and keeps no logits."""
        train = stage == "train"
        objective = objective_terms
        if train and self.compile:
            if self._compiled is None:
                self._compiled = CompiledObjective(self.arch.max_len)
            objective = self._compiled
            batch = self._compiled.prepare(batch, self.arch.pad_id)
        terms = objective(
            self.model,
            batch["src"],
            batch["tgt_in"],
            batch["tgt_out"],
            self.prior_std,
            self.loss_cfg.free_bits,
            self.loss_cfg.sample_latent,
            generator,
            not train,
            self.loss_cfg.fused_cross_entropy,
            batch.get("memory_keep"),
            getattr(self, "bow_weights", None),
        )
        weight = self.kl_weight()
        if isinstance(weight, torch.Tensor):
            weight = weight.to(terms.kl.dtype)
        loss = terms.nll + weight * terms.kl_objective
        if terms.bow is not None:
            loss = loss + self.sentence_cfg.bow_weight * terms.bow
        return StepOutput(
            loss, terms.nll, terms.kl, weight, terms.logits, terms.mask, terms.ntokens,
            terms.kl_sentence, terms.bow,
        )  # fmt: skip

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        # training only: validation and evaluation see clean inputs and the full memory
        sl, noise = self.sentence_cfg, self.noise_cfg.active
        generator = self._generator(batch_idx) if noise or sl.drops else None
        if noise:
            batch = self._noised_batch(batch, generator)
        if sl.drops:  # drawn after the noise, from the same generator
            keep = memory_keep(batch["src"], sl.memory_dropout, sl.drop_all_rate, generator)
            batch = {**batch, "memory_keep": keep}
        out = self._shared_step(batch, "train")
        reduce = None
        if self.trainer.world_size > 1:
            reduce = lambda t: self.trainer.strategy.reduce(t, reduce_op="sum")  # noqa: E731
        step_kl = self.train_state.count(out.mask, out.ntokens, out.kl, reduce)
        if self.rate is not None:
            self.rate.update(step_kl)
        self._step_terms = (out.nll, out.kl)  # for the non-finite guard, after clipping
        self._set_tensor_lr()
        self._log_step = logs_now(self.trainer, self.global_step)
        if self._log_step:
            self._log_train(out, batch)
        return out.loss

    def _generator(self, batch_idx: int) -> torch.Generator:
        """The step's generator, seeded per step, batch and rank: a resume draws the same."""
        if self._step_generator is None or self._step_generator.device != self.device:
            self._step_generator = torch.Generator(device=self.device)
        seed = step_seed(self.noise_cfg.seed, self.global_step, batch_idx, self.global_rank)
        return self._step_generator.manual_seed(seed)

    def _noised_batch(
        self, batch: dict[str, torch.Tensor], generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        vocab = self.tokenizer.vocab_size if self.tokenizer is not None else self.arch.vocab_size
        rates = {k: v for k, v in asdict(self.noise_cfg).items() if k != "seed"}
        self._noised = noised_batch(batch, generator, **rates, vocab_size=vocab)
        return self._noised.batch

    def _log_train(self, out: StepOutput, batch: dict[str, torch.Tensor]) -> None:
        bs = batch["src"].shape[0]
        log = train_scalars(out, batch)
        if self._noised is not None:  # the share of words each noise changed in this batch
            nb, n = self._noised, self.noise_cfg
            for name, count, words, on in (
                ("decoder_dropped", nb.decoder_dropped, nb.decoder_words, n.decoder_word_dropout),
                ("encoder_deleted", nb.encoder_deleted, nb.encoder_words, n.encoder_delete),
                ("encoder_masked", nb.encoder_masked, nb.encoder_words, n.encoder_mask),
                ("encoder_moved", nb.encoder_moved, nb.encoder_words, n.encoder_shuffle_distance),
            ):
                if on:
                    log[f"train/noise/{name}"] = count / words.clamp_min(1)
        rate = self._token_rate.update(self.train_state.seen("tokens"))
        if rate is not None:  # MFU = train/model_tflops / the device's peak TFLOP/s
            log["train/tokens_per_s"] = rate
            log["train/model_tflops"] = rate * self._token_rate.flops_per_token / 1e12
        if out.kl_sentence is not None:
            log["train/kl_sentence"] = out.kl_sentence
        if out.bow is not None:
            log["train/bow"] = out.bow
        if self.loss_cfg.learn_prior_std:
            log["train/prior_std"] = self.prior_std.detach()
        if self._compiled is not None:  # a host count: recompiles show up on the curve
            log["train/compiled_graphs"] = float(self._compiled.graphs)
        if self._tensor_lr():
            log["train/lr"] = self.trainer.optimizers[0].param_groups[0]["lr"]
        log["loss"] = out.loss
        reduce = None
        if self.trainer.world_size > 1:  # the logged values: the mean over processes
            reduce = lambda t: self.trainer.strategy.reduce(t, reduce_op="mean")  # noqa: E731
        # one copy to the host for all (Lightning would sync per tensor, and the bar per step)
        log = host_scalars(log, reduce)
        loss = log.pop("loss")
        self.log_dict(log, on_step=True, on_epoch=False, prog_bar=False, batch_size=bs)
        self.log("loss", loss, prog_bar=True, logger=False, batch_size=bs)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def _eval_step(self, batch: dict[str, torch.Tensor], stage: str) -> None:
        out = self._shared_step(batch, stage, generator=self._val_generator)
        n = out.ntokens
        # One set of metric objects serves val and test: the two stages never run at once.
        self.val_nll.update(out.nll, n)
        self.val_kl.update(out.kl, n)
        self.val_kl_weighted.update(out.kl_weight * out.kl, n)
        self.val_loss.update(out.loss, n)
        self.val_ppl.update(out.logits.float(), batch["tgt_out"])
        bs = batch["src"].shape[0]
        names = ("nll", "kl", "kl_weighted", "loss", "ppl")
        metrics = {f"{stage}/{k}": getattr(self, f"val_{k}") for k in names}
        self.log_dict(metrics, on_step=False, on_epoch=True, batch_size=bs)
        self.log(f"{stage}/kl_weight", out.kl_weight, on_step=False, on_epoch=True, batch_size=bs)

    def configure_optimizers(self):
        o = self.optim_cfg
        opt_cls = torch.optim.AdamW if o.weight_decay > 0 else torch.optim.Adam
        kw = {"betas": o.betas, "eps": o.eps, "weight_decay": o.weight_decay}
        device = self.device.type
        if self._tensor_lr():
            # A device tensor set every step from the progress counters (no host wait): fused
            # Adam takes it on CUDA and the CPU, elsewhere only the single-tensor path does.
            lr = torch.tensor(0.0, device=self.device)  # set before the first update
            if device in ("cuda", "cpu"):
                return opt_cls(self.parameters(), lr=lr, fused=True, **kw)
            return opt_cls(self.parameters(), lr=lr, foreach=False, **kw)
        # Fused on CUDA; on the CPU torch's default single-tensor path, which trained the
        # shipped demo model, so that retraining it follows its recorded trajectory.
        fused = True if device == "cuda" else None
        noam, d = o.schedule == "noam", self.arch.d_model
        optimizer = opt_cls(self.parameters(), lr=1.0 if noam else o.lr, fused=fused, **kw)

        def factor(s: int) -> float:  # LambdaLR counts from 0 at the first update, Noam from 1
            return noam_lr(s + 1, d, o.warmup_steps, o.lr_scale) if noam else 1.0

        sched = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": sched, "interval": "step", "name": "train/lr"},
        }

    def _tensor_lr(self) -> bool:
        return self.optim_cfg.schedule == "noam" and self.optim_cfg.warmup_unit != "steps"

    def _set_tensor_lr(self) -> None:
        if self._tensor_lr():
            o = self.optim_cfg
            # Progress including this batch, as the step schedule's s + 1.
            seen = self.train_state.seen(o.warmup_unit)
            lr = noam_lr(seen, self.arch.d_model, o.warmup_steps, o.lr_scale)
            for group in self.trainer.optimizers[0].param_groups:
                group["lr"].copy_(lr)

    def configure_gradient_clipping(
        self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        """Lightning's clipping, keeping the total gradient norm for the non-finite guard."""
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            norm = torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
        else:
            if gradient_clip_val:
                self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if getattr(self.trainer.precision_plugin, "scaler", None) is not None:
            norm = norm.new_zeros(())  # fp16's GradScaler skips overflowing steps itself
        if self._step_terms is not None:
            self.train_state.record(*self._step_terms, norm)

    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or getattr(dm, "tokenizer", None) is None:
            return
        if dm.tokenizer.vocab_size > self.arch.vocab_size:
            raise VatError(
                f"model.arch.vocab_size={self.arch.vocab_size} is smaller than the tokenizer's "
                f"{dm.tokenizer.vocab_size} tokens"
            )
        self.tokenizer = dm.tokenizer
        self.length_histogram = list(dm.length_histogram)
        self.token_counts = list(getattr(dm, "token_counts", []) or [])
        self.fit_sample = getattr(dm, "fit_sample", None)
        if self.sentence_cfg.bow_weight and self.token_counts:  # a / (a + p(w)), a = 1e-3
            counts = torch.zeros(self.arch.vocab_size, dtype=torch.float64)
            counts[: len(self.token_counts)] = torch.tensor(self.token_counts, dtype=torch.float64)
            weights = 1e-3 / (1e-3 + counts / counts.sum().clamp_min(1))
            self.bow_weights.copy_(weights.to(self.bow_weights.dtype))
        if stage == "fit":
            # trainer.log_dir is a collective call under DDP: every rank must ask for it.
            self._save_tokenizer(self.trainer.log_dir)

    @rank_zero_only
    def _save_tokenizer(self, log_dir: str | None) -> None:
        if log_dir and self.tokenizer is not None:
            # atomically (temp file + rename): never written through a symlink
            text = self.tokenizer.tokenizer.to_str(pretty=True)
            atomic_write(Path(log_dir) / "tokenizer.json", lambda f: f.write(text))

    def on_validation_epoch_start(self) -> None:
        # a fixed noise stream: comparable numbers, and training's RNG left alone
        self._val_generator = torch.Generator(device=self.device)
        self._val_generator.manual_seed(1234 + self.global_rank)

    on_test_epoch_start = on_validation_epoch_start

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        if self._rng_to_restore is not None:
            # here, not in on_load_checkpoint: Lightning may run code between the two
            torch.set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self._log_step:
            stop_if_non_finite(self.train_state, self.trainer)

    def on_train_end(self) -> None:
        if self._compiled is not None:
            rank_zero_info(f"vat: {self._compiled.summary()}")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.tokenizer is None:
            raise VatError(
                "cannot save a vat checkpoint before the tokenizer is set (run through `vat train`)"
            )
        if self._trainer is not None and self.trainer.training:
            stop_if_non_finite(self.train_state, self.trainer)
        check_finite_weights(checkpoint["state_dict"], self.global_step, self.trainer)
        checkpoint["vat"] = vat_metadata(
            self.model,
            self.tokenizer,
            float(self.prior_std),
            self.length_histogram,
            self.token_counts,
            self.fit_sample,
        )
        checkpoint["vat"]["training"] = self._training_record()  # the model card's facts
        checkpoint["vat_rng"] = {"torch": torch.get_rng_state()}
        checkpoint["vat_train_state"] = {
            **self.train_state.state(),
            **({"rate": self.rate.state()} if self.rate else {}),
        }

    def _training_record(self) -> dict:
        trainer = self._trainer
        dm = getattr(trainer, "datamodule", None) if trainer is not None else None
        progress = self.train_state.progress.tolist()  # steps, sentences, tokens (a save: sync ok)
        record = training_record(
            global_step=self.global_step,
            epoch=self.current_epoch,
            tokens_seen=progress[2],
            sentences_seen=progress[1],
            data_hparams=getattr(dm, "hparams", None),
            callback_metrics=dict(trainer.callback_metrics) if trainer is not None else {},
        )
        if self.init_record is not None:  # a continued run: the tokens behind the whole model
            record["init_from"] = dict(self.init_record)
            record["tokens_total"] = record["tokens_seen"] + int(
                self.init_record.get("tokens_total") or 0
            )
        return record

    @torch.no_grad()
    def start_from(self, model: VAT, record: dict) -> None:
        """Copy a trained model's weights into this fresh one (vat.train.init_from)."""
        theirs, ours = model.config.to_dict(), self.arch.to_dict()
        theirs.pop("dropout"), ours.pop("dropout")  # a training setting, not the weights'
        if theirs != ours:
            raise VatError(f"the model to start from is not this run's shape: {theirs} != {ours}")
        self.model.load_state_dict(model.state_dict())
        self.init_record = dict(record)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        meta = checkpoint.get("vat")
        if meta is None:
            raise VatError("the checkpoint is not a vat checkpoint (no 'vat' metadata)")
        check_same_model_config(meta["model_config"], self.arch.to_dict())
        if self.tokenizer is not None and meta["tokenizer"] != self.tokenizer.to_str():
            raise VatError(
                "--ckpt_path: the checkpoint's tokenizer differs from this run's data.tokenizer "
                "(different corpus, vocab_size or tokenizer_path)"
            )
        if self.tokenizer is None:
            self.tokenizer = VATTokenizer.from_str(meta["tokenizer"])
            self.length_histogram = list(meta.get("length_histogram", []))
            self.token_counts = list(meta.get("token_counts", []))
            self.fit_sample = meta.get("fit_sample")
        self._rng_to_restore = checkpoint.get("vat_rng", {}).get("torch")
        started = (meta.get("training") or {}).get("init_from")
        if isinstance(started, dict):  # a resumed continued run keeps where it started
            self.init_record = dict(started)
        state = checkpoint.get("vat_train_state")
        if state is not None:  # older checkpoints: counters start at 0
            self.train_state.load_state(state)
            if self.rate is not None and "rate" in state:
                self.rate.load_state(state["rate"])
