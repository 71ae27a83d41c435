"""`vat train -c configs/<name>.yaml` (= `vat train fit ...`): LightningCLI over vat, one run
per `--run_dir` (its rules: vat/runs/run_dir.py)."""

from __future__ import annotations

import copy
import errno
import logging
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.strategies.launchers import _MultiProcessingLauncher
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from vat.callbacks.collapse_alarm import CollapseAlarm
from vat.callbacks.model_summary import ModelSummary
from vat.callbacks.progress import StepProgressBar
from vat.callbacks.summary import TrainingSummary
from vat.callbacks.time_split import TimeSplit
from vat.cli import trainer_settings as settings
from vat.cli.common import option_strings
from vat.cli.config_paths import check_input_paths, checkout_root
from vat.cli.whole_numbers import read_whole_numbers_as_int
from vat.data.datamodule import VATDataModule
from vat.errors import VatError, nearest, run_cli
from vat.runs import run_dir as rd
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

    def error(self, message: str, ex: Exception | None = None):
        lines = [ln.strip(" -") for ln in str(message).splitlines() if ln.strip(" -")]
        self.exit(2, f"error: {'; '.join(lines[:3])}{self._did_you_mean(str(message))}\n")

    def _did_you_mean(self, message: str) -> str:
        """` (did you mean --trainer.max_steps?)` for the first unknown option or config key."""
        flag = "unrecognized arguments:" in message  # else a config file's key
        unknown = (
            re.findall(r"(?:^|\s)--([\w.]+)", message.split("unrecognized arguments:")[-1])
            if flag
            else re.findall(r"does not accept option '([\w.]+)'", message)
        )
        names = sorted(o[2:] for o in option_strings(self))
        near = nearest(unknown[0], names) if unknown else None
        return f" (did you mean {'--' if flag else ''}{near}?)" if near else ""


class VATCLI(LightningCLI):
    """LightningCLI as vat's option parser only: it reads the configs and the command line
    and builds nothing; train.py shows the steps that follow."""

    def __init__(self, *args, **kwargs) -> None:
        # from the command line alone, never a config file: it lets a cache run as code
        kwargs["args"], self.trust_compile_cache = _trust_option(kwargs.get("args"))
        super().__init__(*args, **kwargs)

    def _skip(self, *args) -> None:
        pass

    # Left to vat's steps, so that a damaged --ckpt_path is one line, no seed is logged before
    # a refusal and nothing is built before the run folder is checked.
    _parse_ckpt_path = _set_seed = instantiate_classes = _run_subcommand = _skip

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
            help="With model.compile: keep the compiled step in RUN_DIR/compile_cache.bin, "
            "signed with your key, for the next launch on the same torch and device; false: "
            "compile afresh. A cache you did not save runs only with --trust-compile-cache.",
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


@dataclass
class Start:
    """What `check_run_folder` decided, for `build` and `begin` (fresh None: nothing to start)."""

    config_file: str = "config.yaml"
    fresh: rd.FreshStart | None = None
    init: init_from.Source | None = None
    threads_note: str | None = None


def parse(args: list[str], stages: tuple[str, ...] = ("fit",)) -> tuple[VATCLI, str | None]:
    """`vat train STAGE ARGS` parsed, nothing built, after vat's own `--threads N` (applied at
    once), `--no-progress` and `--quiet`; returns the CLI and the thread line to say later."""
    args, threads = _threads_option(args)
    quiet, note = "--quiet" in args, None
    if quiet or "--no-progress" in args:
        args = [a for a in args if a not in ("--no-progress", "--quiet")]
        args += ["--trainer.enable_progress_bar=false", "--data.progress=false"]
        args += ["--trainer.enable_model_summary=false"] * quiet
    if not ("--help" in args or "-h" in args):
        n, why = apply_cpu_threads(threads)
        if n is not None and not quiet:
            change = "" if why == "--threads" else "; --threads N to change"
            note = f"vat: training on {n} CPU thread{'s' * (n != 1)} ({why}{change})"
    cli = _build_cli(args)
    if cli.subcommand not in stages:
        raise VatError(
            f"this command trains (fit); for {cli.subcommand} run `vat train {cli.subcommand}`"
        )
    return cli, note


