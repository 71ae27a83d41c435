"""The lean figures of docs/ARCHITECTURE.md ("How big vat is"): lines of Python in vat/, the
check/refuse/verify functions and their lines, and `raise` statements per 1,000 lines.

    python scripts/lean_counts.py [FOLDER]      (default: vat/ of this checkout)

A check function is one whose name says it guards (check, refuse, verify, validate, require,
ensure, guard): the issue that asked for these figures counted them that way.
"""

from __future__ import annotations

import ast
import re
import sys
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


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "vat"
    for key, value in counts(root).items():
        print(f"{key}: {value:,}")
