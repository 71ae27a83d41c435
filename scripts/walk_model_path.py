"""Follow a model through vat: every vat function that receives it, in call order.

    python scripts/walk_model_path.py MODEL evaluate --model MODEL --tasks STS12 ...
    python scripts/walk_model_path.py MODEL export MODEL OUT --evaluate STS12
    python scripts/walk_model_path.py --loaded MODEL evaluate --model MODEL --tasks STS12

Runs `vat ARGS...` in-process under a profiler and lists each call of a vat function one of
whose arguments is MODEL (a str or Path; a run folder's checkpoints count as MODEL), or with
`--loaded` the loaded model (the `LoadedVAT` object `load_model` returns). Calls are grouped
into stays: consecutive calls in the same room (a vat subpackage, or a root module; with
`--loaded`, a file). A climb is a stay on a higher floor than the one before it: a module's
floor is one above the highest vat module it imports, so a climb is a return up the call
stack into a room that had handed the model down (docs/ARCHITECTURE.md, "A model path, read
once, then the loaded model everywhere").
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


def _room(module: str, by_file: bool) -> str:
    parts = module.split(".")
    if by_file:
        return "/".join(parts[1:]) + ".py"
    return parts[1] if len(parts) > 2 else f"root:{parts[-1]}"


def _floors() -> dict[str, int]:
    """{module: floor} over vat's modules: 1 for a module importing no vat module, else one
    above the highest module it imports (module-level and function-level imports alike)."""
    import ast

    root = Path(__file__).resolve().parent.parent / "vat"
    imports: dict[str, set[str]] = {}
    for f in root.rglob("*.py"):
        parts = f.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vat"):
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("vat")}
        imports[name] = found
    floors: dict[str, int] = {}

    def floor(name: str, seen: frozenset = frozenset()) -> int:
        if name not in floors:
            below = [m for m in imports.get(name, ()) if m in imports and m != name]
            below = [m for m in below if m not in seen and not name.startswith(m + ".")]
            floors[name] = 1 + max((floor(m, seen | {name}) for m in below), default=0)
        return floors[name]

    for name in imports:
        floor(name)
    return floors


def main(argv: list[str]) -> int:
    loaded = argv[:1] == ["--loaded"]
    argv = argv[1:] if loaded else argv
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    model, args = argv[0], argv[1:]
    targets = _targets(model)
    calls: list[tuple[str, str]] = []
    from vat.share.loaded import LoadedVAT

    def is_model(value: object) -> bool:
        if loaded:
            return isinstance(value, LoadedVAT)
        return isinstance(value, str | os.PathLike) and str(value) in targets

    def profile(frame, event, arg) -> None:
        if event != "call" or not frame.f_globals.get("__name__", "").startswith("vat"):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if loaded and names[:1] == ("self",) and is_model(frame.f_locals.get("self")):
            return  # the loaded model's own methods and properties are not a walk
        if any(is_model(frame.f_locals.get(n)) for n in names):
            calls.append((frame.f_globals["__name__"], code.co_name))

    from vat.cli import main as vat_main

    sys.setprofile(profile)
    try:
        rc = vat_main(args)
    finally:
        sys.setprofile(None)
    stays: list[tuple[str, str, list[str]]] = []  # (room, module, functions)
    for module, function in calls:
        room = _room(module, loaded)
        if not stays or stays[-1][0] != room:
            stays.append((room, module, []))
        stays[-1][2].append(f"{module.split('.', 1)[1]}.{function}")
    floors = _floors()
    levels = [floors.get(module, 0) for _, module, _ in stays]
    summary = {
        "exit": rc,
        f"functions receiving the {'loaded model' if loaded else 'path'}": len(calls),
        "stays": len(stays),
        "climbs back up": sum(b > a for a, b in zip(levels, levels[1:], strict=False)),
        "entries per room": dict(Counter(room for room, _, _ in stays)),
    }
    print(json.dumps(summary), file=sys.stderr)
    for (room, _, functions), level in zip(stays, levels, strict=True):
        print(f"  floor {level:2d} {room}: {' > '.join(functions)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