def _cfg(cli: VATCLI):
    return cli.config[cli.subcommand] if cli.subcommand else cli.config


def check_run_folder(cli: VATCLI, threads_note: str | None = None) -> Start:
    """Settings, devices and folders checked before any file exists; for fit, the run folder
    locked and judged (vat.runs.run_dir); --init-from resolved; the checkpoint's hparams taken."""
    sub, cfg = cli.subcommand, _cfg(cli)
    config_file = f"config-{sub}.yaml" if sub in ("validate", "test") else "config.yaml"
    start = Start(config_file, threads_note=threads_note)
    settings.check_settings(cfg.trainer, sub)
    settings.check_devices(cfg.trainer.accelerator, cfg.trainer.devices)
    rd.check_folders(cfg)
    given = [Path(str(c)) for c in (cfg.get("config") or [])]
    check_input_paths(cfg, given, checkout_root())
    read = cli.trainer_defaults["plugins"][0].read  # the AtomicCheckpointIO of trainer_defaults
    if cfg.get("init_from") is not None:
        if sub != "fit":
            raise VatError(
                f"--init-from starts a training run (vat train fit), not `vat train {sub}`; "
                "to measure a model, give it as --ckpt_path"
            )
        start.init = _continue_from(cli, cfg, read)
    if sub == "fit":
        start.config_file, start.fresh = rd.prepare_fit(cfg, read)
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path and Path(ckpt_path).is_file():
        _take_checkpoint_hparams(cli, read(ckpt_path))
    return start


def _take_checkpoint_hparams(cli: VATCLI, ckpt: dict) -> None:
    """The checkpoint's model hparams into the config (LightningCLI's step), but for those a
    resume may change (rd.RESUME_MAY_CHANGE), where this command's win."""
    hparams = copy.deepcopy(ckpt.get("hyper_parameters") or {})
    hparams.pop("_instantiator", None)
    for key in rd.RESUME_MAY_CHANGE:
        section, *path, last = key.split(".")
        tree = hparams if section == "model" else {}
        for part in path:
            tree = tree.get(part) if isinstance(tree, dict) else None
        if isinstance(tree, dict):
            tree.pop(last, None)
    if not hparams:
        return
    if "_class_path" in hparams:
        hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
    try:
        cli.config = cli.parser.parse_object({cli.subcommand: {"model": hparams}}, cli.config)
    except SystemExit:
        sys.stderr.write("Parsing of ckpt_path hyperparameters failed!\n")
        raise


def _continue_from(cli: VATCLI, cfg, read) -> init_from.Source:
    """--init-from MODEL: the run's config given the model's shape (vat.train.init_from); a
    resume takes it from its own checkpoint, and a checkpoint of this run is resumed."""
    from vat.share.resolve import load_model, resolve_model

    defaults = cli._subcommand_parsers["fit"].get_defaults()
    ckpt_dir = Path(cfg.checkpoint.dirpath or Path(cfg.run_dir) / "checkpoints")
    resume = rd.find_last(ckpt_dir) if cfg.ckpt_path == "last" else cfg.ckpt_path
    if resume is not None and Path(resume).is_file():  # a resume: the start it records
        init_from.check_resumed_start(
            str(cfg.init_from), read(Path(resume)), Path(resume), cfg.run_dir, str(ckpt_dir)
        )
    else:
        src = resolve_model(cfg.init_from, name="init_from")
        if rank_zero_only.rank == 0:  # (DDP's other ranks: rank 0 holds this run's lock)
            init_from.check_not_training(str(cfg.init_from), src)
        loaded = load_model(src, "cpu")
        resume = init_from.same_run_checkpoint(loaded, cfg.run_dir, str(ckpt_dir))
        if resume is None:
            source = init_from.from_loaded(loaded, str(cfg.init_from))
            init_from.apply_to_config(cfg, defaults, source)
            return source
        cfg.ckpt_path = str(resume)
        if rank_zero_only.rank == 0:
            init_from.say(
                f"vat: --init-from {cfg.init_from} is a checkpoint of this run (--run_dir "
                f"{cfg.run_dir}): resuming it, with its optimiser, schedules and rate "
                "controller (as --ckpt_path does)"
            )
    source = init_from.from_checkpoint(read(Path(resume)), Path(resume))
    init_from.apply_to_config(cfg, defaults, source)
    return source


