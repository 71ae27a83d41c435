"""The compiled `vat train` that several test modules read (tests/test_training_step.py,
tests/test_time_split.py, tests/test_compile_cache.py, tests/test_run_dir.py), made once per
session (and xdist worker) instead of once per test: compiling vat's training step costs
dynamo and AOTAutograd tens of seconds a graph on 2 busy CPU cores, whatever the backend. A
module takes it with `pytest_plugins = ["compile_fixtures"]` (a fixture imported by name would
be made once per importing module).

`compiled_resume`: a fresh eager run (2 steps), a compile cache planted in its folder (signed
with another key; unpickled, it would create a marker file), then `--ckpt_path last
--model.compile true` to step 6, in-process after `torch._dynamo.reset()` (so that it compiles
its own graph), with aot_eager (dynamo and AOTAutograd as with inductor, without inductor's
C++ build) and an inductor cache folder of its own. Tests that change its folder copy it first.
"""

from __future__ import annotations

import contextlib
import logging
from types import SimpleNamespace

import pytest
import torch
from helpers import fit_args, marker_pickle, plant_compile_cache, train_captured

ONE_LAYER = ["--model.arch.n_encoder_layers", "1", "--model.arch.n_decoder_layers", "1"]
"""1+1 layers (tiny.yaml's has 2+2): dynamo and AOTAutograd trace every op of a compiled step,
and a test of what vat compiles is no test of the model's depth."""
COMPILED_RUN = [*ONE_LAYER, "--data.max_len", "8", "--data.num_workers", "0"]
"""compiled_resume's options, which every later launch of its run repeats: 1+1 layers, and
sentences cut to 8 tokens, so that every batch has one padded length and the run compiles one
graph (the graphs of other lengths are tests/test_training_step.py's subject)."""
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
def compiled_resume(tmp_path_factory):
    """The run (module docstring) and what its compiled launch left: `run`, `data` (the data
    cache folder), `err` (its stderr lines), `lines` (the `vat:` lines it logged), `model` (the
    VATSystem it trained), `marker` (created if the planted cache ran), `inductor` (where
    torch's caches went) and `pgo_key_after` (dynamo's PGO cache key after the fit)."""
    import torch._dynamo.pgo as pgo

    from vat.cli import train as cli

    root = tmp_path_factory.mktemp("compiled_resume")
    run, data = root / "run", root / "data"
    marker, inductor = root / "marker", root / "inductor"
    with compiling_in_process():  # (one thread)
        code, err = train_captured(fit_args(run, data, *COMPILED_RUN))
    assert code == 0, err
    plant_compile_cache(run, [("inductor", "fabc", marker_pickle(marker))], PLANTED_KEY)
    seen = SimpleNamespace()
    begin = cli.begin

    def capture(run_cli, start):
        seen.model = run_cli.model
        begin(run_cli, start)

    args = fit_args(run, data, "--ckpt_path", "last", "--model.compile", "true")
    args += ["--trainer.max_steps", "6", *COMPILED_RUN]
    with pytest.MonkeyPatch.context() as mp, compiling_in_process() as logged:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
        mp.setattr(cli, "begin", capture)
        code, err = train_captured(args)
        pgo_key = pgo.get_cache_key()
    assert code == 0, err
    return SimpleNamespace(
        run=run, data=data, err=err, lines=[m for m in logged if m.startswith("vat: ")],
        model=seen.model, marker=marker, inductor=inductor, pgo_key_after=pgo_key,
    )  # fmt: skip
