"""`vat geometry`: every metric of `vat.geometry.metrics` on the token vectors of a probe (a
VAT's posterior means mu, or a Hugging Face model's hidden states at --layer)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vat.cli.common import (
    Parser,
    add_batch_size,
    add_common,
    add_data_dir,
    add_model_option,
    add_output,
    add_renamed,
    show_progress,
    warn_renamed,
    whole,
)
from vat.data.paths import default_senteval_dir
from vat.errors import VatError, run_cli
from vat.io import check_output_file, figure_class, folder, write_json_atomic

if TYPE_CHECKING:
    from vat.geometry.metrics import GeometryReport


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="vat geometry",
        description="Isotropy, self-similarity and collapse diagnostics (Ethayarajh 2019; "
        "vat.geometry.metrics) of a vat checkpoint or a local Hugging Face encoder.",
    )
    model = p.add_mutually_exclusive_group(required=True)
    add_model_option(model, required=False)  # a VAT's token vectors: its posterior means mu
    model.add_argument("--hf-model", help="local Hugging Face model folder (needs transformers)")
    p.add_argument("--layer", type=int, help="--hf-model's hidden layer, 0 = embeddings, -1 = last")
    probe = p.add_mutually_exclusive_group()
    probe.add_argument("--probe", help="text file of probe sentences (tab-separated fields split)")
    add_renamed(probe, "--senteval-dir", add_data_dir(probe, "; its STS12 sentences are the probe"))
    p.add_argument("--max-sentences", type=whole(1), help="use only the first N probe sentences")
    p.add_argument("--keep-duplicates", action="store_true", help="keep repeated probe sentences")
    p.add_argument(
        "--min-count", type=whole(2), default=5, help="count a type needs for self-similarity"
    )
    add_batch_size(p, 64)
    p.add_argument(
        "--top-types", type=whole(0), default=10, help="most and least self-similar types to print"
    )
    add_output(p, "JSON file to write (default: only print the table)")
    add_common(p)
    plot_dir = p.add_argument(
        "--plot-dir",
        metavar="DIR",
        help="also write spectrum.png, kl_per_dim.png and active_units.png into DIR",
    )
    add_renamed(p, "--plots", plot_dir)
    p.add_argument("--plot", action=_PlotFile, help=argparse.SUPPRESS)
    return p


class _PlotFile(argparse.Action):
    """`--plot X.png` is an error naming --plot-dir; `--plot DIR` an older spelling of it."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if Path(values).suffix.lower() == ".png":
            raise VatError(
                f"--plot {values}: vat geometry draws three figures (spectrum, KL per "
                "dimension, active units), not one PNG; name a folder for them with "
                "--plot-dir DIR"
            )
        warn_renamed(parser.prog, option_string, "--plot-dir")
        namespace.plot_dir = values


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    # torch is imported once the arguments are parsed: `vat geometry --help` answers at once
    from vat.geometry.metrics import geometry_report
    from vat.geometry.probes import load_probe_sentences
    from vat.runtime import resolve_device

    args.device = resolve_device(args.device)
    output = check_output_file(args.output, args.overwrite, "--output", "JSON file")
    if args.plot_dir is not None:  # before the encoding, not after it
        if Path(args.plot_dir).exists() or Path(args.plot_dir).is_symlink():
            folder(args.plot_dir, "--plot-dir")
        figure_class()  # one line now if matplotlib is missing
    if args.layer is not None and args.hf_model is None:
        raise VatError("--layer applies to --hf-model only (a vat checkpoint has one latent layer)")
    loaded = None
    if args.model is not None:  # read once, before the probe; everything below takes it
        from vat.share.resolve import load_model

        loaded = load_model(args.model, args.device)
    senteval = args.data_dir
    if senteval is not None:
        folder(senteval, "--data-dir")
    elif args.probe is None:
        senteval = str(default_senteval_dir())
    try:
        sentences = load_probe_sentences(
            args.probe, senteval, args.max_sentences, not args.keep_duplicates
        )
    except ValueError as e:
        raise VatError(str(e)) from None

    start = time.perf_counter()
    info, tv, prior_std, token_text = _encode(args, loaded, sentences)
    logvar = getattr(tv, "logvar", None)
    encode_s = time.perf_counter() - start
    start = time.perf_counter()
    try:
        report = geometry_report(
            tv.vectors, tv.token_ids, tv.sentence_ids, logvar, prior_std, min_count=args.min_count
        )
    except ValueError as e:
        raise VatError(f"cannot compute the geometry of this probe: {e}") from None
    geometry_s = time.perf_counter() - start

    types = sorted(report.self_similarity_by_type.items(), key=lambda kv: kv[1][1])
    result = {
        "model": info,
        "probe": {
            "file": args.probe,
            "senteval_dir": None if args.probe else senteval,
            "num_sentences": len(sentences),
            "deduplicated": not args.keep_duplicates,
        },
        "metrics": {k: v for k, v in report.to_dict().items() if k != "self_similarity_by_type"},
        "self_similarity_by_type": [
            {"id": w, "token": token_text(w), "count": c, "self_similarity": v}
            for w, (c, v) in types
        ],
        "seconds": {"encode": encode_s, "geometry": geometry_s},
    }
    if output is not None:
        write_json_atomic(output, result, indent=2)
    if args.plot_dir is not None:
        from vat.geometry.metrics import covariance_eigenvalues
        from vat.geometry.plots import save_geometry_plots

        spectrum = covariance_eigenvalues(tv.vectors)
        kl, active = report.kl_per_dim, report.active_unit_variances
        written = save_geometry_plots(args.plot_dir, spectrum, kl, active)
        print(f"wrote {', '.join(str(p) for p in written)}")
    print(format_table(report, info["name"], len(sentences)))
    if args.top_types > 0:
        k = args.top_types
        print(
            f"\nleast self-similar types (most context-specific): {_types(types[:k], token_text)}"
        )
        print(f"most self-similar types: {_types(types[::-1][:k], token_text)}")
    if not args.quiet:
        wrote = f"; wrote {output}" if output is not None else ""
        print(f"\nencode {encode_s:.1f} s, geometry {geometry_s:.2f} s{wrote}")
    return 0


