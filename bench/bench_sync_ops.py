"""Host-device synchronisations and aten ops per training step, counted on the CPU: vat's
Lightning loop against the plain loop of bench/bench_train_side_by_side.py.

    python bench/bench_sync_ops.py --shape tiny --output sync_ops_tiny.json       # ~1 min
    python bench/bench_sync_ops.py --shape reference --output sync_ops_ref.json   # ~3 min

Both loops are the side-by-side bench's own: vat's built exactly as `vat train -c CONFIG`
builds it (`build_cli`), the plain one `run_plain` on the same batches. The shapes are
configs/reference_gpu.yaml scaled to the CPU (`--trainer.accelerator cpu --trainer.precision
32-true --model.compile false --data.max_tokens 8192`, `--shape reference`) and the same
config at d 16, 1+1 layers, 1,024-token batches (`--shape tiny`); `--config` and `--set`
run any other. Steps `--warmup` .. `--warmup + --steps - 1` are counted, each from one
`on_train_batch_start` to the next (the step, its backward and update, its logging, and the
next batch's fetch and transfer); logging steps (every `--log-every`) apart from the rest.

What a CPU run can count (and why not torch.profiler's op list): on a CPU every tensor is on
the host, so `.item()`, `.cpu()` or `.tolist()` waits for nothing and `.cpu()` of a CPU
tensor dispatches no op at all; the profiler cannot tell a read that would wait for a GPU
from one of a host tensor (torch.optim's step count, a collated batch). So `SyncCounter`
tracks where each tensor would live in a GPU run and counts the reads of device tensors:

- device tensors: parameters and buffers, optimiser state (torch keeps Adam's `step` on the
  host unless capturable or fused, and so does the counter), what a factory makes on the
  accelerator, what is moved there, and every output of an op with a device input (a
  TorchDispatchMode sees every aten op below autograd, the backward's included).
- which `device=` names the accelerator, on a run where it is the CPU too: the device
  objects that name it in a GPU run (`module.device`, the strategy's root device, the
  `.device` of a device tensor: the counter registers them), a device index or a non-CPU
  device. The string "cpu", `torch.device("cpu")` written out, `.cpu()`, `.numpy()`,
  `.tolist()` and a host tensor's `.device` name the host. A device object made in C++
  (torch's grouping of tensors by device) names neither: moving a device tensor there is
  taken as a no-op, a factory there as a host one.
- a synchronisation is what would make the host wait for the GPU: `aten::_local_scalar_dense`
  of a device tensor (`.item()`, `float()`, `int()`, `bool()`, `if t:`), a copy of one to
  the host (`.cpu()`, `.tolist()`, `.numpy()`, `.to("cpu")`, `copy_` into a host tensor)
  unless `non_blocking`, an op whose output size depends on the data (`nonzero`, boolean
  indexing, ...) or that returns a Python number (`aten::equal`), and a blocking copy from the
  host (`torch.tensor(x, device=d)` and `copy_` from a host tensor: torch copies with
  non_blocking=False there, i.e. cudaMemcpyAsync + cudaStreamSynchronize; Lightning moves
  each batch with non_blocking=True, listed as a transfer, not a sync).
- ops: every aten op the dispatcher runs below autograd, split into device ops (what a GPU
  would launch as kernels, views included and counted apart) and host ops.

What the CPU cannot show: the time each sync costs on the GPU, and kernels that differ
between CPU and CUDA implementations (gradient clipping's norms are one op per gradient on
the CPU and two `_foreach` ops on CUDA, in both loops alike). `bench/gpu_suite/throughput.py`
records both on a GPU (torch.cuda.set_sync_debug_mode and the profiler's CUDA time).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import threading
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

ROOT = Path(__file__).resolve().parents[1]
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_THIS = str(Path(__file__).resolve())
# torch's wrappers around a call (decorators, the modes): not where a sync comes from
_WRAPPERS = ("_dynamo", "_compile.py", "_contextlib.py", "overrides.py", "_python_dispatch.py")

# Ops whose output size depends on the values of a device input: CUDA reads it back first.
_DATA_DEPENDENT = {
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique_dim",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::repeat_interleave",
    "aten::bincount",
    "aten::_assert_async",
}
# Ops that return a Python value from tensor metadata alone (no read of the data).
_METADATA = {"aten::is_same_size", "aten::is_contiguous", "aten::_has_compatible_shallow_copy_type"}
# Factories whose result is on the device when `device=` names it (SyncCounter.on_accelerator).
_FACTORIES = {
    torch.tensor,
    torch.as_tensor,
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.arange,
    torch.scalar_tensor,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.linspace,
    torch.eye,
    torch.empty_strided,
}
# Factories that copy host data to `device=` (blocking: torch's tensor constructor copies with
# non_blocking=False).
_COPYING_FACTORIES = {torch.tensor, torch.as_tensor}
_TO_HOST = {torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.__array__}


def _tagged(t) -> bool:
    return isinstance(t, torch.Tensor) and (
        isinstance(t, torch.nn.Parameter) or getattr(t, "_sync_ops_device", False)
    )


def _tag(out, on_device: bool = True) -> None:
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor):
            t._sync_ops_device = on_device


def _site(depth: int = 3) -> str:
    """Where a sync comes from: the innermost `depth` callers outside torch and this file,
    innermost first, after the innermost torch frame when the call is inside torch."""
    f, frames, inner = sys._getframe(2), [], None
    while f is not None and len(frames) < depth:
        name = f.f_code.co_filename
        if name.startswith(_TORCH_DIR):
            if not inner and not any(w in name for w in _WRAPPERS):
                inner = f"torch/{_short(name)}:{f.f_lineno} ({f.f_code.co_name})"
        elif name != _THIS:
            frames.append(f"{_short(name)}:{f.f_lineno} ({f.f_code.co_name})")
        f = f.f_back
    return " < ".join(([inner] if inner else []) + frames) or "?"


def _short(path: str) -> str:
    for root in (_TORCH_DIR + os.sep, str(ROOT) + os.sep, "site-packages" + os.sep):
        if root in path:
            return path.split(root, 1)[1]
    return path


class _Step:
    """What one step did: syncs by (kind, op, site), ops by name (device, host, views)."""

    def __init__(self, index: int, logs: bool) -> None:
        self.index, self.logs = index, logs
        self.syncs: Counter[tuple[str, str, str]] = Counter()
        self.transfers: Counter[tuple[str, str]] = Counter()
        self.device_ops: Counter[str] = Counter()
        self.op_sites: Counter[str] = Counter()  # device ops by their innermost caller
        self.host_ops: Counter[str] = Counter()
        self.views = 0


class SyncCounter:
    """Counts, per training step, the host-device syncs a GPU run would make and the aten ops
    it would run (see the module docstring for the rules). A context manager; `mark_device`
    names the tensors that live on the device before it is entered; `step(i, logs)` starts
    step i (ending the one before), `end_step()` ends the last."""

    def __init__(self, op_sites: bool = True) -> None:
        self.op_sites = op_sites
        self.steps: list[_Step] = []
        self._current: _Step | None = None
        self._paused = 0
        self._factory = 0
        self._thread = (os.getpid(), threading.get_ident())  # not a data loader worker's
        self._accelerators: dict[int, torch.device] = {}
        self._hosts: dict[int, torch.device] = {}
        self._function_mode = _FunctionMode(self)
        self._dispatch_mode = _DispatchMode(self)

    # -- steps --------------------------------------------------------------------------------
    def step(self, index: int, logs: bool) -> None:
        self.end_step()
        self._current = _Step(index, logs)

    def end_step(self) -> None:
        if self._current is not None:
            self.steps.append(self._current)
        self._current = None

    def accelerator(self, device: torch.device) -> torch.device:
        """Registers `device` (this object) as one that names the accelerator; returns it."""
        self._accelerators[id(device)] = device  # kept: an id is not reused while it lives
        return device

    def on_host(self, device) -> bool:
        """Whether a torch.device names the host: made from "cpu" and not registered."""
        return id(device) in self._hosts and id(device) not in self._accelerators

    def on_accelerator(self, device) -> bool:
        """Whether a `device=` argument names the accelerator: a device object registered
        (`module.device`, the strategy's root device, the `.device` of a device tensor), a
        device index, or a non-CPU device; the string "cpu" or a host tensor's `.device`
        name the host, and so does no device at all."""
        if isinstance(device, torch.device):
            return device.type != "cpu" or id(device) in self._accelerators
        if isinstance(device, str):
            return not device.startswith("cpu")
        return isinstance(device, int) and not isinstance(device, bool)

    @staticmethod
    def mark_device(*objs) -> None:
        """Tensors (or modules and optimisers, whose tensors) that live on the device."""
        for obj in objs:
            if isinstance(obj, torch.nn.Module):
                _tag(list(obj.parameters()) + list(obj.buffers()))
            elif isinstance(obj, torch.optim.Optimizer):
                for group in obj.param_groups:
                    _tag([v for v in group.values() if isinstance(v, torch.Tensor)])
                    host_step = not (group.get("capturable") or group.get("fused"))
                    for p in group["params"]:
                        for k, v in obj.state.get(p, {}).items():
                            _tag(v, on_device=not (k == "step" and host_step))
            else:
                _tag(obj)

    def __enter__(self) -> SyncCounter:
        self._function_mode.__enter__()
        self._dispatch_mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.end_step()
        self._dispatch_mode.__exit__(*exc)
        self._function_mode.__exit__(*exc)

    # -- recording ----------------------------------------------------------------------------
    def _counting(self) -> bool:
        return self._current is not None and not self._paused

    def sync(self, kind: str, op: str) -> None:
        if self._counting():
            self._current.syncs[(kind, op, _site())] += 1

    def transfer(self, kind: str) -> None:
        if self._counting():
            self._current.transfers[(kind, _site())] += 1

    def op(self, name: str, device: bool, view: bool = False) -> None:
        if self._counting():
            (self._current.device_ops if device else self._current.host_ops)[name] += 1
            self._current.views += int(device and view)
            if device and self.op_sites:
                self._current.op_sites[_site(depth=1).split(" < ")[-1]] += 1

    @contextmanager
    def paused(self):
        """Ops run here are neither counted nor tagged by the dispatch mode."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    @contextmanager
    def device_factory(self):
        """Ops run here make device tensors (a factory given the accelerator's device)."""
        self._factory += 1
        try:
            yield
        finally:
            self._factory -= 1

    # -- summaries ----------------------------------------------------------------------------
    def summary(self, logs: bool) -> dict:
        steps = [s for s in self.steps if s.logs == logs]
        n = max(len(steps), 1)

        def per_step(counter: Counter) -> dict:
            total: Counter = Counter()
            for s in steps:
                total.update(counter(s))
            return {k: round(v / n, 2) for k, v in sorted(total.items(), key=lambda kv: -kv[1])}

        syncs = per_step(lambda s: Counter({" | ".join(k): v for k, v in s.syncs.items()}))
        return {
            "steps": [s.index for s in steps],
            "syncs_per_step": [sum(s.syncs.values()) for s in steps],
            "device_ops_per_step": [sum(s.device_ops.values()) for s in steps],
            "device_views_per_step": [s.views for s in steps],
            "host_ops_per_step": [sum(s.host_ops.values()) for s in steps],
            "syncs": syncs,
            "transfers": per_step(
                lambda s: Counter({" | ".join(k): v for k, v in s.transfers.items()})
            ),
            "device_ops": per_step(lambda s: s.device_ops),
            "device_ops_by_caller": per_step(lambda s: s.op_sites),
            "host_ops": per_step(lambda s: s.host_ops),
        }


class _FunctionMode(TorchFunctionMode):
    """Python-level calls: factories given a device, moves to and from the device, the
    `.device` of device tensors, and reads that dispatch no aten op on a CPU tensor
    (`.tolist()`, `.numpy()`)."""

    def __init__(self, counter: SyncCounter) -> None:
        super().__init__()
        self.c = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.c._paused or (os.getpid(), threading.get_ident()) != self.c._thread:
            return func(*args, **kwargs)
        if getattr(func, "__self__", None) is torch.Tensor.device:  # t.device
            out = func(*args, **kwargs)
            return self.c.accelerator(torch.device(out)) if _tagged(args[0]) else out
        if func is torch.device:  # torch.device("cpu") written out names the host
            out = func(*args, **kwargs)
            if out.type == "cpu":
                self.c._hosts[id(out)] = out
            return out
        if func in _FACTORIES:
            return self._factory(func, args, kwargs)
        if func in (torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda):
            return self._move(func, args, kwargs)
        if func is torch.Tensor.new_tensor and _tagged(args[0]):
            out = func(*args, **kwargs)
            _tag(out)
            self.c.sync("h2d", "Tensor.new_tensor")
            self.c.op("aten::_to_copy", device=True)
            return out
        if func in _TO_HOST and _tagged(args[0]):
            self.c.sync("d2h", f"Tensor.{func.__name__}")
            self.c.op("aten::_to_copy", device=True)
        return func(*args, **kwargs)

    def _factory(self, func, args, kwargs):
        data = args[0] if args else kwargs.get("data")
        if not self.c.on_accelerator(kwargs.get("device")) or (
            func in _COPYING_FACTORIES and _tagged(data)
        ):
            return func(*args, **kwargs)  # on the host, or a device tensor passed through
        with self.c.device_factory():
            out = func(*args, **kwargs)
        _tag(out)
        if func in _COPYING_FACTORIES:
            self.c.sync("h2d", f"torch.{func.__name__}(device=...)")
        return out

    def _move(self, func, args, kwargs):
        t = args[0]
        if func is torch.Tensor.to:
            _, _, non_blocking, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
            target = kwargs.get("device", next((a for a in args[1:] if _names_device(a)), None))
            if target is None:
                return func(*args, **kwargs)  # a dtype change
            # from the device: only to the host named ("cpu", torch.device("cpu")); to it:
            # only to the accelerator named (module.device, a device tensor's .device)
            if _tagged(t):
                to_device = not (
                    (isinstance(target, str) and target.startswith("cpu"))
                    or (isinstance(target, torch.Tensor) and not _tagged(target))
                    or self.c.on_host(target)
                )
            else:
                to_device = _tagged(target) or self.c.on_accelerator(target)
        else:
            to_device, non_blocking = func is torch.Tensor.cuda, False
        if _tagged(t) == to_device:
            return func(*args, **kwargs)  # already there
        caller = sys._getframe(2).f_code
        if caller.co_name == "batch_to" and caller.co_filename.endswith("apply_func.py"):
            # Lightning's move_data_to_device: non_blocking=True for a CUDA target (its
            # _BLOCKING_DEVICE_TYPES are cpu and mps), so blocking only on this CPU run
            non_blocking = non_blocking or to_device
        with self.c.paused():
            out = func(*args, **kwargs)
            if out is t:  # the same device on a CPU run: a GPU would copy
                out = t.clone()
        _tag(out, on_device=to_device)
        kind = "h2d" if to_device else "d2h"
        if non_blocking:
            self.c.transfer(f"{kind} (non_blocking)")
        else:
            self.c.transfer(kind)
            self.c.sync(kind, f"Tensor.{func.__name__}")
        self.c.op("aten::_to_copy", device=True)
        return out


def _names_device(a) -> bool:
    return isinstance(a, torch.device | str | int | torch.Tensor) and not isinstance(a, bool)


class _DispatchMode(TorchDispatchMode):
    """Every aten op below autograd: counts it, tags its outputs, and finds the reads."""

    def __init__(self, counter: SyncCounter) -> None:
        super().__init__()
        self.c = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.c._paused or os.getpid() != self.c._thread[0]:
            return out
        name = func._schema.name
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_device = self.c._factory > 0 or any(_tagged(t) for t in inputs)
        if name == "aten::copy_":
            dst, src = args[0], args[1]
            non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
            if _tagged(src) != _tagged(dst):
                kind = "d2h" if _tagged(src) else "h2d"
                if non_blocking:
                    self.c.transfer(f"{kind} (non_blocking)")
                else:
                    self.c.sync(kind, name)
            self.c.op(name, device=_tagged(dst))
            return out  # the destination stays where it is
        if on_device:
            if name == "aten::_local_scalar_dense":
                self.c.sync("item", name)
            elif name in _DATA_DEPENDENT or (name == "aten::index" and _bool_index(args)):
                self.c.sync("shape", name)
            elif not isinstance(out, torch.Tensor | tuple | list) and name not in _METADATA:
                if out is not None:
                    self.c.sync("scalar", name)
            _tag(out)
        self.c.op(name, device=on_device, view=func.is_view)
        return out


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else []
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or [])


