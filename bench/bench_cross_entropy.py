"""The output layer's cross-entropy at 8k and 32k vocabularies: full logits against a fused,
chunked linear cross-entropy (a fused loss is worth having only if it measurably helps).

The VAT's loss head is logits = h W^T over the tied embedding W (V x d), then the
cross-entropy. At 65,536 tokens and V = 32,768 the full logits are 2.1 billion numbers (8.6 GB
in fp32), written and read several times per step. The fused variant (vat/train/fused_ce.py,
`model.loss.fused_cross_entropy`) never keeps them: per chunk of rows it computes the
logits, the loss and, at once, the gradients of h and W, so memory holds one chunk of logits
and the FLOPs are those of the full version.

Each variant runs in its own process (peak RSS or CUDA peak memory is then its own), with
one warm-up step:

    OMP_NUM_THREADS=2 PYTHONPATH=$PWD python bench/bench_cross_entropy.py --tokens 8192
    python bench/bench_cross_entropy.py --device cuda --tokens 65536 --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vat.train.fused_ce import fused_linear_cross_entropy  # noqa: E402


def full_cross_entropy(h, weight, target):
    """Mean cross-entropy through full logits, as VATSystem without the option."""
    return F.cross_entropy((h @ weight.T).float(), target)


def fused_cross_entropy(h, weight, target):
    """The same mean through vat's fused, chunked path (model.loss.fused_cross_entropy)."""
    mask = torch.ones_like(target, dtype=torch.bool)
    return fused_linear_cross_entropy(h[None], weight, target[None], mask[None])


def run_one(args) -> dict:
    device = torch.device(args.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    g = torch.Generator().manual_seed(0)
    h = (torch.randn(args.tokens, args.d, generator=g) * 0.5).to(device, dtype)
    weight = (torch.randn(args.vocab, args.d, generator=g) * args.d**-0.5).to(device, dtype)
    target = torch.randint(0, args.vocab, (args.tokens,), generator=g).to(device)
    h.requires_grad_(True)
    weight.requires_grad_(True)

    def step():
        h.grad = weight.grad = None
        fn = full_cross_entropy if args.variant == "full" else fused_cross_entropy
        loss = fn(h, weight, target)
        loss.backward()
        return loss

    loss = step()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        loss = step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    return {
        "variant": args.variant,
        "vocab": args.vocab,
        "tokens": args.tokens,
        "ms_per_step": round(1000 * sorted(times)[len(times) // 2], 2),
        "peak_mib": round(peak),
        "peak_is": "cuda max_memory_allocated" if device.type == "cuda" else "process peak RSS",
        "loss": round(loss.item(), 5),
        "grad_h_norm": round(h.grad.float().norm().item(), 5),
        "grad_w_norm": round(weight.grad.float().norm().item(), 5),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--vocabs", type=int, nargs="+", default=[8192, 32768])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variant", choices=["full", "fused"], help=argparse.SUPPRESS)
    p.add_argument("--vocab", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.variant:  # one measurement, in this process
        print(json.dumps(run_one(args)), flush=True)
        return
    for vocab in args.vocabs:
        for variant in ("full", "fused"):
            cmd = [sys.executable, __file__, *sys.argv[1:], "--variant", variant]
            out = subprocess.run([*cmd, "--vocab", str(vocab)], capture_output=True, text=True)
            if out.returncode:
                sys.exit(out.stderr[-2000:])
            print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
