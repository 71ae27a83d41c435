"""`vat train -c configs/<name>.yaml` (= `vat train fit ...`): LightningCLI over vat.

One run is one directory, `--run_dir` (default runs/vat): TensorBoard events, config.yaml,
tokenizer.json and checkpoints/ (last.ckpt, the best on `--best_monitor`, and
on_exception.ckpt). Resume a killed run with the same command plus `--ckpt_path last`; the
rules for run directories (no silent resume, --overwrite, the lock, what a resume may
change) live in vat/runs/run_dir.py.
"""

from __future__ import annotations

import copy
import errno
import logging
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Literal

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.strategies.launchers import _MultiProcessingLauncher

from vat.callbacks.collapse_alarm import CollapseAlarm
from vat.callbacks.model_summary import ModelSummary
from vat.callbacks.progress import StepProgressBar
from vat.callbacks.summary import TrainingSummary
from vat.callbacks.time_split import TimeSplit
from vat.cli.config_paths import check_input_paths, checkout_root
from vat.cli.whole_numbers import read_whole_numbers_as_int
from vat.data.datamodule import VATDataModule
from vat.errors import VatError, nearest, run_cli
from vat.runs import run_dir as rd
from vat.runs import settings
from vat.runtime import apply_cpu_threads, thread_count
from vat.tokenizer import VATTokenizer
from vat.train import init_from
from vat.train.checkpointing import (
    BEST_MONITORS,
    AtomicCheckpointIO,
    ExceptionCheckpoint,
    FinalLastCheckpoint,
    best_checkpoint,
    check_monitor,
    reset_state,
    was_interrupted,
)
from vat.train.compile_cache import CompileCache
from vat.train.interrupt import EXIT_CODES, StopOnSignal
from vat.train.non_finite import NonFiniteLossError
from vat.train.system import VATSystem


class _OneLineErrorParser(LightningArgumentParser):
    """Config errors (a typo in a YAML key, a bad value) as one line instead of usage text.
    No prefix matching: `--trainer.max_step` is an error, not `--trainer.max_steps`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None):  # noqa: D401
        lines = [ln.strip(" -") for ln in str(message).splitlines() if ln.strip(" -")]
        self.exit(2, f"error: {'; '.join(lines[:3])}{self._did_you_mean(str(message))}\n")

    def _did_you_mean(self, message: str) -> str:
        """` (did you mean --trainer.max_steps?)` for the first unknown option or config key
        of jsonargparse's message that is near a real one."""
        flag = "unrecognized arguments:" in message  # else a config file's key
        unknown = (
            re.findall(r"(?:^|\s)--([\w.]+)", message.split("unrecognized arguments:")[-1])
            if flag
            else re.findall(r"does not accept option '([\w.]+)'", message)
        )
        near = nearest(unknown[0], sorted(_option_names(self))) if unknown else None
        return f" (did you mean {'--' if flag else ''}{near}?)" if near else ""


def _option_names(parser) -> set[str]:
    """Every option of `parser` and of its subcommands' parsers, without the leading --."""
    names: set[str] = set()
    for action in parser._actions:
        names.update(o.lstrip("-") for o in action.option_strings if o.startswith("--"))
        for sub in (getattr(action, "choices", None) or {}).values():
            if hasattr(sub, "_actions"):
                names |= _option_names(sub)
    return names