# -- the two loops ----------------------------------------------------------------------------
SHAPES = {
    # configs/reference_gpu.yaml scaled to the CPU: fp32, eager, 8,192-token batches
    "reference": {"config": "configs/reference_gpu.yaml", "max_tokens": 8192, "set": []},
    # the same at d 16, 1+1 layers, 1,024-token batches (seconds a step on the CPU)
    "tiny": {
        "config": "configs/reference_gpu.yaml",
        "max_tokens": 1024,
        "set": [
            *("--model.arch.d_model", "16", "--model.arch.n_heads", "2"),
            *("--model.arch.d_ff", "32", "--model.arch.n_encoder_layers", "1"),
            *("--model.arch.n_decoder_layers", "1"),
        ],
    },
}


def side_by_side():
    """bench/bench_train_side_by_side.py as a module (its builders and its plain loop)."""
    name = "bench_train_side_by_side"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _windows_callback(counter: SyncCounter, first: int, n: int):
    import lightning as L

    from vat.train.step_logging import logs_now

    class Windows(L.Callback):
        """Step i of the fit (0-based) is counted from its on_train_batch_start to the next."""

        def __init__(self) -> None:
            self.calls = 0
            self.log_steps: list[int] = []

        def on_train_start(self, trainer, pl_module) -> None:
            counter.mark_device(pl_module, *trainer.optimizers)
            counter.accelerator(pl_module.device)
            counter.accelerator(trainer.strategy.root_device)

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            i, self.calls = self.calls, self.calls + 1
            logs = logs_now(trainer, trainer.global_step)
            if logs:
                self.log_steps.append(i)
            if first <= i < first + n:
                counter.step(i, logs)
            else:
                counter.end_step()

        def on_train_end(self, trainer, pl_module) -> None:
            counter.end_step()

    return Windows()


