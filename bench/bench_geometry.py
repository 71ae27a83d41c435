"""How long does the geometry callback take on the whole STS12 probe, next to a validation run?

    python bench/bench_geometry.py --data-dir ../shared/data/senteval \\
        --val-file ../shared/data/corpus/wmt_newstest_deen/newstest2018.de-en.en

Times, for a paper-shaped VAT (d 128, 4+4 layers, 8 heads, ff 512; random weights unless
--ckpt is given, which does not change the cost):
  1. encoding the probe to token means and log-variances (`vat.features.token_vectors`),
  2. `vat.geometry.metrics.geometry_report` on those token vectors, and each metric on its own,
  3. a validation run: the teacher-forced loss (encode, sample, decode, cross-entropy, KL)
     over --val-sentences validation sentences in batches of --batch-size, as
     `VATSystem.validation_step` does it,
and prints a markdown table. Numbers are the median of --repeats runs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vat import geometry as g  # noqa: E402
from vat.features import token_vectors  # noqa: E402
from vat.model import VAT, VATConfig  # noqa: E402
from vat.share.resolve import load_model  # noqa: E402
from vat.tokenizer import VATTokenizer, make_batch  # noqa: E402
from vat.train.losses import gaussian_kl, masked_mean, reconstruction_nll  # noqa: E402


def read_lines(path: Path, limit: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(limit), f) if line.strip()]


def median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


@torch.no_grad()
def validation_run(
    model: VAT, tokenizer: VATTokenizer, sentences: list[str], batch_size: int, prior_std: float
) -> None:
    model.eval()
    ids = tokenizer.encode_batch(sentences)
    for start in range(0, len(ids), batch_size):
        batch = make_batch(ids[start : start + batch_size], max_len=model.config.max_len)
        mu, logvar, mask = model.encode(batch["src"])
        z = model.reparameterize(mu, logvar)
        logits = model.decode(batch["tgt_in"], z, mask)
        masked_mean(reconstruction_nll(logits, batch["tgt_out"], mask), mask)
        masked_mean(gaussian_kl(mu, logvar, prior_std).sum(-1), mask)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(  # --data-dir as in every vat command (docs/cli.md); --senteval-dir before
        "--data-dir",
        "--senteval-dir",
        dest="senteval_dir",
        default=str(ROOT.parent / "shared" / "data" / "senteval"),
    )
    p.add_argument(
        "--val-file",
        default=str(ROOT.parent / "shared/data/corpus/wmt_newstest_deen/newstest2018.de-en.en"),
    )
    p.add_argument(
        "--tokenizer-file",
        default=str(ROOT.parent / "shared/data/corpus/multi30k_en.txt.gz"),
        help="comma-separated text files to train the BPE tokenizer on (unless --ckpt)",
    )
    p.add_argument("--ckpt", default=None, help="use this checkpoint's model and tokenizer")
    p.add_argument(
        "--val-sentences", type=int, default=1280, help="configs/corpus_cpu.yaml: 20 batches of 64"
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument(
        "--vocab-size",
        type=int,
        default=8192,
        help="BPE vocabulary (paper: 32768; configs/corpus_cpu.yaml: 8192)",
    )
    p.add_argument(
        "--max-sentences",
        type=int,
        default=None,
        help="only the first N probe sentences (callback option)",
    )
    p.add_argument(
        "--keep-duplicates",
        action="store_true",
        help="all 6,216 STS12 sentences, not the 4,946 distinct",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads (default: torch's). On a machine shared with other jobs, 1 "
        "gives stable figures: oversubscribed OpenMP threads slow small ops 10x or more",
    )
    p.add_argument("--output", default=None, help="also write the figures as JSON")
    args = p.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.ckpt:
        loaded = load_model(args.ckpt)
        model, tokenizer, prior_std = loaded.model, loaded.tokenizer, loaded.prior_std
    else:
        torch.manual_seed(0)
        lines = [s for f in args.tokenizer_file.split(",") for s in read_lines(Path(f), 200_000)]
        tokenizer = VATTokenizer.train(lines, vocab_size=args.vocab_size)
        model = VAT(
            VATConfig(vocab_size=tokenizer.vocab_size, max_len=args.max_len, norm_first=True)
        ).eval()
        prior_std = 0.4
    probe = g.load_probe_sentences(
        senteval_dir=args.senteval_dir,
        max_sentences=args.max_sentences,
        deduplicate=not args.keep_duplicates,
    )
    val = read_lines(Path(args.val_file), args.val_sentences)

    # Interleaved repeats (encode, geometry, validation run), so that a change in machine load
    # hits all three alike; the share is the median of the per-repeat shares.
    enc_t, geo_t, val_t = [], [], []
    for _ in range(args.repeats):
        t, tv = median_time(lambda: token_vectors(model, tokenizer, probe, 128), 1)
        enc_t.append(t)
        x, ids, sent, lv = tv.vectors, tv.token_ids, tv.sentence_ids, tv.logvar
        t, report = median_time(lambda: g.geometry_report(x, ids, sent, lv, prior_std), 1)  # noqa: B023
        geo_t.append(t)
        val_t.append(
            median_time(
                lambda: validation_run(model, tokenizer, val, args.batch_size, prior_std), 1
            )[0]
        )
    encode_s, geometry_s, val_s = (statistics.median(t) for t in (enc_t, geo_t, val_t))
    share = statistics.median((e + gm) / v for e, gm, v in zip(enc_t, geo_t, val_t))
    geo_share = statistics.median(gm / v for gm, v in zip(geo_t, val_t))
    parts = {
        "anisotropy": lambda: g.anisotropy(x),
        "self_similarity": lambda: g.self_similarity(x, ids, 5),
        "intra_sentence_similarity": lambda: g.intra_sentence_similarity(x, sent),
        "isoscore + effective_rank (one eigendecomposition)": lambda: g.covariance_eigenvalues(x),
        "active_units": lambda: g.active_units(x),
        "kl_per_dimension": lambda: g.kl_per_dimension(x, lv, prior_std),
        "mutual_information (4,096 tokens, batches of 512)": lambda: g.mutual_information(x, lv),
    }
    part_s = {name: median_time(fn, args.repeats)[0] for name, fn in parts.items()}

    total = encode_s + geometry_s
    figures = {
        "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads",
        "probe_sentences": len(probe),
        "probe_tokens": int(len(x)),
        "vocab_size": tokenizer.vocab_size,
        "encode_s": encode_s,
        "geometry_s": geometry_s,
        "callback_total_s": total,
        "val_sentences": len(val),
        "val_run_s": val_s,
        "ratio_callback_to_val_run": share,
        "ratio_geometry_to_val_run": geo_share,
        "per_metric_s": part_s,
        "threads": torch.get_num_threads(),
        "runs": {"encode_s": enc_t, "geometry_s": geo_t, "val_run_s": val_t},
        "report": report.scalars(),
    }
    print(
        f"probe: STS12, {len(probe)} sentences, {len(x)} tokens (vocab {tokenizer.vocab_size}); "
        f"validation run: {len(val)} sentences, batch {args.batch_size}; "
        f"{torch.get_num_threads()} torch thread(s); median of {args.repeats}\n"
    )
    print("| step | seconds | share of a validation run |\n|---|---:|---:|")
    print(f"| encode the probe (mu, logvar) | {encode_s:.2f} | {encode_s / val_s:.1%} |")
    print(f"| geometry_report (all metrics) | {geometry_s:.2f} | {geo_share:.1%} |")
    print(f"| **callback total** | **{total:.2f}** | **{share:.1%}** |")
    print(f"| validation run ({len(val)} sentences) | {val_s:.2f} | 100% |\n")
    print("| metric alone | seconds |\n|---|---:|")
    for name, s in part_s.items():
        print(f"| {name} | {s:.3f} |")
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
