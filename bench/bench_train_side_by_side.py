"""Training throughput, side by side: vat's Lightning loop against a minimal plain PyTorch loop.

    python bench/bench_train_side_by_side.py --device cuda --output bench_gpu.json
    python bench/bench_train_side_by_side.py --device cpu  --output bench_cpu.json   # ~1-2 min

One process, one device. For each vocabulary (default 8,192 and 32,768) it runs both loops
`--rounds` times, alternating vat/plain, plain/vat, ... so that drift hits both alike:

- **vat**: VATSystem + VATDataModule + Trainer built exactly as `vat train -c CONFIG` builds
  them (vat's LightningCLI, the config file plus command-line overrides), with the config's
  callbacks, TensorBoard logger, checkpoint callbacks and per-step logging. Validation is
  off (`--trainer.limit_val_batches 0`) and periodic checkpoints are pushed past the run, so
  only training steps are timed; the progress bar and the model summary are off.
- **plain**: the same `vat.model.VAT` (same architecture), the same batches (the first
  `--warmup + --steps` batches of the same data module, same seed, moved to the device
  before timing), the same precision (autocast for bf16-mixed), the same loss maths from
  `vat.train.losses` (reconstruction NLL + KL weight x free-bits KL to N(0, s^2 I), means over
  non-pad tokens), the same Noam schedule, gradient clipping at 1.0, and Adam/AdamW (fused
  on CUDA). No logging, no host sync between steps. `--compile` compiles its forward + loss
  the way vat's `model.compile` does (lengths padded to a multiple of 8, batch dim dynamic).
  Schedules run in steps and there is no KL-rate controller: neither changes the work per
  step; vat pays for its own (`model.loss.target_kl`) inside its figure.

Data: real sentences, not a synthetic source: the config's training files (the shared
corpus, ../shared/data/corpus) cut to `--max-train-lines`; vat's data module trains a
byte-level BPE tokenizer of each size on that slice (cached under the config's
data.cache_dir, so a rerun skips it).

Timing: `--warmup` untimed steps, then `--steps` timed steps (CUDA synchronised once at each
end of the window, never in between). Reported: non-pad tokens/s, steps/s, and MFU from
analytic model FLOPs (see FLOPS_FORMULA) over `--peak-tflops` (default 989, H100 SXM bf16
dense; on CPU MFU is n/a unless a peak is given).

Recompiles: every run is watched by `RecompileLog` (torch._dynamo's `recompiles` log artifact
and its graph counter); the JSON gives each loop's compiled graphs and recompiles per round
and the first recompile reasons (the failed guards), so a compiled step that does not settle
says why.

Profile (`--profile-steps N`): after the timed rounds, and after the JSON is
written (a profile stopped for time leaves the figures), N more steps of each loop of the
first vocabulary, after 3 untimed ones: torch.profiler's ops by device time and, on CUDA,
torch.cuda.set_sync_debug_mode("warn") with its warnings counted by the line that synced,
and the CUDA runtime's synchronize calls. On CPU there is no device time and no sync mode:
bench/bench_sync_ops.py counts the syncs a GPU would make there.

`data.max_tokens` and `model.compile` are used through those config keys when this vat has
them; when it does not, the bench says so and falls back (sentence batches of max_tokens /
32 sentences; both loops eager, like for like).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import inspect
import logging
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from importlib.util import find_spec
from pathlib import Path

# A node without vat's dependencies (a bare GPU node before the offline bundle is installed):
# one line and exit code 2, not an ImportError traceback.
REQUIRED = ("torch", "lightning", "jsonargparse", "datasets", "tokenizers", "yaml")
if missing := [name for name in REQUIRED if find_spec(name) is None]:
    print(
        f"error: Python package {missing[0]!r} is missing (on an offline node install the "
        "bundle: scripts/offline_bundle.sh --install DIR)",
        file=sys.stderr,
    )
    raise SystemExit(2)

import datasets  # noqa: E402
import lightning as L  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vat.data.datamodule import VATDataModule  # noqa: E402
from vat.io import write_json_atomic  # noqa: E402
from vat.model import VAT, VATConfig  # noqa: E402
from vat.tokenizer import PAD_ID  # noqa: E402
from vat.train.losses import (  # noqa: E402
    free_bits_kl,
    gaussian_kl,
    masked_mean,
    reconstruction_nll,
)
from vat.train.schedules import noam_lr  # noqa: E402
from vat.train.system import LossConfig, OptimConfig, VATSystem  # noqa: E402

try:  # vat's train CLI before it built in its own step (`build`) built in its constructor
    from vat.cli.train import _build_cli, _quiet_warnings, build  # noqa: E402
except ImportError:
    from vat.cli.train import _build_cli, _quiet_warnings  # noqa: E402

    def build(cli):
        return cli


FLOPS_FORMULA = (
    "FLOPs per step = 6 * N * sum_i L_i + 12 * d * A * sum_i L_i^2, where L_i = non-pad tokens "
    "of sentence i, N = weights of every matmul (all nn.Linear weights, including the "
    "vocabulary projection V*d counted once even when tied; embedding lookups, biases and "
    "norms excluded), d = d_model, A = attention layers = n_enc + 2 * n_dec (encoder self, "
    "decoder self, decoder cross; causal masking not discounted). 6 = forward 2 + backward 4 "
    "FLOPs per weight per token; 12 * d * L^2 = QK^T and AV, 2 * L^2 * d each forward, x3."
)
PAD_MULTIPLE = 8  # compiled steps pad lengths to a multiple of this (bounded shapes)
MAX_TOKENS_FALLBACK_LEN = 32  # padded tokens per sentence assumed when converting to sentences

# Sections of the config whose keys this vat may or may not have (other branches add some).
_SECTIONS = {
    ("data",): lambda: inspect.signature(VATDataModule.__init__).parameters,
    ("model",): lambda: inspect.signature(VATSystem.__init__).parameters,
    ("model", "arch"): lambda: {f.name for f in dataclasses.fields(VATConfig)},
    ("model", "loss"): lambda: {f.name for f in dataclasses.fields(LossConfig)},
    ("model", "loss", "kl_schedule"): lambda: {
        f.name for f in dataclasses.fields(LossConfig().kl_schedule)
    },
    ("model", "optim"): lambda: {f.name for f in dataclasses.fields(OptimConfig)},
}


def has_key(dotted: str) -> bool:
    """Whether this vat accepts the config key, e.g. "data.max_tokens"."""
    *section, name = dotted.split(".")
    known = _SECTIONS.get(tuple(section))
    return known is not None and name in known()


def strip_unknown_keys(cfg: dict) -> list[str]:
    """Drop (in place) config keys that this vat does not have; return their dotted names."""
    dropped = []
    for section in sorted(_SECTIONS, key=len, reverse=True):
        node = cfg
        for part in section:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        for name in list(node):
            if isinstance(node[name], dict) and (*section, name) in _SECTIONS:
                continue
            if not has_key(".".join((*section, name))):
                dropped.append(".".join((*section, name)))
                del node[name]
    return dropped


def matmul_weights(model: nn.Module) -> int:
    """N of FLOPS_FORMULA: every nn.Linear weight, each shared tensor counted once."""
    seen = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)}
    return sum(seen.values())


def batch_stats(batch: dict) -> tuple[int, int, int]:
    """Non-pad tokens, sum of squared sentence lengths, padded tokens of a (CPU) batch."""
    lengths = (batch["src"] != PAD_ID).sum(1).long()  # (B,)
    return int(lengths.sum()), int((lengths**2).sum()), batch["src"].numel()


def step_flops(cfg: VATConfig, n_matmul: int, ntok: int, sum_sq: int) -> float:
    attn_layers = cfg.n_encoder_layers + 2 * cfg.n_decoder_layers
    return 6.0 * n_matmul * ntok + 12.0 * cfg.d_model * attn_layers * sum_sq


def pad_to_multiple(batch: dict, multiple: int = PAD_MULTIPLE) -> dict:
    """Right-pad every (B, T) tensor to T a multiple of `multiple` (pads are masked out)."""
    extra = -batch["src"].shape[1] % multiple
    if extra == 0:
        return batch
    return {k: nn.functional.pad(v, (0, extra), value=PAD_ID) for k, v in batch.items()}


def new_lengths(batches: list[dict], warmup: int) -> int:
    """Padded lengths (multiples of 8) first met in the timed window: each is a recompile
    there under --compile, in both loops alike (warm-up should cover the lengths)."""
    padded = [-(-b["src"].shape[1] // PAD_MULTIPLE) for b in batches]
    return len(set(padded[warmup:]) - set(padded[:warmup]))


class RecompileLog(logging.Handler):
    """Counts torch._dynamo's recompiles while active: the `recompiles` log artifact (one
    record per recompile, naming the guard that failed) and the graphs compiled.

    Used as a context manager around one loop's run; `summary()` is what the JSON reports.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []
        self._loggers: list[logging.Logger] = []
        self._graphs0 = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.reasons.append(record.getMessage())

    @staticmethod
    def _graphs() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def __enter__(self) -> RecompileLog:
        import torch._dynamo.guards  # noqa: F401 (creates the artifact logger)

        torch._logging.set_logs(recompiles=True)
        names = [n for n in logging.root.manager.loggerDict if n.endswith("__recompiles")]
        self._loggers = [logging.getLogger(n) for n in names]
        for lg in self._loggers:
            lg.addHandler(self)
        self._graphs0 = self._graphs()
        return self

    def __exit__(self, *exc) -> None:
        self.graphs = self._graphs() - self._graphs0
        for lg in self._loggers:
            lg.removeHandler(self)
        torch._logging.set_logs()  # back to torch's defaults

    def summary(self) -> dict:
        first = [r.splitlines() for r in self.reasons[:3]]
        return {
            "recompiles": len(self.reasons),
            "compiled_graphs": self.graphs,
            "first_recompile_reasons": [" / ".join(s.strip() for s in lines) for lines in first],
        }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class WindowTimer(L.Callback):
    """Times steps warmup .. warmup + steps - 1 of a fit; records the batch shapes it saw."""

    def __init__(self, warmup: int, steps: int) -> None:
        self.warmup, self.steps = warmup, steps
        self.calls, self.t0, self.t1 = 0, None, None
        self.shapes: list[tuple[int, ...]] = []
        self.first_src: torch.Tensor | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.calls == 0:
            self.first_src = batch["src"].detach().cpu()  # warm-up: a sync is harmless here
        if self.calls == self.warmup:
            _sync(pl_module.device)
            self.t0 = time.perf_counter()
        self.shapes.append(tuple(batch["src"].shape))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.calls += 1
        if self.calls == self.warmup + self.steps:
            _sync(pl_module.device)
            self.t1 = time.perf_counter()