def count_loops(
    config: Path,
    vocab: int,
    workdir: Path,
    *,
    warmup: int = 3,
    steps: int = 6,
    log_every: int = 3,
    max_tokens: int | None = None,
    batch_size: int | None = None,
    max_train_lines: int | None = None,
    overrides: tuple[str, ...] = (),
    seed: int = 1234,
) -> dict:
    """Syncs and ops per step of both loops, steps warmup .. warmup + steps - 1, fp32 eager
    on the CPU; the plain loop's Adam fused, as both loops' Adam is on CUDA."""
    import yaml

    side = side_by_side()
    argv = ["--device", "cpu", "--config", str(config), "--vocabs", str(vocab)]
    argv += ["--precision", "32-true", "--no-compile", "--warmup", str(warmup)]
    argv += ["--steps", str(steps + 1), "--seed", str(seed)]  # + 1: the last window's end
    for flag, value in (
        ("--max-tokens", max_tokens),
        ("--batch-size", batch_size),
        ("--max-train-lines", max_train_lines),
    ):
        if value is not None:
            argv += [flag, str(value)]
    a = side.parse_args(argv)
    cfg = yaml.safe_load(config.read_text())
    side.strip_unknown_keys(cfg)
    cfg_path = workdir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    extra = ["--trainer.log_every_n_steps", str(log_every), *overrides]

    def built(run: str):
        ov, settings = side.make_overrides(a, cfg, vocab, str(workdir / run))
        return side.build_cli(cfg_path, [*ov, *extra]), settings

    cli, settings = built("setup")
    dm, system = cli.datamodule, cli.model
    dm.prepare_data()
    dm.setup("fit")
    n = warmup + steps + 1
    cpu_batches = side.take_batches(dm, n)
    del cli

    vat_counter = SyncCounter()
    cli, _ = built("vat")
    windows = _windows_callback(vat_counter, warmup, steps)
    cli.trainer.callbacks.insert(0, windows)  # the step starts before any callback's hook
    with vat_counter:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    opt = cli.trainer.optimizers[0]
    vat_optimizer = f"{type(opt).__name__}(fused={opt.defaults.get('fused')}, " + (
        f"foreach={opt.defaults.get('foreach')}, capturable={opt.defaults.get('capturable')})"
    )
    log_steps = set(windows.log_steps)
    del cli, opt

    plain_counter = SyncCounter()

    def hook(i: int) -> None:
        if warmup <= i < warmup + steps:
            plain_counter.step(i, i in log_steps)
        else:
            plain_counter.end_step()

    device = plain_counter.accelerator(torch.device("cpu"))  # the plain loop's device
    with plain_counter:
        keys = ("src", "tgt_in", "tgt_out")
        batches = [{k: b[k].to(device) for k in keys} for b in cpu_batches]
        side.run_plain(system, batches, device, "32-true", False, 0, n, seed, True, hook)

    loops = {}
    for name, counter in (("vat", vat_counter), ("plain", plain_counter)):
        loops[name] = {"logging": counter.summary(True), "non_logging": counter.summary(False)}
    loops["vat"]["optimizer"] = vat_optimizer
    loops["plain"]["optimizer"] = "Adam(fused=True)"
    return {
        "config": str(config),
        "vocab_size": vocab,
        "settings": settings,
        "overrides": extra,
        "arch": system.arch.to_dict(),
        "warmup": warmup,
        "steps": steps,
        "log_every_n_steps": log_every,
        "log_steps": sorted(i for i in log_steps if warmup <= i < warmup + steps),
        **loops,
        "device_op_difference": {
            kind: op_difference(
                loops["vat"][kind]["device_ops"], loops["plain"][kind]["device_ops"]
            )
            for kind in ("non_logging", "logging")
        },
    }