def build(cli: VATCLI, start: Start | None = None) -> tuple[VATDataModule, VATSystem, Trainer]:
    """The data module, system and trainer, with vat's callbacks and logger (a fixed folder: a
    resume continues the same TensorBoard run)."""
    start = start or Start()
    cfg, callbacks = _cfg(cli), cli.trainer_defaults["callbacks"]
    run_dir = cfg.run_dir
    if cfg.trainer.logger in (None, True):
        # no hp_metric = -1 in TensorBoard's hparams tab: vat logs no such metric
        init = {"save_dir": run_dir, "name": "", "version": "", "default_hp_metric": False}
        logger = "lightning.pytorch.loggers.TensorBoardLogger"
        cfg.trainer.logger = {"class_path": logger, "init_args": init}
    if cfg.checkpoint.dirpath is None:
        cfg.checkpoint.dirpath = str(Path(run_dir) / "checkpoints")
    callbacks.append(ExceptionCheckpoint(cfg.checkpoint.dirpath))  # what a crash interrupted
    cli.best = best_checkpoint(cfg.best_monitor)
    callbacks.append(cli.best)
    cli.save_config_kwargs["config_filename"] = start.config_file
    if cfg.trainer.enable_progress_bar is not False:
        callbacks.append(StepProgressBar())  # steps, not "Epoch 0/-2"
    if cfg.trainer.enable_model_summary is not False:  # on stderr, no unmeasured "FLOPs 0"
        callbacks.append(ModelSummary())
    if cli.subcommand == "fit":
        # the checkpoints, final numbers and next commands; Ctrl-C / SIGTERM stops at a whole
        # step, saved; the record's "trained"; where the fit's seconds went
        callbacks += [
            TrainingSummary(),
            StopOnSignal(),
            rd.MarkTrained(run_dir),
            TimeSplit(run_dir),
        ]
        if cfg.get("enable_collapse_alarm", True):
            callbacks.append(CollapseAlarm())
        if start.init is not None and cfg.ckpt_path is None:
            # a continued run's curves start at its model's own numbers on this data
            callbacks.append(init_from.ValidateFirst())
        if cfg.model.get("compile") and cfg.get("compile_cache", True):
            # the compiled step read from the run folder, not compiled again
            callbacks.append(CompileCache(run_dir, trust=cli.trust_compile_cache))
        check_monitor(cfg.best_monitor, cfg.trainer.callbacks)
    LightningCLI._set_seed(cli)
    LightningCLI.instantiate_classes(cli)
    return cli.datamodule, cli.model, cli.trainer