def build_cli(config: Path, overrides: list[str]):
    """vat's train CLI without running it: what `vat train -c CONFIG OVERRIDES` builds."""
    cli = _build_cli(["-c", str(config), *overrides], run=False)
    build(cli)
    return cli


def take_batches(dm, n: int) -> list[dict]:
    """The first n training batches, in the order a fit sees them (epochs 0, 1, ...)."""
    out: list[dict] = []
    epoch = 0
    while len(out) < n:
        loader = dm.train_dataloader()
        for obj in (loader.sampler, getattr(loader.batch_sampler, "sampler", None)):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        before = len(out)
        for b in loader:
            out.append(b)
            if len(out) == n:
                break
        if len(out) == before:
            raise SystemExit("error: the training data yields no batch")
        epoch += 1
    return out


def run_vat(config: Path, overrides: list[str], warmup: int, steps: int) -> dict:
    cli = build_cli(config, overrides)
    timer = WindowTimer(warmup, steps)
    cli.trainer.callbacks.append(timer)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    if timer.t1 is None:
        raise SystemExit(f"error: the vat run stopped after {timer.calls} steps")
    opt = cli.trainer.optimizers[0]
    info = {
        "seconds": timer.t1 - timer.t0,
        "shapes": timer.shapes,
        "first_src": timer.first_src,
        "optimizer": f"{type(opt).__name__}(fused={opt.defaults.get('fused')})",
        "matmul_precision": torch.get_float32_matmul_precision(),
    }
    del cli, opt
    return info


