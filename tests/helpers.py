"""Helpers shared by the test modules: running `vat train` in-process or in a subprocess, the
argument lists of the common CLI calls, and a minimal LightningModule around a checkpoint."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from conftest import ASSETS, ROOT
from plain_site import plain_interpreter
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader

from vat.share.resolve import load_model
from vat.tokenizer import make_batch

TINY = str(ASSETS / "tiny.yaml")

# 2-process DDP on CPU (gloo), 2 sentences per process and step
DDP_TWO_CPU = [
    "--trainer.accelerator",
    "cpu",
    "--trainer.devices",
    "2",
    "--trainer.strategy",
    "ddp",
    "--data.batch_size",
    "2",
]


def load_file_module(path: str | os.PathLike, name: str):
    """The Python file at `path` imported as module `name` (a bench script, a user's encoder
    file, the oracle's hashbow.py): none of them is a package one can import by name."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- `vat train` ------------------------------------------------------------------------------


def fit_args(run: Path, cache: Path | None = None, *extra: str) -> list[str]:
    """`fit -c tests/assets/tiny.yaml --run_dir RUN [--data.cache_dir CACHE] EXTRA...`."""
    args = ["fit", "-c", TINY, "--run_dir", str(run)]
    if cache is not None:
        args += ["--data.cache_dir", str(cache)]
    return [*args, *extra]


@functools.cache
def _plain() -> tuple[str, dict[str, str]]:
    return plain_interpreter()


def vat_python() -> str:
    """The interpreter of the vat processes tests start (plain_site.plain_interpreter: the
    plain install's packages and the checkout); run it with train_env()."""
    return _plain()[0]


def train_env() -> dict[str, str]:
    """The environment of a vat_python() process: the plain site, the checkout and tests/
    (the callbacks of crash_callbacks.py) on its path."""
    return dict(_plain()[1])


@contextlib.contextmanager
def children_in_vat_python():
    """While in-process code starts children with sys.executable (the GPU suite's training
    runs, a parallel sweep's points): that interpreter and path are vat_python()'s, as if this
    process had been started with it (as bench/gpu_suite.sh's PYTHON starts the suite)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "executable", vat_python())
        mp.setenv("PYTHONPATH", train_env()["PYTHONPATH"])
        mp.setenv("PYTHONNOUSERSITE", "1")
        yield


def run_python(
    argv: list[str], env: dict, cwd: Path = ROOT, timeout: int = 240
) -> subprocess.CompletedProcess:
    """`python ARGV` in a fresh vat_python() with ENV (train_env() and more), its output
    captured as text."""
    return subprocess.run(
        [vat_python(), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def train_subprocess(
    args: list[str], cwd: Path = ROOT, env_extra: dict | None = None, timeout: int = 240
) -> subprocess.CompletedProcess:
    """`python -m vat train ARGS` in a fresh vat_python()."""
    env = {**train_env(), "PYTHONWARNINGS": "ignore"}
    env.update(env_extra or {})
    return run_python(["-m", "vat", "train", *args], env, cwd, timeout)


def train_main(args: list[str], capsys) -> tuple[int, list[str]]:
    """`vat train` in-process (no interpreter start-up): exit code and stderr lines."""
    from vat.cli.train import main

    try:
        code = main(args)
    except SystemExit as e:  # the argument parser exits by itself
        code = e.code
    return code, capsys.readouterr().err.strip().splitlines()


def train_captured(args: list[str]) -> tuple[int, list[str]]:
    """`vat train` in-process with stderr captured here, not by pytest's capsys (which module
    fixtures cannot take): exit code and stderr lines."""
    import contextlib
    import io

    from vat.cli.train import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:  # the argument parser exits by itself
            code = e.code
    return code, err.getvalue().strip().splitlines()


def hold_lock(run: Path) -> subprocess.Popen:
    """Another process holding RUN/.lock, as a run training there does, until it is killed."""
    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; "
        f"from vat.runs.run_dir import lock_folder; lock_folder(Path({str(run)!r}), '--run_dir'); "
        f"print('locked', flush=True); time.sleep(120)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def resumes_exactly(tmp_path: Path, capsys, *args: str) -> tuple[Path, dict]:
    """`vat train ARGS` for 8 steps straight (tmp_path/ref), and for 5, a stop and a resume to
    8 (tmp_path/run): the same weights and optimiser state bit for bit. The resumed run's
    folder and last checkpoint."""
    import torch

    cache, run = tmp_path / "cache", tmp_path / "run"
    stop = ["--trainer.callbacks+=crash_callbacks.StopAtStep", "--trainer.callbacks.step=5"]
    for folder, extra in ((tmp_path / "ref", []), (run, stop), (run, ["--ckpt_path", "last"])):
        code, err = train_main(fit_args(folder, cache, *args, *extra), capsys)
        assert code == 0, err
    ref = torch.load(tmp_path / "ref" / "checkpoints" / "last.ckpt", weights_only=True)
    got = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert ref["global_step"] == got["global_step"] == 8
    for k in ref["state_dict"]:
        assert torch.equal(ref["state_dict"][k], got["state_dict"][k]), k
    for i, state in ref["optimizer_states"][0]["state"].items():
        for k in state:
            assert torch.equal(state[k], got["optimizer_states"][0]["state"][i][k]), (i, k)
    return run, got


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every TensorBoard scalar of a run: tag -> [(step, value), ...]."""
    ea = EventAccumulator(str(run_dir))
    ea.Reload()
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