def begin(cli: VATCLI, start: Start) -> None:
    """--init-from's tokenizer (and weights) taken, the settings checked against the data, and a
    fresh run's record written: a start refused before here writes nothing."""
    cfg, data, trainer = cli.config.fit, cli.datamodule, cli.trainer
    init = start.init
    if init is not None:
        data.use_tokenizer(VATTokenizer.from_str(init.tokenizer))
        if cfg.ckpt_path is not None:
            init = None  # a resume: the checkpoint holds weights, state and record
        else:
            cli.model.start_from(init.loaded.model, init.record)
    if rank_zero_only.rank == 0 and not isinstance(
        trainer.strategy.launcher, _MultiProcessingLauncher
    ):  # (spawned processes would each get a pickled copy of the prepared data)
        size = settings.epoch_size(data, trainer)
        settings.check_against_data(cfg.trainer, size)
        if size.val == 0 or settings.validation_is_off(cfg.trainer):
            _no_best_checkpoint(cli, cfg, size.val == 0)
    for cb in trainer.checkpoint_callbacks:
        if isinstance(cb, FinalLastCheckpoint):  # RUN/checkpoints, not a link's target
            cb.name_folder_as_given(cfg.checkpoint.dirpath)
    if start.fresh is not None:
        rd.begin_fresh(start.fresh)
    if start.threads_note and rank_zero_only.rank == 0:
        print(start.threads_note, file=sys.stderr)  # said once the run starts, not before an error
    if init is not None and rank_zero_only.rank == 0:
        init_from.say(init_from.start_line(init))


def _no_best_checkpoint(cli: VATCLI, cfg, no_val_data: bool) -> None:
    """Without validation the best checkpoint is dropped with a note, not a warning per save."""
    why = "--trainer.limit_val_batches 0 turns validation off"
    why = "the data holds no validation sentences" if no_val_data else why
    if cfg.best_monitor == "val/stsb_spearman":
        raise VatError(f"--best_monitor val/stsb_spearman needs validation, but {why}")
    cli.trainer.callbacks[:] = [c for c in cli.trainer.callbacks if c is not cli.best]
    print(f"vat: {why}: no best checkpoint on {cfg.best_monitor} is kept", file=sys.stderr)


def fit(trainer: Trainer, system: VATSystem, data: VATDataModule, ckpt_path: str | None) -> int:
    """trainer.fit; the exit code is 130 / 143 after Ctrl-C / SIGTERM (vat.train.interrupt)."""
    stop = next(c for c in trainer.callbacks if isinstance(c, StopOnSignal))
    try:
        trainer.fit(system, datamodule=data, ckpt_path=ckpt_path)
    except SystemExit:  # a stop at a whole step ends Lightning's fit with SIGTERMException
        if stop.stopped is None:
            raise
    return EXIT_CODES[stop.stopped] if stop.stopped else 0


def train(args: list[str]) -> int:
    """`vat train fit ARGS`: the steps of train.py."""
    cli, threads_note = parse(args)
    start = check_run_folder(cli, threads_note)
    data, system, trainer = build(cli, start)
    begin(cli, start)
    return fit(trainer, system, data, cli.config.fit.ckpt_path)


def run_stage(args: list[str]) -> int:
    """`vat train fit|validate|test ARGS`: fit is `train`; validate and test measure a model."""
    if not args or args[0] == "fit":
        return train(args)
    cli, _ = parse(args, stages=("validate", "test"))
    start = check_run_folder(cli)
    data, system, trainer = build(cli, start)
    cfg = cli.config[cli.subcommand]
    getattr(trainer, cli.subcommand)(
        system,
        datamodule=data,
        ckpt_path=cfg.ckpt_path,
        verbose=cfg.verbose,
        weights_only=cfg.get("weights_only"),
    )
    return 0


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
    # Noise the user cannot act on: the AtomicCheckpointIO that config.yaml cannot record, the
    # args a sweep passes, a full checkpoints/ on a resume (a fresh run needs an empty one),
    # Lightning's own _pytree use and its advertising tips.
    warnings.filterwarnings(
        "ignore",
        message=r"\s*Unable to serialize instance <vat\.train\.checkpointing\.AtomicCheckpointIO",
    )
    warnings.filterwarnings(
        "ignore", message=r"LightningCLI's args parameter is intended to run from within Python"
    )
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTips) for f in logger.filters):
            logger.addFilter(_NoTips())


