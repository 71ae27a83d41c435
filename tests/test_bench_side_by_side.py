"""The side-by-side training bench's accounting: FLOPs, batch statistics, config keys.

Throughput itself is a benchmark (BENCHMARKS.md), not a test; what is tested here is what
the figures are computed from, against hand counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import load_file_module

from vat.model import VAT, VATConfig
from vat.tokenizer import make_batch

_PATH = Path(__file__).resolve().parents[1] / "bench" / "bench_train_side_by_side.py"


@pytest.fixture(scope="module")
def bench():
    return load_file_module(_PATH, "bench_train_side_by_side")


# small enough to count its weights and FLOPs by hand
SHAPE = dict(d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, max_len=24)


def _tiny(tie: bool = True) -> VATConfig:
    return VATConfig(vocab_size=50, **SHAPE, tie_embeddings=tie)


@pytest.mark.parametrize("tie", [True, False])
def test_matmul_weights_hand_count(bench, tie):
    # encoder layer: q 16x16, kv 16x32, out 16x16, ff 16x32 + 32x16 = 2,048
    # decoder layer: self and cross attention 2 x 1,024, ff 1,024 = 3,072
    # mu and logvar heads 2 x 256 = 512; vocabulary projection 50 x 16 = 800, once
    assert bench.matmul_weights(VAT(_tiny(tie))) == 2048 + 3072 + 512 + 800


def test_batch_stats_and_step_flops(bench):
    batch = make_batch([[5, 6, 7], [8, 9], [10, 11, 12, 13, 14]])  # lengths 4, 3, 6 with </s>
    ntok, sum_sq, padded = bench.batch_stats(batch)
    assert (ntok, sum_sq, padded) == (13, 16 + 9 + 36, 3 * 6)
    cfg = _tiny()
    # 6 N sum L + 12 d A sum L^2, A = 1 encoder self + 2 decoder (self, cross) = 3
    assert bench.step_flops(cfg, 1000, ntok, sum_sq) == 6 * 1000 * 13 + 12 * 16 * 3 * 61


def test_pad_to_multiple_and_new_lengths(bench):
    batch = make_batch([[5, 6, 7], [8, 9]])  # T = 4
    padded = bench.pad_to_multiple(batch)
    assert {k: tuple(v.shape) for k, v in padded.items()} == {k: (2, 8) for k in batch}
    assert torch.equal(padded["src"][:, :4], batch["src"]) and not padded["src"][:, 4:].any()
    lengths = [make_batch([[1] * (n - 1)]) for n in (4, 12, 7, 20, 9)]  # buckets 1, 2, 1, 3, 2
    assert bench.new_lengths(lengths, warmup=3) == 1  # only bucket 3 is new after warm-up


def test_unknown_config_keys_are_dropped(bench):
    cfg = {
        "data": {"batch_size": 8, "no_such_key": 1},
        "model": {
            "no_such_flag": True,
            "loss": {"free_bits": 0.2, "kl_schedule": {"kind": "constant", "bogus": 2}},
            "optim": {"lr_scale": 2.0},
        },
    }
    dropped = bench.strip_unknown_keys(cfg)
    assert sorted(dropped) == [
        "data.no_such_key",
        "model.loss.kl_schedule.bogus",
        "model.no_such_flag",
    ]
    assert cfg == {
        "data": {"batch_size": 8},
        "model": {
            "loss": {"free_bits": 0.2, "kl_schedule": {"kind": "constant"}},
            "optim": {"lr_scale": 2.0},
        },
    }
    assert bench.has_key("data.batch_size") and not bench.has_key("data.no_such_key")


def test_recompile_log_counts_recompiles_and_names_the_guard(bench):
    def f(x):
        return (x * 2).sum()

    torch._dynamo.reset()
    g = torch.compile(f, backend="eager", dynamic=False)  # static shapes: one graph per length
    with bench.RecompileLog() as log:
        for n in (3, 4, 5, 4):  # the second 4 reuses its graph
            g(torch.randn(n))
    s = log.summary()
    assert s["recompiles"] == 2 and s["compiled_graphs"] == 3
    assert "size mismatch" in s["first_recompile_reasons"][0]
    torch._dynamo.reset()


def test_a_missing_package_is_one_line_not_a_traceback():
    """The bench on a node without jsonargparse (no offline bundle installed): exit 2, one
    line naming the package and the bundle. sys.modules[name] = None hides an installed one."""
    import subprocess
    import sys

    code = (
        "import sys, runpy; sys.modules['jsonargparse'] = None; "
        "sys.argv = ['bench', '--device', 'cpu']; "
        f"runpy.run_path({str(_PATH)!r}, run_name='__main__')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr == (
        "error: Python package 'jsonargparse' is missing (on an offline node install the "
        "bundle: scripts/offline_bundle.sh --install DIR)\n"
    )


def test_step_profiler_profiles_the_steps_it_is_given(bench):
    """StepProfiler around the plain loop on CPU: steps 1-2 of 4, per-step figures; no sync
    count (set_sync_debug_mode is CUDA's), the ops sorted by CPU time."""
    from vat.train.system import OptimConfig, VATSystem

    system = VATSystem(arch=_tiny(), optim=OptimConfig(schedule="constant", lr=1e-3))
    batches = [make_batch([[5, 6, 7], [8, 9, 10, 11]]) for _ in range(4)]
    prof = bench.StepProfiler(torch.device("cpu"), first=1, n=2)
    calls = []

    def hook(i):
        calls.append(i)
        prof.at_step(i)

    bench.run_plain(system, batches, torch.device("cpu"), "32-true", False, 0, 4, 0, None, hook)
    assert calls == [0, 1, 2, 3, 4]
    s = prof.summary(top=5)
    assert s["steps"] == 2 and s["wall_ms_per_step"] > 0 and s["syncs_per_step"] is None
    assert s["device_ms_per_step"] == 0 and s["cuda_sync_calls_per_step"] == {}
    assert len(s["top_ops"]) == 5 and all(o["op"].startswith("aten::") for o in s["top_ops"])
    cpu = [o["cpu_ms_per_step"] for o in s["top_ops"]]
    assert s["aten_calls_per_step"] > 100 and cpu[0] > 0
    assert bench.StepProfiler(torch.device("cpu"), 5, 2).summary()["error"]  # never reached