def _plain_loss(model: VAT, src, tgt_in, tgt_out, prior_std, free_bits: float, fused: bool):
    """VATSystem's objective (the paper's eq. 5-6) from vat.train.losses: NLL and the
    free-bits KL."""
    mu, logvar, mask = model.encode(src)  # (B, T, d), (B, T, d), (B, T)
    # z = mu + sigma * eps as VAT.reparameterize, with randn_like: torch.randn(shape) does
    # not trace with a dynamic batch dimension (torch 2.13: "SymIntArrayRef expected to
    # contain only concrete integers"); the training branch's VAT makes the same change.
    z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)  # (B, T, d)
    if fused:  # model.loss.fused_cross_entropy: no (B, T, V) logits (vat/train/fused_ce.py)
        from vat.train.fused_ce import fused_linear_cross_entropy

        hidden = model.decode_hidden(tgt_in, z, mask)  # (B, T, d)
        nll = fused_linear_cross_entropy(hidden, model.lm_head.weight, tgt_out, mask)
    else:
        logits = model.decode(tgt_in, z, mask)  # (B, T, V)
        nll = masked_mean(reconstruction_nll(logits, tgt_out, mask), mask)
    kl_per_dim = gaussian_kl(mu.float(), logvar.float(), prior_std)  # (B, T, d)
    return nll, masked_mean(free_bits_kl(kl_per_dim, mask, free_bits), mask)


