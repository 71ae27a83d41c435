"""What input noise costs a training step: `vat.train.noise.noised_batch` (decoder word dropout,
encoder-input deletion, masking and local shuffle, all on) against one plain training step
(forward, backward, Adam) of the paper-shaped VAT on the same batches.

    python bench/bench_noise.py                          # CPU, one thread, batches of 64
    python bench/bench_noise.py --device cuda --batch-size 512 --length 128

The batches are random words with lengths spread over 10..--length tokens (what the noise
costs depends only on the batch's shape). The two are timed in alternating rounds, each time
waiting for the device, so that a busy machine slows both alike; the noise's share of a step
is the ratio of the medians. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from vat.model import VAT, VATConfig
from vat.tokenizer import make_batch
from vat.train.noise import FIRST_WORD_ID, noised_batch
from vat.train.objective import objective_terms


def _batches(n: int, batch_size: int, length: int, vocab: int, device: str) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        lengths = torch.randint(10, length, (batch_size,), generator=g).tolist()
        seqs = [torch.randint(FIRST_WORD_ID, vocab, (k,), generator=g).tolist() for k in lengths]
        out.append({k: v.to(device) for k, v in make_batch(seqs, max_len=length).items()})
    return out


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--length", type=int, default=64, help="the longest sentence, in tokens")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = args.device
    cfg = VATConfig(vocab_size=args.vocab, max_len=args.length)  # d 128, 4 + 4 layers, ff 512
    model = VAT(cfg).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    batches = _batches(args.batches, args.batch_size, args.length, args.vocab, device)
    generator = torch.Generator(device=device)
    prior = torch.tensor(0.4, device=device)
    noise = dict(
        decoder_word_dropout=0.3,
        encoder_delete=0.3,
        encoder_mask=0.15,
        encoder_shuffle_distance=3,
        replace_with="random",
        vocab_size=args.vocab,
    )

    def step(batch) -> None:
        t = objective_terms(
            model, batch["src"], batch["tgt_in"], batch["tgt_out"], prior, 0.0, True
        )
        opt.zero_grad(set_to_none=True)
        (t.nll + 0.001 * t.kl).backward()
        opt.step()

    def noise_only(batch) -> None:
        generator.manual_seed(1)
        noised_batch(batch, generator, **noise)

    step_s, noise_s = [], []
    step(batches[0])  # warm-up: allocations, kernels chosen
    noise_only(batches[0])
    for _ in range(args.rounds):
        for fn, times in ((step, step_s), (noise_only, noise_s)):
            _sync(device)
            t0 = time.perf_counter()
            for b in batches:
                fn(b)
            _sync(device)
            times.append((time.perf_counter() - t0) / len(batches))
    step_med, noise_med = statistics.median(step_s), statistics.median(noise_s)
    print(
        json.dumps(
            {
                "device": device,
                "torch": torch.__version__,
                "threads": args.threads,
                "batch": [args.batch_size, args.length],
                "step_ms": round(1e3 * step_med, 3),
                "noise_ms": round(1e3 * noise_med, 3),
                "noise_share_of_step_pct": round(100 * noise_med / step_med, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
