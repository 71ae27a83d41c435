"""`vat explore`: the latent space of one model on a local gradio page (docs/explore.md) that
sends nothing off the machine unless asked (`--share`, `--analytics`)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Sequence

from vat.cli.common import Parser, add_common, add_model_option, show_progress, whole
from vat.data.corpus import LineReader, warn_skipped
from vat.errors import OptionError, VatError, run_cli
from vat.io import regular_file

EXTRA = 'pip install "variational-auto-transformer[explore]"'


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="vat explore",
        description="The latent space of one model in the browser (docs/explore.md).",
    )
    add_model_option(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    # 7860: gradio's own default
    p.add_argument("--port", type=whole(0, 65535), default=7860, help="default 7860; 0: any free")
    p.add_argument(
        "--corpus",
        metavar="FILE",
        help="text file (plain or .gz) for the neighbours view (default: the model's own sample)",
    )
    p.add_argument(
        "--corpus-limit", type=whole(1), default=10_000, help="use its first N lines (10,000)"
    )
    p.add_argument("--share", action="store_true", help="also open a public gradio share link")
    p.add_argument("--analytics", action="store_true", help="allow gradio's usage analytics")
    add_common(p)
    return p


def check_port(host: str, port: int) -> int:
    """`port` (a free one for 0), or one line before the model loads if it cannot be bound."""
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            if os.name != "nt":  # as uvicorn binds: a port a stopped page left in TIME_WAIT
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # is free to serve
            s.bind(address)
            return s.getsockname()[1]
    except socket.gaierror as e:
        raise OptionError(
            "host", f"{host!r} is not an address of this machine ({e.strerror})"
        ) from None
    except OSError as e:
        if port and e.errno in (98, 48, 10048):  # EADDRINUSE on Linux, macOS, Windows
            raise OptionError(
                "port",
                f"{_hostport(host, port)} is in use (another vat explore?); pick another with "
                "--port",
            ) from None
        raise OptionError("host", f"cannot bind {_hostport(host, port)} ({e.strerror})") from None


def _hostport(host: str, port: int) -> str:
    """host:port as a URL writes it ([::1]:7860 for an IPv6 address)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reachable_from_elsewhere(host: str) -> bool:
    """True when a page bound to `host` answers other machines (a non-loopback address)."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return True
    return any(not ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def served_url(host: str, port: int) -> str:
    """The page's URL; for every interface (0.0.0.0, ::) also the one to open on this machine."""
    url = f"http://{_hostport(host, port)}/"
    if host in ("0.0.0.0", "::", ""):
        local = _hostport("127.0.0.1" if host != "::" else "::1", port)
        url += f" (every interface; on this machine http://{local}/)"
    return url


def corpus_lines(args, loaded) -> tuple[list[str] | None, str | None, str | None]:
    """(lines, name, note) of --corpus, else of a checkpoint's fitting sample, else a note."""
    if args.corpus is None:
        if loaded.fit_sample is None:
            note = (
                f"neighbours: no --corpus, and {loaded.name} holds no sample of its training "
                "sentences (only a training checkpoint does); give --corpus FILE"
            )
            return None, None, note
        lines = loaded.tokenizer.decode_batch(loaded.fit_sample[: args.corpus_limit])
        return lines, "the model's fitting sample", None
    path = regular_file(args.corpus, "--corpus")
    lines: list[str] = []
    reader = LineReader(path, "skip")
    for chunk in reader:
        lines.extend(chunk)
        if len(lines) >= args.corpus_limit:
            break
    lines = lines[: args.corpus_limit]
    warn_skipped(path, reader.bad)  # as training says it
    if not lines:
        raise VatError(f"--corpus {path}: no non-empty line")
    return lines, path.name, None


def _main(argv: Sequence[str] | None) -> int:
    from vat.runtime import resolve_device

    args = build_parser().parse_args(argv)
    device = resolve_device(args.device)
    if args.corpus is not None:
        regular_file(args.corpus, "--corpus")
    port = check_port(args.host, args.port)
    try:  # the optional extra, before the model is read
        import gradio  # noqa: F401
    except ImportError:
        raise VatError(f"vat explore needs gradio, which is not installed: {EXTRA}") from None

    import vat
    from vat.explore import Explorer
    from vat.explore.page import build_page, launch, stop

    started = time.perf_counter()
    model = vat.load(args.model, device=device)
    lines, name, note = corpus_lines(args, model.loaded)
    if note and not args.quiet:
        print(note, file=sys.stderr)
    explorer = Explorer(model, lines, corpus_name=name, progress=show_progress(args))
    page = build_page(explorer, analytics=args.analytics)
    if reachable_from_elsewhere(args.host):  # said even with --quiet: it is about exposure
        shown = f"the {len(lines):,} lines of {name}" if lines else "no corpus"
        print(f"warning: --host {args.host}: the page is reachable from other machines on "
              f"the network: anyone who can reach port {port} can run the model and read "
              f"its neighbours corpus ({shown}); use --host 127.0.0.1 to keep it on this "
              "machine", file=sys.stderr)  # fmt: skip
    try:
        _, _, share_url = launch(page, args.host, port, share=args.share, block=False)
    except OSError as e:  # taken between the check and the bind
        raise OptionError("port", f"cannot serve on {_hostport(args.host, port)} ({e})") from None
    corpus = f", {len(lines):,} corpus lines" if lines else ""
    # the ready line inside the try: a Ctrl-C the moment it is read stops the page cleanly
    try:
        ready = f"ready in {time.perf_counter() - started:.1f} s; Ctrl-C stops"
        print(f"vat explore: {served_url(args.host, port)}  ({model.loaded.name}{corpus}; "
              f"{ready})", flush=True)  # fmt: skip
        if share_url:
            print(f"public share link: {share_url}", flush=True)
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        stop(page)
        if not args.quiet:
            print("vat explore: stopped", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