def run_plain(
    system: VATSystem,
    batches: list[dict],
    device: torch.device,
    precision: str,
    compile_: bool,
    warmup: int,
    steps: int,
    seed: int,
    fused: bool | None = None,
    step_hook: Callable[[int], None] | None = None,
) -> dict:
    """The plain loop over `batches` (already on `device`). Adam is fused on CUDA (`fused`
    None) or as given; `step_hook(i)` is called before step i and, with len(batches), after
    the last (bench/bench_sync_ops.py counts each step's ops between two calls)."""
    torch.manual_seed(seed)
    model = VAT(system.arch).to(device).train()
    o, lc = system.optim_cfg, system.loss_cfg
    opt_cls = torch.optim.AdamW if o.weight_decay > 0 else torch.optim.Adam
    fused = device.type == "cuda" if fused is None else fused
    opt = opt_cls(
        model.parameters(),
        lr=1.0 if o.schedule == "noam" else o.lr,
        betas=o.betas,
        eps=o.eps,
        weight_decay=o.weight_decay,
        fused=fused,
    )
    d = system.arch.d_model
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        (lambda s: noam_lr(s + 1, d, o.warmup_steps, o.lr_scale))
        if o.schedule == "noam"
        else (lambda s: 1.0),
    )
    weights = [float(lc.kl_schedule(s)) for s in range(len(batches))]  # Python floats: no sync
    prior_std = torch.tensor(lc.prior_std, device=device)
    # like for like: the plain loop's NLL goes through vat.train.fused_ce when vat's does
    fused_ce = bool(getattr(lc, "fused_cross_entropy", False))
    loss_fn = _plain_loss
    if compile_:
        # As vat's model.compile does: lengths padded to a multiple of 8 (see pad_to_multiple),
        # the batch and length dimensions dynamic, and a recompile limit above the number of
        # lengths.
        limit = -(-system.arch.max_len // PAD_MULTIPLE) + 4
        for name in ("recompile_limit", "cache_size_limit"):  # renamed across releases
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), limit))
        loss_fn = torch.compile(_plain_loss)
        batches = [pad_to_multiple(b) for b in batches]
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if precision == "bf16-mixed"
        else nullcontext()
    )
    params = list(model.parameters())
    t0 = None
    for i, b in enumerate(batches):
        if step_hook is not None:
            step_hook(i)
        if i == warmup:
            _sync(device)
            t0 = time.perf_counter()
        if compile_:
            for v in b.values():
                torch._dynamo.maybe_mark_dynamic(v, 0)
                torch._dynamo.maybe_mark_dynamic(v, 1)
        with autocast:
            nll, kl = loss_fn(
                model, b["src"], b["tgt_in"], b["tgt_out"], prior_std, lc.free_bits, fused_ce
            )
        loss = nll + weights[i] * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
    if step_hook is not None:
        step_hook(len(batches))
    _sync(device)
    return {
        "seconds": time.perf_counter() - t0,
        "optimizer": f"{opt_cls.__name__}(fused={fused})",
        "matmul_precision": torch.get_float32_matmul_precision(),
    }


PROFILE_WARMUP = 3  # untimed steps of each loop before its profiled ones
_SYNC_WARNING = "called a synchronizing CUDA operation"
_SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")


