"""`python train.py {fit,validate,test} -c configs/<name>.yaml`: LightningCLI over vat.

One run is one directory, `--run_dir` (default runs/vat): TensorBoard events, config.yaml,
tokenizer.json and checkpoints/ (last.ckpt, the best on val/loss, and on_exception.ckpt).
Resume a killed run with the same command plus `--ckpt_path last`.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, OnExceptionCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from vat.checkpoint import atomic_torch_save, read_checkpoint
from vat.data import VATDataModule
from vat.errors import USER_ERRORS, VatError
from vat.module import NonFiniteLossError, VATSystem


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file and renames it into place.

    Lightning's default writer streams into the final path, so a SIGKILL during the write
    leaves a truncated last.ckpt and the run cannot resume. os.replace is atomic on POSIX:
    the old file stays whole until the new one is complete.
    """

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only: bool | None = None) -> dict:
        # vat checkpoints hold tensors and plain Python types only: weights_only=True, so no
        # pickled code runs; a corrupt or foreign file is a one-line CheckpointError.
        return read_checkpoint(path, map_location=map_location or "cpu")


class _OneLineErrorParser(LightningArgumentParser):
    """Config errors (a typo in a YAML key, a bad value) as one line instead of usage text."""

    def error(self, message: str, ex: Exception | None = None):  # noqa: D401
        lines = [ln.strip(" -") for ln in str(message).splitlines() if ln.strip(" -")]
        self.exit(2, f"error: {'; '.join(lines[:3])}\n")


class FinalLastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose last.ckpt always holds the final training step.

    Lightning 2.6 writes last.ckpt at the end of fit only when no last.ckpt was written during
    the run, so a run that stops (max_steps, max_time) between two `every_n_train_steps` saves
    kept a stale last.ckpt: sweep runs that trained 5,000 steps had last.ckpt from step 4,000.
    Resume, evaluation and the sweep all read last.ckpt, so it must be the final state.
    """

    def on_train_end(self, trainer, pl_module) -> None:
        super().on_train_end(trainer, pl_module)
        if self.save_last and not trainer.fast_dev_run and self._last_global_step_saved != trainer.global_step:
            # _save_last_checkpoint is what the parent's own on_train_end calls (Lightning 2.6).
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


class VATCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--run_dir", type=str, default="runs/vat",
                            help="Run directory: TensorBoard logs, config.yaml, tokenizer.json, checkpoints/.")
        parser.add_lightning_class_args(FinalLastCheckpoint, "checkpoint")
        parser.set_defaults({
            "checkpoint.filename": "step{step:07d}",
            "checkpoint.auto_insert_metric_name": False,
            "checkpoint.save_last": True,
            "checkpoint.save_top_k": 0,
            "checkpoint.every_n_train_steps": 1000,
        })
        parser.link_arguments("data.vocab_size", "model.arch.vocab_size")
        parser.link_arguments("data.max_len", "model.arch.max_len")

    def _parse_ckpt_path(self) -> None:
        # LightningCLI torch.loads --ckpt_path itself (to read its hyperparameters); check the
        # file first so that a corrupt or foreign checkpoint is a one-line error.
        sub = self.config.get("subcommand")
        ckpt_path = self.config[sub].get("ckpt_path") if sub else None
        if ckpt_path and Path(ckpt_path).is_file():
            read_checkpoint(ckpt_path)
        super()._parse_ckpt_path()

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        run_dir = cfg.run_dir
        if cfg.trainer.logger in (None, True):
            # A fixed log dir (no version_N) so `--ckpt_path last` finds the run's checkpoints
            # and resumed curves continue in the same TensorBoard run.
            cfg.trainer.logger = {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                                  "init_args": {"save_dir": run_dir, "name": "", "version": ""}}
        if cfg.checkpoint.dirpath is None:
            cfg.checkpoint.dirpath = str(Path(run_dir) / "checkpoints")
        # Keep what a crash interrupted (Lightning saves it when an exception escapes fit).
        self.trainer_defaults["callbacks"].append(_OnExceptionCheckpoint(dirpath=cfg.checkpoint.dirpath, filename="on_exception"))
        if self.subcommand == "fit":
            _check_writable(run_dir)
            _check_devices(cfg.trainer.accelerator, cfg.trainer.devices)


class _OnExceptionCheckpoint(OnExceptionCheckpoint):
    """OnExceptionCheckpoint, but only once training has begun: an error while reading data
    or building the model has nothing to save, and must surface as itself."""

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, NonFiniteLossError):
            return  # the weights may be non-finite: keep the last good checkpoint as the latest
        if trainer.global_step > 0 and getattr(pl_module, "tokenizer", None) is not None:
            super().on_exception(trainer, pl_module, exception)


def _check_writable(run_dir: str) -> None:
    p = Path(run_dir)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise VatError(f"--run_dir {run_dir} is not writable ({e.strerror})") from None


def _check_devices(accelerator, devices) -> None:
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if not isinstance(devices, int) or devices <= 0:
        return
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        have = torch.cuda.device_count()
        if devices > have:
            raise VatError(f"--trainer.devices {devices} asks for more GPUs than exist ({have} found)")


def _best_checkpoint() -> ModelCheckpoint:
    return ModelCheckpoint(monitor="val/loss", mode="min", save_top_k=1, filename="best-step{step:07d}",
                           auto_insert_metric_name=False, save_last=False)


def trainer_defaults() -> dict:
    return {
        "callbacks": [_best_checkpoint(), LearningRateMonitor(logging_interval="step")],
        "plugins": [AtomicCheckpointIO()],
        "gradient_clip_val": 1.0,
        # BucketBatchSampler shards batches across ranks itself.
        "use_distributed_sampler": False,
        "log_every_n_steps": 10,
    }


def _quiet_warnings() -> None:
    # config.yaml cannot record the AtomicCheckpointIO instance from trainer_defaults; it is
    # not a user setting, so jsonargparse's warning about it is noise. The sweep calls main()
    # with explicit args while its own sys.argv holds the sweep's options: intended here.
    warnings.filterwarnings("ignore", message=r"\s*Unable to serialize instance <vat\.cli\.AtomicCheckpointIO")
    warnings.filterwarnings("ignore", message=r"LightningCLI's args parameter is intended to run from within Python")


def main(args: list[str] | None = None) -> int:
    """Entry point; `args` defaults to sys.argv[1:]. `--debug` shows tracebacks of user errors."""
    _quiet_warnings()
    debug = "--debug" in (sys.argv if args is None else args) or os.environ.get("VAT_DEBUG") == "1"
    if args is None:
        # LightningCLI reads sys.argv itself, and DDP re-launches this script with sys.argv,
        # so the command line is cleaned in place rather than copied.
        sys.argv[:] = [a for a in sys.argv if a != "--debug"]
    else:
        args = [a for a in args if a != "--debug"]
    return _run(lambda: _build_cli(args), debug)


def _build_cli(args: list[str] | None, **kwargs) -> VATCLI:
    return VATCLI(VATSystem, VATDataModule, args=args, trainer_defaults=trainer_defaults(), parser_class=_OneLineErrorParser,
                  save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False,
                  subclass_mode_model=False, subclass_mode_data=False, **kwargs)


def _run(fn, debug: bool) -> int:
    """Run fn; a user error becomes one line on stderr and exit code 2 (a traceback with --debug)."""
    try:
        fn()
    except (*USER_ERRORS, NonFiniteLossError, MisconfigurationException) as e:
        if debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2
    return 0


def prepare_data(args: list[str]) -> int:
    """Build the tokenizer and tokenized-data cache of a train config without training.

    `args` are train.py's arguments without the subcommand (e.g. ["-c", "configs/x.yaml"]).
    Used before starting several trainings on the same data at once (the parallel sweep),
    so that they read one cache instead of each building its own.
    """
    _quiet_warnings()
    debug = "--debug" in args or os.environ.get("VAT_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    return _run(lambda: _build_cli(args, run=False).datamodule.prepare_data(), debug)