class _NoTips(logging.Filter):
    """Drops Lightning's "💡 Tip: ..." lines and its note that vat's summary replaces its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return "Tip:" not in msg and "Skipping setting a default `ModelSummary`" not in msg


def main(args: list[str] | None = None) -> int:
    """Entry point (`args` default sys.argv[1:]); DDP re-launches each rank into it."""
    return _run(run_stage, args)


def _build_cli(args: list[str] | None, **kwargs) -> VATCLI:
    """The options parsed (`run=False`: without a subcommand, as the sweep's checks)."""
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


TRAIN_ERRORS = (NonFiniteLossError, MisconfigurationException)  # one line, as USER_ERRORS
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _run(fn, args: list[str] | None) -> int:
    """fn(args) through vat.errors.run_cli, a full disk and known outside failures one line too;
    a Ctrl-C that Lightning turned into SystemExit is "error: interrupted", and the run folder's
    lock is released on return."""

    def call(argv: list[str]) -> int:
        reset_state()
        ok = False
        try:
            code = fn(argv)
            ok = True
            return code if isinstance(code, int) else 0
        except SystemExit:
            if not was_interrupted():  # Lightning turns Ctrl-C during fit into SystemExit(1)
                raise
            raise KeyboardInterrupt from None
        except OSError as e:
            if e.errno not in _DISK_FULL:
                raise
            raise VatError(f"cannot write {e.filename or 'a file'}: {e.strerror}") from e
        except Exception as e:
            from vat.cli.outside_failures import causes, outside_failure

            # jsonargparse wraps a callback's own VatError ("Does not validate against any of
            # the Union subtypes"); other known outside failures have a way out
            ours = next((c for c in causes(e) if c is not e and isinstance(c, VatError)), None)
            one_line = ours or outside_failure(e)
            if one_line is None:
                raise
            raise one_line from e
        finally:
            rd.release_locks(failed=not ok)  # a start refused before it began leaves no folder

    _quiet_warnings()
    return run_cli(call, args, extra_errors=TRAIN_ERRORS)


def prepare_data(args: list[str]) -> int:
    """The tokenizer and token cache of `vat train` args (no subcommand) built, no training: a
    parallel sweep's runs then share one cache."""
    return _run(lambda a: build(_build_cli(a, run=False))[0].prepare_data(), args)


def check_args(args: list[str]) -> int:
    """Everything of `vat train` args built (the constructors check each value), nothing read or
    written: `vat sweep` checks every point this way before any trains."""
    return _run(lambda a: build(_build_cli(a, run=False)), args)


def _threads_option(args: list[str]) -> tuple[list[str], int | None]:
    """`--threads N` / `--threads=N` (vat's, not LightningCLI's) taken out: (the rest, N)."""
    rest, value, given = [], None, iter(args)
    for a in given:
        if a == "--threads":
            text = next(given, None)
            if text is None:
                raise VatError("--threads needs a value, a whole number >= 1")
        elif a.startswith("--threads="):
            text = a.split("=", 1)[1]
        else:
            rest.append(a)
            continue
        value = thread_count(text, "--threads")
    return rest, value


def _trust_option(args: list[str] | None) -> tuple[list[str] | None, bool]:
    """`--trust-compile-cache` taken out of the arguments: (the other arguments, given)."""
    rest = [a for a in args or () if a not in ("--trust-compile-cache", "--trust_compile_cache")]
    return (None, False) if args is None else (rest, len(rest) < len(args))


def vat_train(argv: list[str]) -> int:
    """`vat train ARGS` = `vat train fit ARGS` (`vat train validate|test ...` also work)."""
    return run_training(run_stage, argv)


def run_training(fn, argv: list[str]) -> int:
    """fn(args) for `vat train ARGV` and train.py: packaged configs resolved, `fit` added when
    no subcommand is named, then `_run`."""
    from vat.cli.config import resolve_config_args

    def call(args: list[str]) -> int:
        # vat's spelling --init-from, as LightningCLI spells its options (--run_dir, --ckpt_path)
        args = [re.sub(r"^--init-from(?=$|=)", "--init_from", a) for a in resolve_config_args(args)]
        if not args or args[0] not in VATCLI.subcommands():
            args = ["fit", *args]
        return fn(args)

    return _run(call, argv)
