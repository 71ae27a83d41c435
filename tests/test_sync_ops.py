"""Host-device syncs per training step: bench/bench_sync_ops.py's counter on hand-written
reads, and vat's loop against the plain loop on a tiny CPU model: no sync per step that the
plain loop does not make, and at a logging step only the named ones."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from helpers import load_file_module

_PATH = ROOT / "bench" / "bench_sync_ops.py"

# What a logging step may read on the host, and why (BENCHMARKS.md, "Framework overhead"):
LOGGING_SYNCS = {
    # every logged scalar, copied to the host at once (vat.train.step_logging.host_scalars)
    ("d2h", "host_scalars"),
    # the non-finite guard's flag (vat.train.state.TrainState.read_fault)
    ("item", "read_fault"),
    # Lightning's LearningRateMonitor (vat's trainer default) logging the tensor lr
    ("item", "log_metrics"),
}


@pytest.fixture(scope="module")
def sync_ops():
    return load_file_module(_PATH, "bench_sync_ops")


def _kinds(syncs: dict) -> Counter:
    """(kind, the innermost non-torch function) -> syncs per step."""
    out: Counter = Counter()
    for key, n in syncs.items():
        kind, _, site = key.split(" | ")
        frame = site.split(" < ")[1 if site.startswith("torch/") else 0]
        out[(kind, frame.rsplit("(", 1)[1].rstrip(")"))] += n
    return out


def test_counter_finds_each_kind_of_read_of_a_device_tensor(sync_ops):
    """Closed form: on a CPU run, reads of device tensors count, reads of host ones do not."""
    counter = sync_ops.SyncCounter()
    device = counter.accelerator(torch.device("cpu"))  # the accelerator of this run
    w = torch.nn.Parameter(torch.ones(3))  # parameters live on the device
    host = torch.ones(2)
    with counter:
        counter.step(0, logs=False)
        x = (w * 2).sum()
        host.sum().item()  # a host tensor: no sync
        x.item(), float(x), bool(x > 0)  # 3 item
        x.cpu(), x.tolist()  # 2 d2h
        torch.tensor(1.0, device=device)  # 1 h2d: torch.tensor copies with non_blocking=False
        moved = host.to(device, non_blocking=True)  # a transfer, no sync
        (moved > 1).nonzero()  # 1 shape: the output size depends on the data
        torch.zeros(2, device=w.device).add_(x)  # device ops, no sync
        host.to(torch.device("cpu"))  # host to host: nothing
        counter.end_step()
    s = counter.summary(logs=False)
    by_kind = Counter()
    for key, n in s["syncs"].items():
        by_kind[key.split(" | ")[0]] += n
    assert by_kind == {"item": 3, "d2h": 2, "h2d": 1, "shape": 1}
    assert s["syncs_per_step"] == [7]
    assert sorted(k.split(" | ")[0] for k in s["transfers"]) == ["d2h", "h2d (non_blocking)"]
    assert s["device_ops"]["aten::zeros"] == 1 and s["device_ops"]["aten::nonzero"] == 1
    assert s["host_ops"]["aten::sum"] == 1  # host.sum()


def test_vat_makes_no_sync_per_step_that_the_plain_loop_does_not(sync_ops, tmp_path, monkeypatch):
    """tests/assets/tiny.yaml with a tensor lr (Noam in sentences), the rate controller and
    gradient clipping (vat's default): both loops of bench_sync_ops, steps 2-4, logging at 3."""
    monkeypatch.chdir(ROOT)
    overrides = (
        *("--model.optim.schedule", "noam", "--model.optim.warmup_unit", "sentences"),
        *("--model.loss.target_kl", "5.0", "--data.cache_dir", str(tmp_path / "cache")),
    )
    r = sync_ops.count_loops(
        Path("tests/assets/tiny.yaml"), 400, tmp_path, warmup=2, steps=3, log_every=2,
        batch_size=4, overrides=overrides,
    )  # fmt: skip
    vat, plain = r["vat"], r["plain"]
    assert vat["non_logging"]["steps"] == [2, 4] and vat["logging"]["steps"] == [3]
    assert plain["non_logging"]["syncs_per_step"] + plain["logging"]["syncs_per_step"] == [0] * 3
    assert vat["non_logging"]["syncs_per_step"] == [0, 0], vat["non_logging"]["syncs"]
    assert set(_kinds(vat["logging"]["syncs"])) <= LOGGING_SYNCS, vat["logging"]["syncs"]
    # one fused Adam update for all parameters, as the plain loop's
    assert "fused=True" in vat["optimizer"]
    assert vat["non_logging"]["device_ops"]["aten::_fused_adam_"] == 1
    assert "aten::addcdiv_" not in vat["non_logging"]["device_ops"]
    # vat's own work per step (counters, guard, controller, tensor lr, Lightning's loss copy)
    # stays a few dozen small ops; before, it was 550 more than the plain loop's
    extra = (
        sum(vat["non_logging"]["device_ops_per_step"]) / 2
        - plain["logging"]["device_ops_per_step"][0]
    )
    assert 0 < extra < 100, r["device_op_difference"]["non_logging"]


def test_input_noise_adds_no_sync_per_step(sync_ops, tmp_path, monkeypatch):
    """Word dropout, deletion, masking and the shuffle run on the device from a generator
    seeded on the host: the steps between logging steps still never wait for the device."""
    monkeypatch.chdir(ROOT)
    overrides = (  # the first test's settings, plus every noise
        *("--model.optim.schedule", "noam", "--model.optim.warmup_unit", "sentences"),
        *("--model.loss.target_kl", "5.0"),
        *("--model.noise.decoder_word_dropout", "0.3", "--model.noise.encoder_delete", "0.2"),
        *("--model.noise.encoder_mask", "0.2", "--model.noise.encoder_shuffle_distance", "2"),
        *("--model.noise.replace_with", "random", "--data.cache_dir", str(tmp_path / "cache")),
    )
    r = sync_ops.count_loops(
        Path("tests/assets/tiny.yaml"), 400, tmp_path, warmup=2, steps=3, log_every=2,
        batch_size=4, overrides=overrides,
    )  # fmt: skip
    vat = r["vat"]
    assert vat["non_logging"]["syncs_per_step"] == [0, 0], vat["non_logging"]["syncs"]
    assert set(_kinds(vat["logging"]["syncs"])) <= LOGGING_SYNCS, vat["logging"]["syncs"]
    # the noise ran: its sort (deletion, shuffle) is among the step's device ops
    assert vat["non_logging"]["device_ops"].get("aten::sort", 0) >= 2, vat["non_logging"]