class StepProfiler:
    """Profiles steps first .. first + n - 1 of a loop, from the start of step `first` to the
    start of step first + n (`at_step(i)` at the start of every step i): torch.profiler (CPU,
    and CUDA on a GPU) and, on CUDA, torch.cuda.set_sync_debug_mode("warn") with its
    warnings captured. `summary()` is what the JSON reports, per profiled step."""

    def __init__(self, device: torch.device, first: int, n: int) -> None:
        self.device, self.first, self.n = device, first, n
        self.cuda = device.type == "cuda"
        self.prof = None
        self.caught: list = []
        self.wall_s: float | None = None

    def at_step(self, i: int) -> None:
        if i == self.first:
            self.start()
        elif i == self.first + self.n:
            self.stop()

    def start(self) -> None:
        _sync(self.device)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(activities=activities)
        self.prof.__enter__()
        self._warnings = warnings.catch_warnings(record=True)
        self.caught = self._warnings.__enter__()
        warnings.simplefilter("always")  # every sync, not the first of each line
        if self.cuda:
            torch.cuda.set_sync_debug_mode("warn")
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        if self.prof is None or self.wall_s is not None:
            return
        if self.cuda:
            torch.cuda.set_sync_debug_mode(0)
        _sync(self.device)  # one cudaDeviceSynchronize of our own, taken off in summary()
        self.wall_s = time.perf_counter() - self.t0
        self._warnings.__exit__(None, None, None)
        self.prof.__exit__(None, None, None)

    def summary(self, top: int = 15) -> dict:
        if self.wall_s is None:
            return {"error": "the profiled steps did not all run"}
        n = self.n
        syncs: dict[str, int] = {}
        for w in self.caught:
            if _SYNC_WARNING in str(w.message):
                site = f"{_short_path(w.filename)}:{w.lineno}"
                syncs[site] = syncs.get(site, 0) + 1
        events = self.prof.key_averages()

        def device_us(e, own: bool = False) -> float:
            name = ("self_" if own else "") + "device_time_total"
            return float(getattr(e, name, None) or getattr(e, name.replace("device", "cuda"), 0))

        calls = {k: 0 for k in _SYNC_CALLS}
        for e in events:
            if e.key in calls:
                calls[e.key] += e.count
        calls["cudaDeviceSynchronize"] -= int(self.cuda)  # the one of stop()
        aten = [e for e in events if e.key.startswith("aten::")]
        key = (lambda e: device_us(e)) if self.cuda else (lambda e: e.self_cpu_time_total)
        return {
            "steps": n,
            "wall_ms_per_step": round(1e3 * self.wall_s / n, 3),
            # kernels and copies on the device (the profiler's self device time, summed)
            "device_ms_per_step": round(sum(device_us(e, True) for e in events) / 1e3 / n, 3),
            "syncs_per_step": round(sum(syncs.values()) / n, 2) if self.cuda else None,
            "sync_sites": {
                k: round(v / n, 2) for k, v in sorted(syncs.items(), key=lambda kv: -kv[1])
            },
            "cuda_sync_calls_per_step": {k: round(v / n, 2) for k, v in calls.items() if v > 0},
            "aten_calls_per_step": round(sum(e.count for e in aten) / n, 1),
            "top_ops": [
                {
                    "op": e.key,
                    "calls_per_step": round(e.count / n, 2),
                    "device_ms_per_step": round(device_us(e) / 1e3 / n, 4),
                    "cpu_ms_per_step": round(e.cpu_time_total / 1e3 / n, 4),
                }
                for e in sorted(aten, key=key, reverse=True)[:top]
            ],
        }


def _short_path(path: str) -> str:
    for marker in ("site-packages/", str(Path(__file__).resolve().parents[1]) + "/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def profile_vocab(a, cfg_path: Path, cfg: dict, vocab: int, workdir: Path, device) -> dict:
    """`a.profile_steps` profiled steps of each loop (StepProfiler), after PROFILE_WARMUP."""
    first, n = PROFILE_WARMUP, a.profile_steps
    overrides, settings = make_overrides(a, cfg, vocab, str(workdir / f"v{vocab}_profile"))
    overrides += ["--trainer.max_steps", str(first + n + 1)]
    out: dict = {"warmup_steps": first, "steps": n, "sync_debug_mode": device.type == "cuda"}
    _cleanup(device)
    cli = build_cli(cfg_path, overrides)
    vat_prof = StepProfiler(device, first, n)

    class AtStep(L.Callback):
        calls = 0

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            vat_prof.at_step(self.calls)
            self.calls += 1

        def on_train_end(self, trainer, pl_module) -> None:
            vat_prof.stop()

    cli.trainer.callbacks.insert(0, AtStep())  # the step starts before any callback's hook
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    out["vat"] = vat_prof.summary()
    out["log_every_n_steps"] = cli.trainer.log_every_n_steps
    system, dm = cli.model, cli.datamodule
    keys = ("src", "tgt_in", "tgt_out")
    batches = [{k: b[k].to(device) for k in keys} for b in take_batches(dm, first + n)]
    del cli
    _cleanup(device)
    plain_prof = StepProfiler(device, first, n)
    run_plain(
        system, batches, device, settings["precision"], settings["compile"], 0, len(batches),
        a.seed, step_hook=plain_prof.at_step,
    )  # fmt: skip
    out["plain"] = plain_prof.summary()
    return out


def _cleanup(device: torch.device) -> None:
    torch._dynamo.reset()  # each run compiles afresh (and none hits the recompile limit)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="train config (default: configs/corpus_gpu.yaml on cuda, corpus_cpu.yaml on cpu)",
    )
    p.add_argument("--vocabs", default="8192,32768", help="comma-separated vocabulary sizes")
    p.add_argument(
        "--precision",
        choices=["32-true", "bf16-mixed"],
        default=None,
        help="default: the config's trainer.precision",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="padded tokens per batch (data.max_tokens); default: the config's",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="sentences per batch (data.batch_size); cpu default 32",
    )
    p.add_argument("--max-len", type=int, default=None, help="data.max_len (default: the config's)")
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="model.compile for vat, torch.compile for the plain loop (default: the config's)",
    )
    p.add_argument(
        "--fused-ce",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="model.loss.fused_cross_entropy for vat, vat.train.fused_ce in the plain loop "
        "(default: the config's)",
    )
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (cuda 50, cpu 3)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (cuda 200, cpu 15)")
    p.add_argument("--rounds", type=int, default=None, help="A/B alternations (cuda 2, cpu 1)")
    p.add_argument(
        "--max-train-lines",
        type=int,
        default=None,
        help="corpus slice: data.max_train_lines (cpu default 20000; cuda: whole corpus)",
    )
    p.add_argument(
        "--num-workers", type=int, default=None, help="data.num_workers (default: the config's)"
    )
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="peak FLOP/s for MFU, in TFLOP/s (cuda default 989: H100 bf16 dense; cpu: none)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        help="after the timed rounds, profile this many steps of each loop (first vocabulary)",
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--output", type=Path, default=None, help="write the figures as JSON here")
    a = p.parse_args(argv)
    cuda = a.device == "cuda"
    a.config = a.config or Path("configs/corpus_gpu.yaml" if cuda else "configs/corpus_cpu.yaml")
    a.warmup = a.warmup if a.warmup is not None else (50 if cuda else 3)
    a.steps = a.steps or (200 if cuda else 15)
    a.rounds = a.rounds or (2 if cuda else 1)
    if a.max_train_lines is None and not cuda:
        a.max_train_lines = 20_000
    if a.batch_size is None and a.max_tokens is None and not cuda:
        a.batch_size = 32
    if a.peak_tflops is None and cuda:
        a.peak_tflops = 989.0
    return a


