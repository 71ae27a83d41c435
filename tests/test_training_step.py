"""The training step: no host sync between logging steps, compile, bf16, test-stage metrics."""

from __future__ import annotations

import traceback

import lightning as L
import pytest
import torch
from conftest import tiny_config
from helpers import assert_steps_agree
from torch.utils.data import DataLoader

from vat.tokenizer import make_batch
from vat.train.config import SentenceLatentConfig
from vat.train.system import LossConfig, OptimConfig, VATSystem

pytest_plugins = ["compile_fixtures"]  # compiled_resume

# dynamo and AOTAutograd trace every op of a compiled step (tens of seconds a graph on 2 busy
# cores): the tests of what vat compiles, not of the model's depth, compile 1+1 layers
ONE_LAYER = {"n_encoder_layers": 1, "n_decoder_layers": 1}


def _system(tok, compile=False, arch=None, sentence_latent=None, **loss):
    torch.manual_seed(0)
    system = VATSystem(
        arch=tiny_config(tok.vocab_size, **(arch or {})),
        loss=LossConfig(**loss),
        optim=OptimConfig(schedule="constant", lr=1e-3),
        sentence_latent=sentence_latent or SentenceLatentConfig(),
        compile=compile,
    )
    system.tokenizer = tok
    return system


def _batches(tok, sentences, n=6, bs=4):
    return [
        make_batch(tok.encode_batch(sentences[(i * bs) % 12 : (i * bs) % 12 + bs]))
        for i in range(n)
    ]


def _trainer(tmp_path, steps, **kw):
    kw = {
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "limit_val_batches": 0,
        "logger": L.pytorch.loggers.CSVLogger(tmp_path),
        "accelerator": "cpu",
        **kw,
    }
    return L.Trainer(max_steps=steps, **kw)


class _SyncCounter(L.Callback):
    """Counts host-sync proxies (Tensor.item/tolist/cpu/__bool__/__float__/__int__) during the
    training steps that are not logging steps. On CPU nothing really syncs; a call of any of
    these is what would wait for the GPU."""

    NAMES = ("item", "tolist", "cpu", "__bool__", "__float__", "__int__")

    def __init__(self, log_every: int) -> None:
        self.log_every, self.calls, self.counting = log_every, [], False
        self._orig = {n: getattr(torch.Tensor, n) for n in self.NAMES}
        for n in self.NAMES:
            setattr(torch.Tensor, n, self._wrap(n))

    def _wrap(self, name):
        orig = self._orig[name]

        def counted(t, *a, **k):
            stack = "".join(traceback.format_stack(limit=8)[:-1])
            # torch keeps Adam's step count on the host unless capturable=True (vat's tensor-lr
            # path sets it on CUDA): reading it is no device sync.
            # The progress bar converts its values at every step; vat gives it host copies only
            # (taken at logging steps), so those reads wait for nothing. The CUDA test below
            # checks both exclusions for real.
            host_only = "torch/optim/" in stack or 'metrics["pbar"]' in stack
            if self.counting and not host_only:
                self.calls.append((name, stack))
            return orig(t, *a, **k)

        return counted

    def restore(self) -> None:
        for n, f in self._orig.items():
            setattr(torch.Tensor, n, f)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # Count from the batch start to the next batch start, on steps that do not log.
        self.counting = (trainer.global_step + 1) % self.log_every != 0

    def on_train_end(self, trainer, pl_module) -> None:
        self.counting = False