def _encode(args: argparse.Namespace, loaded, sentences: list[str]):
    """(model info, token vectors, prior_std | None, token_text) of the VAT or --hf-model."""
    if loaded is not None:
        from vat.features import token_vectors

        tv = token_vectors(
            loaded.model, loaded.tokenizer, sentences, args.batch_size, progress=show_progress(args)
        )
        info = {
            "kind": "vat",
            "name": Path(loaded.source.location).name,
            "path": loaded.source.location,
            "prior_std": loaded.prior_std,
        }
        return info, tv, loaded.prior_std, loaded.tokenizer.token_text

    from vat.eval.hf_encoders import hf_token_vectors, load_hf_encoder

    layer = -1 if args.layer is None else args.layer
    encoder = load_hf_encoder(args.hf_model, args.device, name="hf_model")
    tv = hf_token_vectors(
        args.hf_model, sentences, layer=layer, batch_size=args.batch_size, device=args.device
    )
    n = encoder.num_layers
    where = Path(args.hf_model).resolve()
    info = {
        "kind": "huggingface",
        "name": f"{where.parent.name}/{where.name} layer {layer % (n + 1)}/{n}",
        "path": str(args.hf_model),
        "layer": layer % (n + 1),
        "num_layers": n,
    }
    return info, tv, None, encoder.token_text


def format_table(report: GeometryReport, name: str, num_sentences: int) -> str:
    from vat.geometry.metrics import METRICS

    lines = [
        f"geometry of {name}: {num_sentences} sentences, {report.num_tokens} tokens, "
        f"d = {report.dim}",
        f"{'metric':<40} {'value':>10}",
    ]
    for key, label in (*METRICS.items(), ("num_types", "types with >= min_count")):
        value = getattr(report, key)
        if value is None:
            continue
        text = f"{value:d}" if isinstance(value, int) else f"{value:.4f}"
        lines.append(f"{label:<40} {text:>10}")
    return "\n".join(lines)


def _types(items, token_text) -> str:
    return ", ".join(f"{token_text(w)!r} {v:.2f} (n={c})" for w, (c, v) in items)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