class VATCLI(LightningCLI):
    def __init__(self, *args, run_now: bool = True, **kwargs) -> None:
        # run_now=False: parsed, checked and built, but not run: the recipe train.py runs the
        # fit itself, in the open (`fit_recipe_cli`)
        self._run_now = run_now
        # taken from the command line alone, never from a config file (a run folder's own
        # config.yaml could say it): it lets the run folder's compile cache run as code
        kwargs["args"], self._trust_compile_cache = _trust_option(kwargs.get("args"))
        super().__init__(*args, **kwargs)

    def _run_subcommand(self, subcommand: str) -> None:
        if self._run_now:
            super()._run_subcommand(subcommand)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        # predict would need a predict_step and data that vat does not define: not offered.
        return {k: v for k, v in LightningCLI.subcommands().items() if k != "predict"}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--run_dir",
            type=str,
            default="runs/vat",
            help="Run directory: TensorBoard logs, config.yaml, tokenizer.json, checkpoints/.",
        )
        parser.add_argument(
            "--overwrite",
            action="store_true",
            help="Replace the run already in --run_dir (its checkpoints, events and configs) "
            "with a fresh one.",
        )
        parser.add_argument(
            "--best_monitor",
            type=Literal[tuple(BEST_MONITORS)],
            default="val/loss",
            help="Metric of the best checkpoint: val/nll (reconstruction), "
            "val/stsb_spearman (similarity; needs the vat.callbacks.sts.STSBSpearman callback), "
            "or val/loss (rises with the KL weight).",
        )
        parser.add_argument(
            "--compile_cache",
            "--compile-cache",
            type=bool,
            default=True,
            help="With model.compile: keep the compiled training step in RUN_DIR/"
            "compile_cache.bin, signed with your own key, and load it at the next launch on "
            "the same torch and device (vat/train/compile_cache.py); false: compile afresh "
            "each launch. The cache is code that torch runs: one you did not save (a copied "
            "run folder) is loaded only with --trust-compile-cache, which vat takes from the "
            "command line alone.",
        )
        parser.add_argument(
            "--init_from",
            "--init-from",
            type=str | None,
            default=None,
            help="Start from a trained model's weights and tokenizer (a shipped name, an "
            "exported folder, a run folder, a .ckpt or a Hub id): its architecture is taken, "
            "the optimiser and schedules start fresh (vat/train/init_from.py).",
        )
        parser.add_argument(
            "--enable_collapse_alarm",
            type=bool,
            default=True,
            help="Warn in one line and in TensorBoard (alarm/collapse) when the rate falls far "
            "below its target, the KL toward 0, or the active units drop sharply "
            "(vat.callbacks.collapse_alarm).",
        )
        parser.add_lightning_class_args(FinalLastCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                # A copied run directory must overwrite last.ckpt, not write last-v1.ckpt beside it.
                "checkpoint.enable_version_counter": False,
                "checkpoint.filename": "step{step:07d}",
                "checkpoint.auto_insert_metric_name": False,
                "checkpoint.save_last": True,
                "checkpoint.save_top_k": 0,
                "checkpoint.every_n_train_steps": 1000,
            }
        )
        parser.link_arguments("data.vocab_size", "model.arch.vocab_size")
        parser.link_arguments("data.max_len", "model.arch.max_len")
        # `--trainer.limit_val_batches 8` is 8 batches, not 8.0, whatever was imported first
        read_whole_numbers_as_int(parser)

    def _checkpoint_io(self) -> AtomicCheckpointIO:
        return next(
            p for p in self.trainer_defaults["plugins"] if isinstance(p, AtomicCheckpointIO)
        )

    def _parse_ckpt_path(self) -> None:
        """LightningCLI's own step (the checkpoint's hyperparameters into the config), with the
        checkpoint read once for the whole command: vat's checks (a corrupt or foreign file is
        one line), the run folder's resume checks and the Trainer's restore all take the one
        read kept by `AtomicCheckpointIO.read`. Lightning 2.6's version of this method
        torch.loads the file itself, which made a resume read it four times."""
        sub = self.config.get("subcommand")
        self._config_filename = (
            f"config-{sub}.yaml" if sub in ("validate", "test") else "config.yaml"
        )
        self._fresh: rd.FreshStart | None = None
        if not sub:
            return
        # settings Lightning would reject only once training started: before any file exists
        settings.check_settings(self.config[sub].trainer, sub)
        _check_devices(self.config[sub].trainer.accelerator, self.config[sub].trainer.devices)
        rd.check_folders(self.config[sub])
        given = [Path(str(c)) for c in (self.config[sub].get("config") or [])]
        check_input_paths(self.config[sub], given, checkout_root())
        read = self._checkpoint_io().read
        self._init: init_from.Source | None = None
        if self.config[sub].get("init_from") is not None:
            if sub != "fit":
                raise VatError(
                    f"--init-from starts a training run (vat train fit), not `vat train {sub}`; "
                    "to measure a model, give it as --ckpt_path"
                )
            self._init = self._continue_from(self.config[sub], read)
        if sub == "fit":
            self._config_filename, self._fresh = rd.prepare_fit(self.config[sub], read)
        ckpt_path = self.config[sub].get("ckpt_path")
        if not (ckpt_path and Path(ckpt_path).is_file()):
            return
        hparams = copy.deepcopy(read(ckpt_path).get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        for key in rd.RESUME_MAY_CHANGE:  # this command's value wins, not the checkpoint's
            section, _, rest = key.partition(".")
            if section == "model":
                _drop(hparams, rest)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        try:
            self.config = self.parser.parse_object({sub: {"model": hparams}}, self.config)
        except SystemExit:
            sys.stderr.write("Parsing of ckpt_path hyperparameters failed!\n")
            raise

    def _continue_from(self, cfg, read) -> init_from.Source:
        """--init-from MODEL: the run's config given the model's shape (vat.train.init_from).
        A resume of the continued run takes it from its own checkpoint instead, and a
        checkpoint of this very run is resumed, not continued."""
        from vat.share.resolve import load_model, resolve_model

        defaults = self._subcommand_parsers["fit"].get_defaults()
        ckpt_dir = Path(cfg.checkpoint.dirpath or Path(cfg.run_dir) / "checkpoints")
        resume = rd.find_last(ckpt_dir) if cfg.ckpt_path == "last" else cfg.ckpt_path
        if resume is not None and Path(resume).is_file():  # a resume: the start it records
            init_from.check_resumed_start(
                str(cfg.init_from), read(Path(resume)), Path(resume), cfg.run_dir, str(ckpt_dir)
            )
        else:
            src = resolve_model(cfg.init_from, name="init_from")
            if rd.is_global_rank_zero():  # (DDP's other ranks: rank 0 holds this run's lock)
                init_from.check_not_training(str(cfg.init_from), src)
            loaded = load_model(src, "cpu")
            resume = init_from.same_run_checkpoint(loaded, cfg.run_dir, str(ckpt_dir))
            if resume is None:
                source = init_from.from_loaded(loaded, str(cfg.init_from))
                init_from.apply_to_config(cfg, defaults, source)
                return source
            cfg.ckpt_path = str(resume)
            if rd.is_global_rank_zero():
                init_from.say(
                    f"vat: --init-from {cfg.init_from} is a checkpoint of this run (--run_dir "
                    f"{cfg.run_dir}): resuming it, with its optimiser, schedules and rate "
                    "controller (as --ckpt_path does)"
                )
        source = init_from.from_checkpoint(read(Path(resume)), Path(resume))
        init_from.apply_to_config(cfg, defaults, source)
        return source

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        run_dir = cfg.run_dir
        if cfg.trainer.logger in (None, True):
            # A fixed log dir (no version_N) so `--ckpt_path last` finds the run's checkpoints
            # and resumed curves continue in the same TensorBoard run.
            cfg.trainer.logger = {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                # no hp_metric = -1 in TensorBoard's hparams tab: vat logs no such metric
                "init_args": {
                    "save_dir": run_dir,
                    "name": "",
                    "version": "",
                    "default_hp_metric": False,
                },
            }
        if cfg.checkpoint.dirpath is None:
            cfg.checkpoint.dirpath = str(Path(run_dir) / "checkpoints")
        # Keep what a crash interrupted (saved when an exception escapes fit).
        self.trainer_defaults["callbacks"].append(ExceptionCheckpoint(cfg.checkpoint.dirpath))
        self._best = best_checkpoint(cfg.best_monitor)
        self.trainer_defaults["callbacks"].append(self._best)
        self.save_config_kwargs["config_filename"] = getattr(
            self, "_config_filename", "config.yaml"
        )
        if cfg.trainer.enable_progress_bar is not False:
            self.trainer_defaults["callbacks"].append(StepProgressBar())  # steps, not "Epoch 0/-2"
        if cfg.trainer.enable_model_summary is not False:  # on stderr, no unmeasured "FLOPs 0"
            self.trainer_defaults["callbacks"].append(ModelSummary())
        if self.subcommand == "fit":
            # where the checkpoints are, the final val NLL / KL / BLEU, the next commands
            self.trainer_defaults["callbacks"].append(TrainingSummary())
            # Ctrl-C / SIGTERM: stop at the end of a step, with last.ckpt saved there
            _STOPS.append(StopOnSignal())
            self.trainer_defaults["callbacks"].append(_STOPS[-1])
            self.trainer_defaults["callbacks"].append(rd.MarkTrained(run_dir))
            # where the fit's seconds went (set-up, compile, steps, validation, saves): the
            # first made in a process counts from the process's start
            self.trainer_defaults["callbacks"].append(TimeSplit(run_dir))
            if cfg.get("enable_collapse_alarm", True):
                self.trainer_defaults["callbacks"].append(CollapseAlarm())
            if getattr(self, "_init", None) is not None and cfg.ckpt_path is None:
                # a continued run's curves start at its model's own numbers on this data
                self.trainer_defaults["callbacks"].append(init_from.ValidateFirst())
            if cfg.model.get("compile") and cfg.get("compile_cache", True):
                # the compiled step read from the run folder, not compiled again
                self.trainer_defaults["callbacks"].append(
                    CompileCache(run_dir, trust=self._trust_compile_cache)
                )
            check_monitor(cfg.best_monitor, cfg.trainer.callbacks)

    def before_fit(self) -> None:
        """The trainer settings checked against the data, then the fresh run begun (the old
        files it replaces moved away, its manifest written): a refused start leaves an
        earlier run whole and writes nothing of its own."""
        cfg = self.config["fit"]
        start = getattr(self, "_init", None)
        if start is not None:  # --init-from: the model's tokenizer, and its weights when fresh
            self.datamodule.use_tokenizer(VATTokenizer.from_str(start.tokenizer))
            if cfg.ckpt_path is not None:
                start = None  # a resume: the checkpoint holds weights, state and record
            else:
                self.model.start_from(start.loaded.model, start.record)
        if rd.is_global_rank_zero() and not isinstance(
            self.trainer.strategy.launcher, _MultiProcessingLauncher
        ):  # (spawned processes would each get a pickled copy of the prepared data)
            size = settings.epoch_size(self.datamodule, self.trainer)
            settings.check_against_data(cfg.trainer, size)
            if size.val == 0 or settings.validation_is_off(cfg.trainer):
                self._no_best_checkpoint(cfg, size.val == 0)
        for cb in self.trainer.checkpoint_callbacks:
            if isinstance(cb, FinalLastCheckpoint):  # RUN/checkpoints, not a link's target
                cb.name_folder_as_given(cfg.checkpoint.dirpath)
        if self._fresh is not None:
            rd.begin_fresh(self._fresh)
        if _THREADS_NOTE and rd.is_global_rank_zero():  # said once the run starts, not before
            print(_THREADS_NOTE.pop(), file=sys.stderr)  # an error (which stays one line)
        if start is not None and rd.is_global_rank_zero():
            init_from.say(init_from.start_line(start))

    def _no_best_checkpoint(self, cfg, no_val_data: bool) -> None:
        """Without validation nothing is logged to --best_monitor: the best checkpoint is
        dropped with a note (not Lightning's warning about a missing key at every save)."""
        why = (
            "the data holds no validation sentences"
            if no_val_data
            else "--trainer.limit_val_batches 0 turns validation off"
        )
        if cfg.best_monitor == "val/stsb_spearman":
            raise VatError(f"--best_monitor val/stsb_spearman needs validation, but {why}")
        self.trainer.callbacks[:] = [c for c in self.trainer.callbacks if c is not self._best]
        print(f"vat: {why}: no best checkpoint on {cfg.best_monitor} is kept", file=sys.stderr)


def _drop(tree: dict, dotted: str) -> None:
    """Remove the key `a.b.c` from nested dicts, if there."""
    *path, last = dotted.split(".")
    for part in path:
        tree = tree.get(part) if isinstance(tree, dict) else None
    if isinstance(tree, dict):
        tree.pop(last, None)


def _check_devices(accelerator, devices) -> None:
    """A GPU asked for where there is none, or more than there are: one line about what was
    asked, before anything is built (Lightning says it 13 s later, blaming --trainer.devices).
    Several processes on the CPU: one line saying what that does."""
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        build = (
            "a CPU-only build"
            if torch.version.cuda is None
            else f"built for CUDA {torch.version.cuda}"
        )
        raise VatError(
            f"--trainer.accelerator {accelerator}: no GPU is visible to torch {torch.__version__} "
            f"({build}); use --trainer.accelerator cpu, or auto to take a GPU when there is one"
        )
    if not isinstance(devices, int) or devices <= 0:
        return
    if gpu:
        have = torch.cuda.device_count()
        if devices > have:
            raise VatError(
                f"--trainer.devices {devices} asks for more GPUs than exist ({have} found)"
            )
    elif devices > 1 and rd.is_global_rank_zero():
        print(
            f"vat: --trainer.devices {devices} on the CPU runs {devices} training processes "
            f"(DDP over gloo) that share this machine's {os.cpu_count()} cores and split "
            f"every batch; on one machine that is rarely faster than one process",
            file=sys.stderr,
        )


def trainer_defaults() -> dict:
    return {
        "callbacks": [LearningRateMonitor(logging_interval="step")],
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
    warnings.filterwarnings(
        "ignore",
        message=r"\s*Unable to serialize instance <vat\.train\.checkpointing\.AtomicCheckpointIO",
    )
    warnings.filterwarnings(
        "ignore", message=r"LightningCLI's args parameter is intended to run from within Python"
    )
    # vat.runs.run_dir lets a fresh run start only in a directory without checkpoints, so this
    # warning only ever fires on a resume, where a full checkpoints/ is expected.
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    # Noise the user cannot act on: Lightning's own _pytree use (torch deprecation) and its
    # advertising tips.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTips) for f in logger.filters):
            logger.addFilter(_NoTips())


class _NoTips(logging.Filter):
    """Drops Lightning's "💡 Tip: ..." messages (litlogger, litmodels), and its note that
    vat's own model summary replaces the default one (vat.callbacks.model_summary)."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return "Tip:" not in msg and "Skipping setting a default `ModelSummary`" not in msg


def main(args: list[str] | None = None) -> int:
    """Entry point; `args` defaults to sys.argv[1:]. `--debug` shows tracebacks of user errors.

    DDP re-launches the script with its original sys.argv, so each rank re-enters here.
    """
    _quiet_warnings()
    return _run(lambda a: _build_cli(a), args)


def _build_cli(args: list[str] | None, **kwargs) -> VATCLI:
    return VATCLI(
        VATSystem,
        VATDataModule,
        args=args,
        trainer_defaults=trainer_defaults(),
        parser_class=_OneLineErrorParser,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        subclass_mode_model=False,
        subclass_mode_data=False,
        **kwargs,
    )


TRAIN_ERRORS = (NonFiniteLossError, MisconfigurationException)
"""Beyond vat.errors.USER_ERRORS, what ends a training command in one line."""
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


_STOPS: list[StopOnSignal] = []
"""The Ctrl-C / SIGTERM callback of the fit in progress (vat.train.interrupt)."""


def _run(fn, args: list[str] | None) -> int:
    """Run fn(args) through the one error wrapper (vat.errors.run_cli). A full disk is one
    line too. The first Ctrl-C or SIGTERM during training stops it at the end of a step, saves
    last.ckpt and exits with 130 or 143 (vat.train.interrupt says so in one line); one before
    training or a second one is "error: interrupted", exit 130. The run directory's lock is
    released on return."""

    def call(argv: list[str]) -> int:
        reset_state()
        _STOPS.clear()
        ok = False
        try:
            fn(argv)
            ok = True
            stopped = _STOPS[-1].stopped if _STOPS else None
            if stopped is not None:  # a signal after the last step: the run ended whole
                return EXIT_CODES[stopped]
        except SystemExit:
            if not was_interrupted():  # Lightning turns Ctrl-C during fit into SystemExit(1)
                raise
            stopped = _STOPS[-1].stopped if _STOPS else None
            if stopped is not None:  # stopped at a whole step, last.ckpt saved: said already
                ok = True
                return EXIT_CODES[stopped]
            raise KeyboardInterrupt from None
        except OSError as e:
            if isinstance(e, VatError) or e.errno not in _DISK_FULL:
                raise
            raise VatError(f"cannot write {e.filename or 'a file'}: {e.strerror}") from e
        except Exception as e:  # outside failures with a known way out (vat.runs.outside_failures)
            from vat.runs.outside_failures import outside_failure

            ours = _vat_error_inside(e)
            if ours is not None:  # jsonargparse wraps a callback's own error in a ValueError
                raise ours from e
            one_line = outside_failure(e)
            if one_line is None:
                raise
            raise one_line from e
        finally:
            rd.release_locks(failed=not ok)  # a start refused before it began leaves no folder
        return 0

    return run_cli(call, args, extra_errors=TRAIN_ERRORS)


def _vat_error_inside(e: BaseException) -> VatError | None:
    """The VatError a library wrapped on its way out (jsonargparse turns an error raised while
    it instantiates a callback from the config into "Does not validate against any of the
    Union subtypes" with the VatError as its cause), or None."""
    seen: set[int] = set()
    cause: BaseException | None = e.__cause__ or e.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, VatError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def prepare_data(args: list[str]) -> int:
    """Build the tokenizer and tokenized-data cache of a train config without training.

    `args` are `vat train`'s arguments without the subcommand (e.g. ["-c", "configs/x.yaml"]).
    Used before starting several trainings on the same data at once (the parallel sweep),
    so that they read one cache instead of each building its own.
    """
    _quiet_warnings()
    return _run(lambda a: _build_cli(a, run=False).datamodule.prepare_data(), args)


def check_args(args: list[str]) -> int:
    """Build the config, model, data module and trainer of a train config (their constructors
    check every value's range) without reading data or training: nothing is written.
    `args` as for `prepare_data`; `vat sweep` checks every point this way before any trains."""
    _quiet_warnings()
    return _run(lambda a: _build_cli(a, run=False), args)


def _raise(e: BaseException) -> None:
    raise e


def _threads_option(args: list[str]) -> tuple[list[str], int | None]:
    """`--threads N` / `--threads=N` taken out of the arguments (vat's option, not
    LightningCLI's): (the other arguments, N or None)."""
    rest, value, i = [], None, 0
    while i < len(args):
        a = args[i]
        if a == "--threads" or a.startswith("--threads="):
            if a == "--threads":
                if i + 1 >= len(args):
                    raise VatError("--threads needs a value, a whole number >= 1")
                text, i = args[i + 1], i + 2
            else:
                text, i = a.split("=", 1)[1], i + 1
            value = thread_count(text, "--threads")
            continue
        rest.append(a)
        i += 1
    return rest, value


TRUST_COMPILE_CACHE = ("--trust-compile-cache", "--trust_compile_cache")


def _trust_option(args: list[str] | None) -> tuple[list[str] | None, bool]:
    """`--trust-compile-cache` taken out of the arguments: (the other arguments, given)."""
    if args is None:
        return None, False
    return [a for a in args if a not in TRUST_COMPILE_CACHE], any(
        a in TRUST_COMPILE_CACHE for a in args
    )


_THREADS_NOTE: list[str] = []
"""The thread line `before_fit` prints once training starts (empty: nothing to say)."""


def _use_threads(requested: int | None, quiet: bool) -> None:
    """The CPU thread rule (vat.runtime.cpu_threads) applied at once (before torch works),
    and its line kept for the start of training."""
    n, why = apply_cpu_threads(requested)
    _THREADS_NOTE.clear()
    if n is None or quiet:
        return
    change = "" if why == "--threads" else "; --threads N to change"
    _THREADS_NOTE.append(f"vat: training on {n} CPU thread{'s' if n != 1 else ''} ({why}{change})")


def _underscored(arg: str) -> str:
    """`--init-from` (vat's spelling, as every other command's options) is LightningCLI's
    `--init_from`, whose options are spelled with underscores (--run_dir, --ckpt_path)."""
    if arg == "--init-from" or arg.startswith("--init-from="):
        return "--init_from" + arg[len("--init-from") :]
    return arg


def vat_train(argv: list[str]) -> int:
    """`vat train ARGS` = `vat train fit ARGS` (`vat train validate|test ...` also work).

    `-c NAME` may name a packaged config (`vat config`); `--threads N` sets the CPU threads
    (default: vat.runtime.cpu_threads's rule); `--no-progress` and `--quiet` are the
    options every vat command shares: no progress bars (training's, and the data module's
    while it tokenizes) and, quiet, no model summary either.
    """
    return run_training(_build_cli, argv)


def fit_recipe_cli(args: list[str]) -> VATCLI:
    """`vat train fit ARGS` parsed, checked and built (data module, system, trainer with vat's
    callbacks), not run: the recipe train.py shows and runs the fit (`VATCLI.before_fit`,
    then `trainer.fit`)."""
    cli = _build_cli(args, run_now=False)
    if cli.subcommand != "fit":
        raise VatError(
            f"train.py trains (fit); for `{cli.subcommand}` run `vat train {cli.subcommand}`"
        )
    return cli


def run_training(fn, argv: list[str]) -> int:
    """fn(args) for `vat train ARGV` and train.py: packaged config names, --threads, --quiet
    and --no-progress turned into LightningCLI's arguments (with `fit` when no subcommand is
    named), then vat's one error wrapper, Ctrl-C handling and exit codes (`_run`)."""
    from vat.cli.config import resolve_config_args

    def prepared(argv: list[str]) -> list[str]:
        args, threads = _threads_option(resolve_config_args(argv))
        if not ("--help" in args or "-h" in args):
            _use_threads(threads, quiet="--quiet" in args)
        return args

    failed: list[VatError] = []  # a -c that is a FIFO, a device, a folder or a symlink loop
    try:
        args = prepared(argv)
    except VatError as e:
        failed.append(e)
    if failed:
        return run_cli(lambda _: _raise(failed[0]), argv)
    extra = []
    if "--no-progress" in args or "--quiet" in args:
        extra += ["--trainer.enable_progress_bar=false", "--data.progress=false"]
    if "--quiet" in args:
        extra.append("--trainer.enable_model_summary=false")
    args = [a for a in args if a not in ("--no-progress", "--quiet")]
    args = [_underscored(a) for a in args]
    if not args or args[0] not in VATCLI.subcommands():
        args = ["fit", *args]
    _quiet_warnings()
    return _run(fn, [*args, *extra])