def make_overrides(
    a: argparse.Namespace, cfg: dict, vocab: int, run_dir: str
) -> tuple[list[str], dict]:
    """The `vat train` overrides for one run, and the settings in effect."""
    ov = [
        "--run_dir",
        run_dir,
        "--seed_everything",
        str(a.seed),
        "--trainer.accelerator",
        "gpu" if a.device == "cuda" else "cpu",
        "--trainer.devices",
        "1",
        "--trainer.max_steps",
        str(a.warmup + a.steps),
        "--trainer.max_time",
        "null",
        "--trainer.limit_val_batches",
        "0",
        "--trainer.num_sanity_val_steps",
        "0",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--checkpoint.every_n_train_steps",
        str(10**9),
        "--data.vocab_size",
        str(vocab),
    ]
    precision = a.precision or str(cfg.get("trainer", {}).get("precision", "32-true"))
    if precision not in ("32-true", "bf16-mixed"):
        raise SystemExit(
            f"error: --precision: the plain loop supports 32-true and bf16-mixed, got {precision!r}"
        )
    ov += ["--trainer.precision", precision]
    if a.max_len:
        ov += ["--data.max_len", str(a.max_len)]
    if a.max_train_lines:
        ov += [
            "--data.max_train_lines",
            str(a.max_train_lines),
            "--data.tokenizer_train_lines",
            str(a.max_train_lines),
        ]
    if a.num_workers is not None:
        ov += ["--data.num_workers", str(a.num_workers)]
    data = cfg.get("data", {})
    max_tokens = (
        a.max_tokens
        if a.max_tokens is not None
        else (data.get("max_tokens") if a.batch_size is None else None)
    )
    batch_size = a.batch_size
    if max_tokens is not None and not has_key("data.max_tokens"):
        batch_size = batch_size or max(1, max_tokens // MAX_TOKENS_FALLBACK_LEN)
        print(
            f"bench: this vat has no data.max_tokens; sentence batches of {batch_size} instead "
            f"(max_tokens {max_tokens} / {MAX_TOKENS_FALLBACK_LEN})",
            file=sys.stderr,
        )
        max_tokens = None
    if max_tokens is not None:
        ov += ["--data.max_tokens", str(max_tokens)]
    else:
        if has_key("data.max_tokens"):
            ov += ["--data.max_tokens", "null"]
        batch_size = batch_size or int(data.get("batch_size", 128))
        ov += ["--data.batch_size", str(batch_size)]
    compile_ = (
        a.compile if a.compile is not None else bool(cfg.get("model", {}).get("compile", False))
    )
    if a.fused_ce is not None:
        if not has_key("model.loss.fused_cross_entropy"):
            raise SystemExit("error: --fused-ce: this vat has no model.loss.fused_cross_entropy")
        ov += ["--model.loss.fused_cross_entropy", str(a.fused_ce).lower()]
    if has_key("model.compile"):
        ov += ["--model.compile", str(compile_).lower()]
    elif compile_:
        print(
            "bench: this vat has no model.compile; both loops run eager (like for like)",
            file=sys.stderr,
        )
        compile_ = False
    return ov, {
        "precision": precision,
        "max_tokens": max_tokens,
        "batch_size": None if max_tokens is not None else batch_size,
        "compile": compile_,
    }


def summarise(rows: list[dict], flops: float, ntok: int, steps: int, peak: float | None) -> dict:
    secs = statistics.median(r["seconds"] for r in rows)
    tflops = flops / secs / 1e12
    return {
        "seconds_median": round(secs, 4),
        "tokens_per_s": round(ntok / secs, 1),
        "steps_per_s": round(steps / secs, 3),
        "model_tflops_per_s": round(tflops, 4),
        "mfu": round(tflops / peak, 5) if peak else None,
        "hours_for_3e9_tokens": round(3e9 / (ntok / secs) / 3600, 2),
        "per_round_tokens_per_s": [round(ntok / r["seconds"], 1) for r in rows],
        "optimizer": rows[0]["optimizer"],
        "matmul_precision": rows[0]["matmul_precision"],
        # torch._dynamo, per round (the whole run, warm-up included): graphs and recompiles
        "compiled_graphs": [r.get("compiled_graphs") for r in rows],
        "recompiles": [r.get("recompiles") for r in rows],
        "first_recompile_reasons": rows[0].get("first_recompile_reasons", []),
    }


def bench_vocab(
    a, cfg_path: Path, cfg: dict, vocab: int, workdir: Path, device: torch.device
) -> dict:
    n = a.warmup + a.steps
    overrides, settings = make_overrides(a, cfg, vocab, str(workdir / f"v{vocab}_setup"))
    cli = build_cli(cfg_path, overrides)  # also prepares the tokenizer and the cached data
    dm, system = cli.datamodule, cli.model
    settings["fused_cross_entropy"] = bool(getattr(system.loss_cfg, "fused_cross_entropy", False))
    dm.prepare_data()
    dm.setup("fit")
    cpu_batches = take_batches(dm, n)
    stats = [batch_stats(b) for b in cpu_batches[a.warmup :]]
    ntok, sum_sq, padded = (sum(s[i] for s in stats) for i in range(3))
    n_matmul = matmul_weights(system.model)
    flops = sum(step_flops(system.arch, n_matmul, s[0], s[1]) for s in stats)
    keys = ("src", "tgt_in", "tgt_out")
    batches = [{k: b[k].to(device) for k in keys} for b in cpu_batches]
    info = {
        "vocab_size": vocab,
        "tokenizer_tokens": dm.tokenizer.vocab_size,
        **settings,
        "max_len": system.arch.max_len,
        "matmul_weights": n_matmul,
        "params": sum(p.numel() for p in system.model.parameters()),
        "timed_nonpad_tokens": ntok,
        "nonpad_fraction": round(ntok / padded, 4),
        "mean_padded_tokens_per_batch": round(padded / a.steps, 1),
        "model_flops_per_step": round(flops / a.steps),
        "lengths_first_timed": new_lengths(cpu_batches, a.warmup),
    }
    del cli
    vat_rows, plain_rows, same = [], [], True
    for r in range(a.rounds):
        for loop in ("vat", "plain") if r % 2 == 0 else ("plain", "vat"):
            _cleanup(device)
            dynamo = RecompileLog()
            if loop == "vat":
                ov, _ = make_overrides(a, cfg, vocab, str(workdir / f"v{vocab}_r{r}"))
                with dynamo:
                    row = run_vat(cfg_path, ov, a.warmup, a.steps)
                same &= row.pop("shapes")[a.warmup :] == [
                    tuple(b["src"].shape) for b in cpu_batches[a.warmup :]
                ]
                same &= torch.equal(row.pop("first_src"), cpu_batches[0]["src"])
                vat_rows.append({**row, **dynamo.summary()})
            else:
                with dynamo:
                    row = run_plain(
                        system,
                        batches,
                        device,
                        settings["precision"],
                        settings["compile"],
                        a.warmup,
                        a.steps,
                        a.seed,
                    )
                plain_rows.append({**row, **dynamo.summary()})
            print(
                f"bench: vocab {vocab} round {r} {loop}: {a.steps} steps in "
                f"{(vat_rows if loop == 'vat' else plain_rows)[-1]['seconds']:.2f} s",
                file=sys.stderr,
            )
    info["same_batches"] = bool(same)
    if not same:
        print(
            "bench: WARNING: the vat loop saw different batches from the plain loop",
            file=sys.stderr,
        )
    info["vat"] = summarise(vat_rows, flops, ntok, a.steps, a.peak_tflops)
    info["plain"] = summarise(plain_rows, flops, ntok, a.steps, a.peak_tflops)
    info["ratio_vat_over_plain"] = round(
        info["vat"]["tokens_per_s"] / info["plain"]["tokens_per_s"], 4
    )
    return info


def markdown(result: dict) -> str:
    lines = [
        "| vocab | loop | batch | steps/s | non-pad tokens/s | model TFLOP/s | MFU | vat / plain |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for v in result["vocabs"]:
        batch = f"{v['max_tokens']} tokens" if v["max_tokens"] else f"{v['batch_size']} sentences"
        for loop in ("vat", "plain"):
            s = v[loop]
            mfu = f"{100 * s['mfu']:.2f}%" if s["mfu"] is not None else "n/a"
            ratio = f"{v['ratio_vat_over_plain']:.3f}" if loop == "vat" else ""
            lines.append(
                f"| {v['vocab_size']} | {loop} | {batch} | {s['steps_per_s']:.2f} | "
                f"{s['tokens_per_s']:,.0f} | {s['model_tflops_per_s']:.3f} | {mfu} | {ratio} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    _quiet_warnings()
    datasets.disable_progress_bars()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device here (use --device cpu)", file=sys.stderr)
        return 2
    if not a.config.is_file():
        print(f"error: --config {a.config} does not exist", file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    cfg = yaml.safe_load(a.config.read_text())
    dropped = strip_unknown_keys(cfg)
    if dropped:
        print(
            f"bench: keys this vat does not have, dropped from {a.config}: {', '.join(dropped)}",
            file=sys.stderr,
        )
    with tempfile.TemporaryDirectory(prefix="vat_bench_") as tmp:
        workdir = Path(tmp)
        cfg_path = workdir / "config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        vocabs = [
            bench_vocab(a, cfg_path, cfg, int(v), workdir, device) for v in a.vocabs.split(",")
        ]
    result = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "lightning": L.__version__,
        "torch_threads": torch.get_num_threads(),
        "config": str(a.config),
        "keys_dropped": dropped,
        "warmup_steps": a.warmup,
        "timed_steps": a.steps,
        "rounds": a.rounds,
        "peak_tflops": a.peak_tflops,
        "flops_formula": FLOPS_FORMULA,
        "data": "the config's training files cut to data.max_train_lines "
        f"({a.max_train_lines or 'all'}); BPE of each size trained on that slice",
        "command": "python " + " ".join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
        "vocabs": vocabs,
    }
    print(markdown(result))
    print(f"\nMFU: {FLOPS_FORMULA}")
    if a.output:
        write_json_atomic(a.output, result)
    if a.profile_steps > 0:
        # written first: a profile stopped for time leaves the figures above
        vocab = result["vocabs"][0]
        with tempfile.TemporaryDirectory(prefix="vat_bench_") as tmp:
            cfg_path = Path(tmp) / "config.yaml"
            cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            try:
                profile = profile_vocab(a, cfg_path, cfg, vocab["vocab_size"], Path(tmp), device)
            except Exception as e:  # the figures stand; the profile says what failed
                profile = {"error": f"{type(e).__name__}: {e}"}
        vocab["profile"] = profile
        print(profile_text(profile), file=sys.stderr)
        if a.output:
            write_json_atomic(a.output, result)
    return 0


def profile_text(profile: dict) -> str:
    """A few lines per loop: syncs, wall and device time per step, the top ops."""
    if "error" in profile:
        return f"bench: profile: {profile['error']}"
    lines = [f"bench: profile of {profile['steps']} steps per loop:"]
    for loop in ("vat", "plain"):
        s = profile[loop]
        if "error" in s:
            lines.append(f"  {loop}: {s['error']}")
            continue
        lines.append(
            f"  {loop}: {s['wall_ms_per_step']} ms/step wall, {s['device_ms_per_step']} ms on the "
            f"device, {s['syncs_per_step']} syncs/step {s['sync_sites']}, sync calls "
            f"{s['cuda_sync_calls_per_step']}, {s['aten_calls_per_step']} aten calls/step"
        )
        for op in s["top_ops"][:5]:
            lines.append(f"    {op}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
