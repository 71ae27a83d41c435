"""model.loss.fused_cross_entropy (vat/train/fused_ce.py): the same loss and gradients as the full
logits, chunk by chunk, in fp32, bf16 and a compiled step, and from the CLI. The compiled step
is compared in tests/test_training_step.py
(test_compiled_graphs_stay_bounded_across_batch_sizes_and_lengths[True]), whose compiled fused
steps it shares: dynamo traces each graph for tens of seconds."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_config
from helpers import fit_args, scalars, train_main

from vat.train.fused_ce import fused_linear_cross_entropy
from vat.train.losses import masked_mean, reconstruction_nll
from vat.train.system import LossConfig, OptimConfig, VATSystem


def _inputs(B=3, T=9, d=16, V=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, T, d, generator=g, requires_grad=True)
    w = torch.randn(V, d, generator=g, requires_grad=True)
    y = torch.randint(1, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 5:] = False  # padded rows: no loss, no gradient
    mask[2, 2:] = False
    return h, w, y, mask


# 50 logits a row: 1 row a chunk, 7 (ragged last chunk), all 27 rows in one chunk
@pytest.mark.parametrize("chunk_elements", [50, 350, 10_000])
def test_equals_the_masked_mean_of_full_logits_with_gradients(chunk_elements):
    h, w, y, mask = _inputs()
    full = masked_mean(reconstruction_nll(h @ w.T, y, mask), mask)
    gh, gw = torch.autograd.grad(3 * full, (h, w))
    fused = fused_linear_cross_entropy(h, w, y, mask, chunk_elements)
    fh, fw = torch.autograd.grad(3 * fused, (h, w))  # the upstream gradient reaches both
    torch.testing.assert_close(fused, full, rtol=1e-5, atol=1e-6)
    # fp32, summed in another order: equal to rounding, far from any wrong gradient
    torch.testing.assert_close(fh, gh, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(fw, gw, rtol=1e-4, atol=1e-6)
    assert fh[0, 5:].abs().max() == 0 and fh[2, 2:].abs().max() == 0


def test_uniform_logits_cost_log_vocabulary_per_token():
    h, _, y, mask = _inputs()
    w = torch.zeros(50, 16, requires_grad=True)
    loss = fused_linear_cross_entropy(h, w, y, mask, 100)
    assert loss.item() == pytest.approx(math.log(50), rel=1e-6)


def _system(tok_size: int, fused: bool) -> VATSystem:
    torch.manual_seed(0)
    return VATSystem(
        arch=tiny_config(tok_size),
        loss=LossConfig(sample_latent=False, fused_cross_entropy=fused),
        optim=OptimConfig(schedule="constant", lr=1e-3),
    )


def _grads(system: VATSystem) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in system.parameters() if p.grad is not None])


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_training_step_matches_the_full_logits(mode):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 64, (5, 11), generator=g)
    ids[0, 7:] = 0  # pad
    ids[3, 4:] = 0
    batch = {"src": ids, "tgt_in": ids.roll(1, 1), "tgt_out": ids.clone()}
    full = _system(64, fused=False)
    fused = _system(64, fused=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
        a, b = full._shared_step(batch, "train"), fused._shared_step(batch, "train")
    assert b.logits is None  # no (B, T, V) tensor was kept
    a.loss.backward()
    b.loss.backward()
    tol = {"rtol": 1e-2, "atol": 1e-3} if mode == "bf16" else {"rtol": 1e-4, "atol": 1e-6}
    torch.testing.assert_close(b.loss, a.loss, **tol)
    torch.testing.assert_close(_grads(fused), _grads(full), **tol)
    # evaluation keeps the full logits (perplexity needs them)
    val = fused._shared_step(batch, "val", generator=torch.Generator().manual_seed(0))
    assert val.logits.shape == (5, 11, 64)


def test_train_cli_with_fused_cross_entropy_and_a_resume_that_turns_it_off(tmp_path, capsys):
    run, cache = tmp_path / "run", tmp_path / "cache"
    on = ["--model.loss.fused_cross_entropy", "true", "--data.num_workers", "0"]
    code, err = train_main(fit_args(run, cache, *on), capsys)
    assert code == 0, err
    off = ["--ckpt_path", "last", "--trainer.max_steps", "4", "--data.num_workers", "0"]
    code, err = train_main(fit_args(run, cache, *off), capsys)  # same maths: may change
    assert code == 0, err
    losses = scalars(run)["train/loss"]
    assert [s for s, _ in losses] == [0, 1, 2, 3] and all(math.isfinite(v) for _, v in losses)
