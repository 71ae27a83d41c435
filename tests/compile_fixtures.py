"""Runs of the tiny config that several test modules read, each made once per session (and
xdist worker) instead of once per test: compiling vat's training step costs dynamo and
AOTAutograd tens of seconds a graph on 2 busy CPU cores, whatever the backend. A module takes
them with `pytest_plugins = ["compile_fixtures"]` (a fixture imported by name would be made
once per importing module).

- `fresh_run`: a fresh eager run of tiny.yaml (2 steps), in its own process with Python's
  warnings on, its stderr kept: what a user's first `vat train` prints;
- `compiled_fit`: a fresh compiled run (`--model.compile true --compile-cache false`, aot_eager:
  dynamo and AOTAutograd as with inductor, without its C++ build; 4 steps of COMPILED_FIT),
  in-process after `torch._dynamo.reset()`, so that it compiles its own graph;
- `compiled_resume`: a copy of compiled_fit's run as an eager run leaves it, with a planted
  compile cache (signed with another key, a pickle that would create a marker file), resumed
  in-process with `--model.compile true` (aot_eager, after a dynamo reset, into an inductor
  cache folder of its own): the model it trained, what it said, what it left.

Tests that change a run folder copy it first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT
from helpers import fit_args, marker_pickle, plant_compile_cache, run_python, train_captured

ONE_LAYER = ["--model.arch.n_encoder_layers", "1", "--model.arch.n_decoder_layers", "1"]
"""1+1 layers (tiny.yaml's has 2+2): dynamo and AOTAutograd trace every op of a compiled step,
and a test of what vat compiles is no test of the model's depth."""
COMPILED_FIT = [*ONE_LAYER, "--data.max_len", "8"]
"""compiled_fit's options, which a resume of its run repeats: 1+1 layers, and sentences cut to
8 tokens, so that every batch has one padded length and the fit compiles one graph (the
graphs of other lengths are tests/test_training_step.py's subject)."""
PLANTED_KEY = b"k" * 32
"""The key a planted cache is signed with: someone else's, never this user's."""


class _Messages(logging.Handler):
    """The messages of the log records at INFO and above (what caplog.at_level("INFO") would
    hold), for fixtures wider than a test, which cannot take caplog."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def compiling_in_process():
    """What an in-process compiled fit of a test needs, undone afterwards: aot_eager for
    vat's compiled step (tests/conftest.py's fast_compile, for wider fixtures), one torch
    thread (conftest.one_thread), dynamo's graphs of earlier tests dropped (they would serve
    the same shapes: this fit compiles its own), and the INFO records logged meanwhile."""
    import vat.train.objective

    backend, threads = vat.train.objective.COMPILE_BACKEND, torch.get_num_threads()
    root = logging.getLogger()
    level, handler = root.level, _Messages()
    vat.train.objective.COMPILE_BACKEND = "aot_eager"
    torch.set_num_threads(1)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    torch._dynamo.reset()
    try:
        yield handler.messages
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        torch.set_num_threads(threads)
        vat.train.objective.COMPILE_BACKEND = backend


@pytest.fixture(scope="session")
def fresh_run(tmp_path_factory):
    """(run folder, data cache folder, stderr) of a fresh 2-step eager run of tiny.yaml in a
    process of its own, with Python's warnings on (they are part of what it is tested for)."""
    base = tmp_path_factory.mktemp("fresh_run")
    run = base / "run"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    env.pop("PYTHONWARNINGS", None)
    r = run_python(["-m", "vat", "train", *fit_args(run, base / "cache")], env)
    assert r.returncode == 0, r.stderr[-3000:]
    return run, base / "cache", r.stderr


@pytest.fixture(scope="session")
def compiled_fit(tmp_path_factory):
    """A fresh compiled 4-step run, in-process: its folder, data cache, stderr lines and the
    `vat:` lines it logged (compile cache off: it writes and says nothing of one)."""
    root = tmp_path_factory.mktemp("compiled_fit")
    run, cache = root / "run", root / "cache"
    extra = ["--model.compile", "true", "--compile-cache", "false", "--trainer.max_steps", "4"]
    args = fit_args(run, cache, *extra, "--data.num_workers", "0", *COMPILED_FIT)
    with compiling_in_process() as logged:
        code, err = train_captured(args)
    assert code == 0, err
    lines = [m for m in logged if m.startswith("vat: ")]
    return SimpleNamespace(run=run, cache=cache, err=err, lines=lines)


@pytest.fixture(scope="session")
def compiled_resume(compiled_fit, tmp_path_factory):
    """compiled_fit's run as an eager run leaves it (its checkpoint records model.compile
    false: the state_dict is the same either way), a compile cache planted in it (an inductor
    artifact that creates `marker` when unpickled, its record matching this machine and
    signed with PLANTED_KEY), resumed in-process one step with `--ckpt_path last
    --model.compile true`, the compile cache on: the trained model, stderr lines, the folder
    torch's caches went to, and dynamo's PGO cache key after the fit."""
    import torch._dynamo.pgo as pgo

    from vat.cli import train as cli

    root = tmp_path_factory.mktemp("compiled_resume")
    run, marker, inductor = root / "run", root / "marker", root / "inductor"
    shutil.copytree(compiled_fit.run, run)
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["hyper_parameters"]["compile"] is True
    ckpt["hyper_parameters"]["compile"] = False
    torch.save(ckpt, last)
    plant_compile_cache(run, [("inductor", "fabc", marker_pickle(marker))], PLANTED_KEY)
    seen = SimpleNamespace()
    before_fit = cli.VATCLI.before_fit

    def capture(self):
        seen.model = self.model
        before_fit(self)

    args = fit_args(run, compiled_fit.cache, "--ckpt_path", "last", "--model.compile", "true")
    args += ["--trainer.max_steps", "5", "--data.num_workers", "0", *COMPILED_FIT]
    with pytest.MonkeyPatch.context() as mp, compiling_in_process():
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
        mp.setattr(cli.VATCLI, "before_fit", capture)
        code, err = train_captured(args)
        pgo_key = pgo.get_cache_key()
    assert code == 0, err
    return SimpleNamespace(
        run=run, err=err, model=seen.model, marker=marker, inductor=inductor,
        pgo_key_after=pgo_key,
    )  # fmt: skip