@pytest.mark.parametrize(
    "target_kl, sentence_latent",
    [(None, None), (5.0, None), (5.0, SentenceLatentConfig(8, 1.0, 0.5, 0.25))],
    ids=["schedule", "controller", "sentence-latent"],
)
def test_no_host_sync_between_logging_steps(
    tiny_tokenizer, tiny_sentences, tmp_path, target_kl, sentence_latent
):
    system = _system(tiny_tokenizer, target_kl=target_kl, sentence_latent=sentence_latent)
    system.optim_cfg.schedule = "noam"
    system.optim_cfg.warmup_unit = "tokens"
    system.kl_schedule.unit = "sentences"
    counter = _SyncCounter(log_every=3)
    try:
        trainer = _trainer(
            tmp_path,
            6,
            log_every_n_steps=3,
            callbacks=[counter],
            enable_progress_bar=True,
            gradient_clip_val=1.0,
        )
        trainer.fit(system, DataLoader(_batches(tiny_tokenizer, tiny_sentences), batch_size=None))
    finally:
        counter.restore()
    assert trainer.global_step == 6
    assert not counter.calls, counter.calls[0][1]
    metrics = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    header = metrics[0].split(",")
    for name in ("train/loss", "train/kl", "train/kl_weight", "train/tokens_per_s", "train/lr"):
        assert name in header
    steps = {
        row.split(",")[header.index("step")]
        for row in metrics[1:]
        if row.split(",")[header.index("train/loss")]
    }
    assert steps == {"2", "5"}  # logged at steps 3 and 6 only (0-based 2 and 5)


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (the CPU proxy above runs everywhere)"
)
def test_no_cuda_sync_between_logging_steps(tiny_tokenizer, tiny_sentences, tmp_path):
    system = _system(tiny_tokenizer, target_kl=5.0)
    system.kl_schedule.unit = "tokens"

    class SyncDebug(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            log_step = (trainer.global_step + 1) % 3 == 0
            torch.cuda.set_sync_debug_mode("default" if log_step else "error")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            # From batch start (after its transfer) to batch end: the step, backward, update.
            torch.cuda.set_sync_debug_mode("default")

    try:
        trainer = _trainer(
            tmp_path,
            6,
            accelerator="gpu",
            devices=1,
            log_every_n_steps=3,
            callbacks=[SyncDebug()],
            enable_progress_bar=False,
            gradient_clip_val=1.0,
        )
        trainer.fit(system, DataLoader(_batches(tiny_tokenizer, tiny_sentences), batch_size=None))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.global_step == 6


def test_test_stage_logs_test_metrics(tiny_tokenizer, tiny_sentences, tmp_path):
    system = _system(tiny_tokenizer)
    trainer = _trainer(tmp_path, 1, enable_progress_bar=False)
    trainer.test(
        system,
        DataLoader(_batches(tiny_tokenizer, tiny_sentences, n=2), batch_size=None),
        verbose=False,
    )
    keys = set(trainer.callback_metrics)
    assert {"test/nll", "test/kl", "test/loss", "test/ppl", "test/kl_weight"} <= keys
    assert not any(k.startswith("val/") for k in keys)


def test_forward_and_shared_step_agree(tiny_tokenizer, tiny_sentences):
    """_shared_step goes through VAT.forward: same generator seed, same noise, same loss."""
    system = _system(tiny_tokenizer)
    batch = make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:4]))
    out = system._shared_step(batch, "val", generator=torch.Generator().manual_seed(3))
    fwd = system(batch["src"], batch["tgt_in"], generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(out.logits, fwd.logits)
    assert out.logits.shape[:2] == batch["src"].shape


@pytest.mark.slow  # compiles (tens of seconds): out of the contributors' tier
@pytest.mark.parametrize("fused", [False, True])
def test_compiled_graphs_stay_bounded_across_batch_sizes_and_lengths(
    tiny_tokenizer, tiny_sentences, fast_compile, fused
):
    """Batches of 1-8 sentences at padded lengths 8, 16 and 24: the documented 2 graphs
    (vat/train/objective.py: batch > 1 and batch 1, any length; 4 with the fused
    cross-entropy, whose eager chunk loop splits the step in two), every one matching eager,
    and the shapes counted.

    The first batch (padding in one sentence, T not a multiple of 8) is compared in full: loss,
    KL and gradients, aot_eager against eager; fused, against the full logits, at the
    tolerances of tests/test_fused_ce.py, with no (B, T, V) logits kept in training and all of
    them in evaluation (perplexity needs them)."""
    torch._dynamo.reset()  # graphs of earlier tests would serve these shapes (same code)
    eager = _system(tiny_tokenizer, arch=ONE_LAYER, sample_latent=False)
    compiled = _system(
        tiny_tokenizer, True, ONE_LAYER, sample_latent=False, fused_cross_entropy=fused
    )
    shapes = [(4, 5), (3, 7), (8, 6), (2, 12), (5, 16), (1, 3), (7, 9), (1, 15), (6, 20)]
    g = torch.Generator().manual_seed(0)
    for i, (b, t) in enumerate(shapes):
        ids = torch.randint(4, tiny_tokenizer.vocab_size, (b, t), generator=g)
        if i == 0:
            ids[1, 3:] = 0  # pad
        batch = {"src": ids, "tgt_in": ids.roll(1, 1), "tgt_out": ids.clone()}
        want, got = eager._shared_step(batch, "train"), compiled._shared_step(batch, "train")
        if i > 0:
            torch.testing.assert_close(got.loss, want.loss, rtol=1e-4, atol=1e-5)
        elif not fused:
            assert_steps_agree(eager, want, compiled, got)
        else:
            assert got.logits is None  # no (B, T, V) tensor was kept
            tol = {"rtol": 1e-4, "atol": 1e-6}
            assert_steps_agree(eager, want, compiled, got, loss_tol=tol, grad_tol=tol)
            val = compiled._shared_step(batch, "val", generator=torch.Generator().manual_seed(0))
            assert val.logits.shape == (b, t, tiny_tokenizer.vocab_size)
    objective = compiled._compiled
    assert objective.shapes == {(b, -(-t // 8) * 8) for b, t in shapes}
    # one per length would be 3 (x2), one per shape 9
    assert objective.graphs == (4 if fused else 2)
    assert objective.summary() == (
        f"model.compile: 9 batch shapes, 3 padded lengths (8-24), {objective.graphs} "
        "compiled graphs"
    )


@pytest.mark.slow  # compiles (tens of seconds): out of the contributors' tier
def test_resume_across_compile_change(compiled_resume, tmp_path, capsys):
    """A compiled run's checkpoint (compiled_resume's, at step 6) holds the model's own keys,
    and an eager launch resumes it (model.compile is one of the keys a resume may change)."""
    import shutil

    from compile_fixtures import COMPILED_RUN
    from helpers import fit_args, train_main

    run = tmp_path / "run"
    shutil.copytree(compiled_resume.run, run)
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["hyper_parameters"]["compile"] is True and ckpt["global_step"] == 6
    assert not any("_orig_mod" in k for k in ckpt["state_dict"])
    more = ["--ckpt_path", "last", "--model.compile", "false", "--trainer.max_steps", "8"]
    code, err = train_main(fit_args(run, compiled_resume.data, *more, *COMPILED_RUN), capsys)
    assert code == 0, err
    ckpt = torch.load(last, weights_only=True)  # steps counted on from the compiled run's 6
    assert ckpt["global_step"] == 8 and ckpt["vat_train_state"]["progress"][0].item() == 8
    assert ckpt["hyper_parameters"]["compile"] is False


def test_bf16_autocast_close_to_fp32(tiny_tokenizer, tiny_sentences, tmp_path):
    system = _system(tiny_tokenizer, sample_latent=False)
    batch = make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:8]))
    fp32 = system._shared_step(batch, "train")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = system._shared_step(batch, "train")
    assert (
        torch.isfinite(bf16.loss) and bf16.loss.dtype == torch.float32
    )  # the loss is reduced in fp32
    # bf16 keeps 8 bits of mantissa: the stated bound is 2% of the loss.
    assert abs(bf16.loss.item() - fp32.loss.item()) < 0.02 * fp32.loss.item()
    trainer = _trainer(
        tmp_path, 2, precision="bf16-mixed", enable_progress_bar=False, log_every_n_steps=1
    )
    trainer.fit(system, DataLoader(_batches(tiny_tokenizer, tiny_sentences, n=2), batch_size=None))
    assert all(torch.isfinite(p).all() for p in system.parameters())


@pytest.mark.slow  # compiles (tens of seconds): out of the contributors' tier
def test_train_cli_compiles_and_reports_its_graphs(compiled_resume):
    """`vat train --model.compile true` (compiled_resume: 4 compiled steps, its own graphs):
    the graphs compiled so far on the curve at every step, and their number in the run's
    summary."""
    from helpers import scalars

    graphs = [v for _, v in scalars(compiled_resume.run)["train/compiled_graphs"]]
    assert len(graphs) == 4 and 1 <= graphs[0] <= graphs[-1] <= 4
    (line,) = [m for m in compiled_resume.lines if "model.compile:" in m]
    assert line.startswith("vat: model.compile: ") and line.endswith(
        f"{int(graphs[-1])} compiled graphs"
    )