def op_difference(vat: dict, plain: dict, top: int = 25) -> dict:
    """Device ops per step where vat's count differs from the plain loop's, largest first."""
    diff = {k: round(vat.get(k, 0) - plain.get(k, 0), 2) for k in set(vat) | set(plain)}
    diff = {k: v for k, v in diff.items() if v}
    return dict(sorted(diff.items(), key=lambda kv: (-abs(kv[1]), kv[0]))[:top])


def _first(values: list) -> str:
    """One number when every step had the same count, else min-max."""
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def table(result: dict) -> str:
    rows = [
        "| per step | vat, non-logging | vat, logging | plain |",
        "|---|---:|---:|---:|",
    ]
    for key, label in (
        ("syncs_per_step", "host-device syncs"),
        ("device_ops_per_step", "device aten ops"),
        ("device_views_per_step", "  of which views"),
        ("host_ops_per_step", "host aten ops"),
    ):
        v, p = result["vat"], result["plain"]
        rows.append(
            f"| {label} | {_first(v['non_logging'][key])} | {_first(v['logging'][key])} | "
            f"{_first(p['non_logging'][key] + p['logging'][key])} |"
        )
    lines = ["\n".join(rows), ""]
    for kind in ("non_logging", "logging"):
        syncs = result["vat"][kind]["syncs"]
        lines.append(f"vat's syncs per {kind.replace('_', '-')} step: {len(syncs) or 'none'}")
        lines += [f"  {n:g} x {k}" for k, n in syncs.items()]
    syncs = result["plain"]["non_logging"]["syncs"]
    lines.append(f"plain loop's syncs per step: {len(syncs) or 'none'}")
    lines += [f"  {n:g} x {k}" for k, n in syncs.items()]
    for kind in ("non_logging", "logging"):
        lines.append(f"device ops per step, vat - plain ({kind.replace('_', '-')} steps):")
        diff = result["device_op_difference"][kind]
        lines += [f"  {n:+g} {k}" for k, n in diff.items()] or ["  none"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    p.add_argument("--config", type=Path, default=None, help="default: the shape's")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--max-tokens", type=int, default=None, help="default: the shape's")
    p.add_argument("--batch-size", type=int, default=None, help="sentences (no max-tokens)")
    p.add_argument("--max-train-lines", type=int, default=20_000)
    p.add_argument("--warmup", type=int, default=3, help="uncounted steps")
    p.add_argument("--steps", type=int, default=6, help="counted steps")
    p.add_argument("--log-every", type=int, default=3, help="trainer.log_every_n_steps")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument(
        "--set", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
        help="a further `vat train` override, e.g. --set model.loss.target_kl null",
    )  # fmt: skip
    p.add_argument("--output", type=Path, default=None, help="write the counts as JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import logging

    import datasets

    a = parse_args(argv)
    side = side_by_side()
    side._quiet_warnings()
    datasets.disable_progress_bars()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    if a.threads:
        torch.set_num_threads(a.threads)
    shape = SHAPES[a.shape]
    config = a.config or ROOT / shape["config"]
    overrides = [*shape["set"]] if a.config is None else []
    for key, value in a.set:
        overrides += [f"--{key}", value]
    max_tokens = a.max_tokens or (shape["max_tokens"] if a.batch_size is None else None)
    with tempfile.TemporaryDirectory(prefix="vat_sync_ops_") as tmp:
        result = count_loops(
            config,
            a.vocab,
            Path(tmp),
            warmup=a.warmup,
            steps=a.steps,
            log_every=a.log_every,
            max_tokens=max_tokens,
            batch_size=a.batch_size,
            max_train_lines=a.max_train_lines,
            overrides=tuple(overrides),
        )
    import lightning as L

    result = {
        "shape": a.shape if a.config is None else str(a.config),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "torch_threads": torch.get_num_threads(),
        "command": "python " + " ".join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
        **result,
    }
    print(table(result))
    if a.output:
        a.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
