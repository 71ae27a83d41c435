"""Decoding throughput: KV-cached steps against a naive loop that re-runs the whole prefix.

    python bench/bench_decode.py                       # paper-size model, batch 64, CPU
    python bench/bench_decode.py --device cuda --md bench/BENCH_decode_gpu.md

Model: the paper's shape (d 128, 4 + 4 layers, 8 heads, ff 512) with an 8,192-token
vocabulary and random weights; throughput does not depend on what the weights say. Every
sentence decodes exactly --steps tokens: </s> is forbidden until then (min_len = max_len),
so the cached and the naive path do the same number of steps and the same work per row.
Latents are N(0, 0.4^2) sequences of --latent-len positions. Both paths run in one process
on the same inputs, alternating per repeat, and must produce identical tokens.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vat.generate.decoding import DecodeOptions, decode_latents  # noqa: E402
from vat.model import VAT, VATConfig  # noqa: E402


def run(model: VAT, z: torch.Tensor, mask: torch.Tensor, opts: DecodeOptions) -> tuple[float, list]:
    if z.is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = decode_latents(model, z, mask, opts)
    if z.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0, [[h.ids for h in row] for row in out]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument(
        "--steps", type=int, default=32, help="tokens generated per sentence (</s> disabled)"
    )
    p.add_argument("--latent-len", type=int, default=24, help="latent positions T per sentence")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    p.add_argument("--md", default=None, help="also write the markdown table to this file")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # VATConfig's defaults are the paper's shape: d 128, 4 + 4 layers, 8 heads, ff 512,
    # dropout 0.1, max_len 128.
    cfg = VATConfig(vocab_size=args.vocab)
    model = VAT(cfg).to(args.device).eval()
    z = 0.4 * torch.randn(args.batch, args.latent_len, cfg.d_model, device=args.device)  # (B, T, d)
    mask = torch.ones(args.batch, args.latent_len, dtype=torch.bool, device=args.device)  # (B, T)

    rows = []
    for name, strategy, beam in (("greedy", "greedy", 1), (f"beam {args.beam}", "beam", args.beam)):
        best: dict[bool, float] = {}
        outputs: dict[bool, list] = {}
        for cache in (True, False):  # warm-up, then timed repeats alternate the two paths
            run(
                model,
                z[:2],
                mask[:2],
                DecodeOptions(
                    strategy=strategy, beam_size=beam, max_len=4, min_len=4, use_cache=cache
                ),
            )
        for _ in range(args.repeats):
            for cache in (True, False):
                opts = DecodeOptions(
                    strategy=strategy,
                    beam_size=beam,
                    max_len=args.steps,
                    min_len=args.steps,
                    use_cache=cache,
                )
                secs, outputs[cache] = run(model, z, mask, opts)
                best[cache] = min(best.get(cache, float("inf")), secs)
        assert outputs[True] == outputs[False], "cached and naive decoding disagree"
        assert all(len(h) == args.steps for row in outputs[True] for h in row)
        rows.append(
            (name, args.batch / best[True], args.batch / best[False], best[False] / best[True])
        )

    device = (
        torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else (
            f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
        )
    )
    lines = [
        f"Decoding throughput, sentences/s (best of {args.repeats}); batch {args.batch}, "
        f"{args.steps} tokens per sentence (</s> disabled), latent length {args.latent_len}; "
        f"d 128, 4+4 layers, 8 heads, ff 512, vocab {args.vocab}, random weights, fp32; "
        f"{device}; torch {torch.__version__}.",
        "",
        "| decoding | KV cache (sent/s) | naive re-run of prefix (sent/s) | speed-up |",
        "|---|---:|---:|---:|",
        *[f"| {n} | {c:.1f} | {v:.1f} | {r:.2f}x |" for n, c, v, r in rows],
        "",
        "Command: `python " + " ".join(["bench/bench_decode.py", *sys.argv[1:]]) + "`",
    ]
    text = "\n".join(lines)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")


if __name__ == "__main__":
    main()
