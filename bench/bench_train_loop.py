"""Training throughput: our Lightning loop against a plain PyTorch loop, same model, same batches.

    python bench/bench_train_loop.py                       # paper-size model, vocab 8192, batch 128
    python bench/bench_train_loop.py --steps 40 --warmup 5 \\
        --corpus ../shared/data/corpus/tatoeba_en.txt.gz

Both loops run the same VAT (d 128, 4+4 layers, 8 heads, ff 512), the same objective
(reconstruction + scaled-prior KL, `vat.train.losses`), Adam, gradient clipping at 1.0 and the
same pre-built batches (length-bucketed real sentences). Lightning runs `VATSystem` through
`Trainer.fit` with its logging on (every step's scalars are computed; written every 50 steps)
and checkpointing off. Tokens/s counts non-pad target tokens over the timed steps (after
`--warmup` untimed steps). The loops alternate `--rounds` times to average out machine noise.
It also reports the non-pad fraction of the bucketed batches.
"""

from __future__ import annotations

import argparse
import json
import time

import lightning as L
import torch
from torch.utils.data import DataLoader

from vat.data.datamodule import BucketBatchSampler, read_lines
from vat.model import VAT, VATConfig
from vat.tokenizer import VATTokenizer, make_batch
from vat.train.losses import gaussian_kl, masked_mean, reconstruction_nll
from vat.train.schedules import KLSchedule
from vat.train.system import LossConfig, OptimConfig, VATSystem


def build_batches(corpus: str, vocab: int, batch_size: int, max_len: int, n: int, seed: int = 0):
    lines, _ = read_lines(__import__("pathlib").Path(corpus))
    lines = lines[:200_000]
    tok = VATTokenizer.train(lines[:50_000], vocab_size=vocab)
    ids = [x[: max_len - 1] for x in tok.encode_batch(lines[: batch_size * n * 4])]
    sampler = BucketBatchSampler([len(x) for x in ids], batch_size, seed=seed)
    batches = [make_batch([ids[i] for i in b]) for b in list(sampler)[:n]]
    return tok, batches


def plain_loop(cfg: VATConfig, batches, warmup: int, seed: int) -> float:
    torch.manual_seed(seed)
    model = VAT(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    sched = KLSchedule()
    ntok, start = 0, None
    for step, b in enumerate(batches):
        if step == warmup:
            start = time.perf_counter()
        out = model(b["src"], b["tgt_in"])
        nll = masked_mean(reconstruction_nll(out.logits, b["tgt_out"], out.mask), out.mask)
        kl = masked_mean(gaussian_kl(out.mu, out.logvar, 0.4).sum(-1), out.mask)
        loss = nll + sched(step) * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= warmup:
            ntok += int(out.mask.sum())
    return ntok / (time.perf_counter() - start)


class _Timer(L.Callback):
    def __init__(self, warmup: int) -> None:
        self.warmup, self.start, self.end, self.ntok = warmup, None, None, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.warmup:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx >= self.warmup:
            self.ntok += int((batch["src"] != 0).sum())
            self.end = time.perf_counter()


def lightning_loop(cfg: VATConfig, tok: VATTokenizer, batches, warmup: int, seed: int) -> float:
    torch.manual_seed(seed)
    system = VATSystem(arch=cfg, loss=LossConfig(), optim=OptimConfig(schedule="constant", lr=1e-4))
    system.tokenizer = tok
    timer = _Timer(warmup)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=len(batches),
        logger=L.pytorch.loggers.CSVLogger("/tmp/bench_train_loop"),
        log_every_n_steps=50,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        callbacks=[timer],
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    loader = DataLoader(batches, batch_size=None, shuffle=False)
    trainer.fit(system, train_dataloaders=loader)
    return timer.ntok / (timer.end - timer.start)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--corpus", default="../shared/data/corpus/tatoeba_en.txt.gz")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tok, batches = build_batches(args.corpus, args.vocab, args.batch_size, args.max_len, args.steps)
    nonpad = sum(int((b["src"] != 0).sum()) for b in batches) / sum(
        b["src"].numel() for b in batches
    )
    cfg = VATConfig(vocab_size=args.vocab, max_len=args.max_len)
    plain, light = [], []
    for _ in range(args.rounds):
        plain.append(plain_loop(cfg, batches, args.warmup, 0))
        light.append(lightning_loop(cfg, tok, batches, args.warmup, 0))
    result = {
        "plain_tokens_per_s": [round(x, 1) for x in plain],
        "lightning_tokens_per_s": [round(x, 1) for x in light],
        "ratio_of_means": round(sum(light) / sum(plain), 4),
        "nonpad_fraction": round(nonpad, 4),
        "mean_tokens_per_batch": round(
            sum(int((b["src"] != 0).sum()) for b in batches) / len(batches), 1
        ),
        "torch_threads": torch.get_num_threads(),
        "args": vars(args),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