# -- `vat evaluate` and `vat geometry` -------------------------------------------------------


def evaluate_args(ckpt: Path, senteval_dir: Path, output: Path, *extra: str) -> list[str]:
    """`vat evaluate` on STS12 of a checkpoint, writing OUTPUT."""
    return [
        "--ckpt",
        str(ckpt),
        "--tasks",
        "STS12",
        "--data-dir",
        str(senteval_dir),
        "--output",
        str(output),
        *extra,
    ]


def geometry_args(ckpt: Path, probe: Path, output: Path, *extra: str) -> list[str]:
    """`vat geometry` of a checkpoint on a probe file, writing OUTPUT."""
    return ["--ckpt", str(ckpt), "--probe", str(probe), "--output", str(output), *extra]


# -- a LightningModule for callback tests ------------------------------------------------------


class CheckpointSystem(L.LightningModule):
    """Just what the callbacks rely on: .model, .tokenizer, .prior_std, from a vat checkpoint.

    It trains on one batch of the first `n_sentences` sentences with plain SGD at `lr`; the
    default 0 keeps the weights put, so what a callback logs can be recomputed afterwards."""

    def __init__(
        self, ckpt: Path, sentences: list[str], n_sentences: int = 4, lr: float = 0.0
    ) -> None:
        super().__init__()
        loaded = load_model(ckpt)
        self.model, self.tokenizer, self.prior_std = (
            loaded.model,
            loaded.tokenizer,
            loaded.prior_std,
        )
        self.batch = make_batch(self.tokenizer.encode_batch(sentences[:n_sentences]))
        self.lr = lr

    def training_step(self, batch, batch_idx):
        out = self.model(batch["src"], batch["tgt_in"])
        return F.cross_entropy(out.logits.transpose(1, 2), batch["tgt_out"], ignore_index=0)

    def validation_step(self, batch, batch_idx):
        self.log("val/dummy", 0.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        return DataLoader([self.batch], batch_size=None)

    def val_dataloader(self):
        return DataLoader([self.batch], batch_size=None)


# -- exported folders -------------------------------------------------------------------------


def export_folder(model: str | os.PathLike, out: str | os.PathLike, **options) -> Path:
    """`vat export MODEL OUT` from Python: `vat.load(MODEL).save_pretrained(OUT, ...)`."""
    import vat

    return vat.load(model, device="cpu").save_pretrained(out, **options)


def checkpoint_with_counts(
    tiny_ckpt: Path,
    root: Path,
    lines: list[str],
    path: Path | None = None,
    length_histogram: tuple[int, ...] = (0, 1),
):
    """The tiny checkpoint as `vat train` would have written it on `lines`: their subword
    counts and all of them as its fitting sample in its `vat` entry, their file as its
    training file (root/train.txt), saved as `path` (default root/run/model.ckpt). Returns
    (checkpoint, training file, the counts)."""
    import numpy as np

    from vat.share.checkpoint import read_checkpoint, vat_metadata
    from vat.share.training_record import data_record

    train = root / "train.txt"
    train.write_text("\n".join(lines) + "\n")
    ckpt = read_checkpoint(tiny_ckpt)
    loaded = load_model(tiny_ckpt)
    counts = np.zeros(loaded.tokenizer.vocab_size, dtype=np.int64)
    for ids in loaded.tokenizer.encode_batch(lines):
        np.add.at(counts, ids, 1)
    ckpt["vat"] = vat_metadata(
        loaded.model,
        loaded.tokenizer,
        0.4,
        list(length_histogram),
        token_counts=counts.tolist(),
        fit_sample=sample_of(loaded.tokenizer, lines),
    )
    ckpt["datamodule_hyper_parameters"] = {"train_files": [str(train)]}
    ckpt["vat"]["training"] = {"data": data_record({"train_files": [str(train)]})}
    path = path or root / "run" / "model.ckpt"
    path.parent.mkdir(parents=True)
    torch.save(ckpt, path)
    return path, train, counts


def sample_of(tokenizer, lines: list[str]) -> dict:
    """`lines` as a checkpoint's fitting sample (vat.data.token_counts.fit_sample's layout)."""
    ids = tokenizer.encode_batch(lines)
    return {
        "ids": torch.tensor([i for x in ids for i in x], dtype=torch.int32),
        "lengths": torch.tensor([len(x) for x in ids], dtype=torch.int32),
    }


def copy_folder(folder: Path, tmp_path: Path) -> Path:
    """A copy of `folder` as tmp_path/model, to damage without touching the original."""
    import shutil

    return Path(shutil.copytree(folder, tmp_path / "model"))


def add_pretrained_script():
    """scripts/add_pretrained.py, the maintainer's step that adds a shipped model, as a module."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    import add_pretrained

    return add_pretrained


def add_main(argv: list[str]) -> int:
    """`python scripts/add_pretrained.py ARGV`, in this process."""
    return add_pretrained_script().main(argv)


def one_line_error(capsys, argv: list[str], main=None) -> str:
    """`vat ARGV` (or `main(ARGV)`) exits 2 with one `error: ...` line on stderr, which is
    returned."""
    from vat.cli import main as vat_main

    assert (main or vat_main)(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def tiny_datamodule(tmp_path: Path, train: Path, **kw):
    """A datamodule over one small text file, its cache under tmp_path/cache."""
    from vat.data.datamodule import VATDataModule

    args = dict(
        train_files=[str(train)],
        vocab_size=300,
        max_len=24,
        batch_size=4,
        cache_dir=str(tmp_path / "cache"),
        val_fraction=0.2,
        progress=False,
    )
    args.update(kw)
    return VATDataModule(**args)


# -- planted compile caches (vat.train.compile_cache) -----------------------------------------
class _OpensWhenUnpickled:
    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def marker_pickle(path: Path) -> bytes:
    """A pickle that, unpickled, creates the file `path`: what planted code could do instead."""
    import pickle

    return pickle.dumps(_OpensWhenUnpickled(path))


def plant_compile_cache(folder: Path, found, key: bytes | None = None) -> Path:
    """A compile cache of `found` (kind, key, content) artifacts in `folder`, with a record
    that matches this CPU and the file, signed with `key` (someone else's) or not at all:
    what a copied run folder, a download or a seed can hold."""
    import json

    from vat.train.compile_cache import blob_of, digest, machine_record, signature

    folder.mkdir(parents=True, exist_ok=True)
    blob, counts = blob_of(found)
    (folder / "compile_cache.bin").write_bytes(blob)
    record = {**machine_record(torch.device("cpu")), "artifacts": counts, "step": 1}
    record.update(bytes=len(blob), sha256=digest(blob), job_id="vat-train-0123456789abcdef")
    if key is not None:
        record["signature"] = signature(record, key)
    (folder / "compile_cache.json").write_text(json.dumps(record))
    return folder


def assert_steps_agree(eager, a, compiled, b, loss_tol=None, grad_tol=None) -> None:
    """The compiled step `b` of `compiled` has the eager step `a`'s loss, KL and gradients, and
    no `_orig_mod.` prefixes in its state_dict."""
    loss_tol = loss_tol or {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(b.loss, a.loss, **loss_tol)
    torch.testing.assert_close(b.kl, a.kl, **loss_tol)
    a.loss.backward()
    b.loss.backward()
    ga = torch.cat([p.grad.flatten() for p in eager.parameters() if p.grad is not None])
    gb = torch.cat([p.grad.flatten() for p in compiled.parameters() if p.grad is not None])
    torch.testing.assert_close(gb, ga, **(grad_tol or {"rtol": 1e-3, "atol": 1e-5}))
    assert set(compiled.state_dict()) == set(eager.state_dict())  # no _orig_mod. prefixes


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder `make(folder)` filled once per test session: under xdist in the session's
    shared temporary folder, under a lock, so that the workers make it once between them
    (a worker that finds it being made waits for it). A `make` that fails leaves the folder
    unfinished (no `.done`): the next test that asks makes it again."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # popen-gwN's parent: this session's, shared by its workers
    root = base / f"shared_{name}"
    done = root / ".done"
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f"shared_{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir()
                make(root)
                done.write_text("")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return root
