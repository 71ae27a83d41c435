"""Follow a model path through vat: every vat function that receives it, in call order.

    python scripts/walk_model_path.py MODEL evaluate --model MODEL --tasks STS12 ...
    python scripts/walk_model_path.py MODEL export MODEL OUT --evaluate STS12

Runs `vat ARGS...` in-process under a profiler and lists each call of a vat function one of
whose arguments is MODEL (a str or Path; a run folder's checkpoints count as MODEL). Calls are
grouped into stays: consecutive calls in the same room (a vat subpackage, or a root module).
Issue 26 used it to show that a model path is resolved and read once, at the edge
(docs/ARCHITECTURE.md, "A model path, read once").
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path


def _targets(model: str) -> set[str]:
    """MODEL as given and resolved, and a run folder's checkpoints."""
    out = {model, str(Path(model).resolve())}
    ckpts = Path(model) / "checkpoints"
    if ckpts.is_dir():
        for c in ckpts.glob("*.ckpt"):
            out |= {str(c), str(c.resolve())}
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else f"root:{parts[-1]}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    model, args = argv[0], argv[1:]
    targets = _targets(model)
    calls: list[tuple[str, str]] = []

    def is_model(value: object) -> bool:
        return isinstance(value, str | os.PathLike) and str(value) in targets

    def profile(frame, event, arg) -> None:
        if event != "call" or not frame.f_globals.get("__name__", "").startswith("vat"):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(is_model(frame.f_locals.get(n)) for n in names):
            calls.append((frame.f_globals["__name__"], code.co_name))

    from vat.cli import main as vat_main

    sys.setprofile(profile)
    try:
        rc = vat_main(args)
    finally:
        sys.setprofile(None)
    stays: list[tuple[str, list[str]]] = []
    for module, function in calls:
        room = _room(module)
        if not stays or stays[-1][0] != room:
            stays.append((room, []))
        stays[-1][1].append(f"{module.split('.', 1)[1]}.{function}")
    summary = {
        "exit": rc,
        "functions receiving the path": len(calls),
        "stays": len(stays),
        "entries per room": dict(Counter(room for room, _ in stays)),
    }
    print(json.dumps(summary), file=sys.stderr)
    for room, functions in stays:
        print(f"  {room}: {' > '.join(functions)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
