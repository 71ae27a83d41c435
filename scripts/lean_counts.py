"""The lean figures of docs/ARCHITECTURE.md ("How big vat is"): lines of Python in vat/, the
check/refuse/verify functions and their lines, and `raise` statements per 1,000 lines; with
`--to-first-step`, what a reader crosses from `vat train` to the first `training_step`.

    python scripts/lean_counts.py [FOLDER]      (default: vat/ of this checkout)
    python scripts/lean_counts.py --to-first-step

A check function is one whose name says it guards (check, refuse, verify, validate, require,
ensure, guard): the issue that asked for these figures counted them that way.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import tempfile
from pathlib import Path

GUARD = re.compile(r"^_?(check|refuse|verify|validate|require|ensure|guard)(_|$)")


def counts(folder: Path) -> dict[str, float]:
    lines = raises = guards = guard_lines = 0
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines += text.count("\n")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Raise):
                raises += 1
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and GUARD.match(
                node.name
            ):
                guards += 1
                guard_lines += node.end_lineno - node.lineno + 1
    return {
        "lines": lines,
        "check functions": guards,
        "their lines": guard_lines,
        "raise": raises,
        "raise per 1,000 lines": round(1000 * raises / lines, 1),
    }


def to_first_step() -> dict[str, int]:
    """The files of vat/ and the lines of the functions of vat/ that run from `vat train`'s
    entry to the first `VATSystem.training_step` (`vat train -c tests/assets/tiny.yaml`, one
    step, in this process): the code a reader follows to see how training starts."""
    root = Path(__file__).resolve().parents[1]
    package = str(root / "vat") + os.sep
    seen: dict[tuple[str, int], int] = {}
    stop = []

    def profile(frame, event, arg) -> None:
        code = frame.f_code
        if event != "call" or stop or not code.co_filename.startswith(package):
            return
        if code.co_name == "training_step":
            stop.append(code)
        lines = [n for _, _, n in code.co_lines() if n is not None]
        seen[(code.co_filename, code.co_firstlineno)] = (
            max(lines, default=0) - min(lines, default=0) + 1
        )

    os.chdir(root)
    sys.path.insert(0, str(root))  # this checkout's vat, whatever is installed
    from vat.cli.train import vat_train

    with tempfile.TemporaryDirectory() as run:
        argv = [
            "-c",
            "tests/assets/tiny.yaml",
            "--run_dir",
            f"{run}/run",
            "--trainer.max_steps",
            "1",
        ]
        sys.setprofile(profile)
        try:
            code = vat_train([*argv, "--data.cache_dir", f"{run}/cache", "--quiet"])
        finally:
            sys.setprofile(None)
    assert code == 0 and stop, f"vat train exited {code} before its first training_step"
    return {
        "files": len({f for f, _ in seen}),
        "functions": len(seen),
        "their lines": sum(seen.values()),
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--to-first-step"]:
        found = to_first_step()
    else:
        found = counts(
            Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "vat"
        )
    for key, value in found.items():
        print(f"{key}: {value:,}")
