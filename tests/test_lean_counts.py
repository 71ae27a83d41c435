"""scripts/lean_counts.py: the figures docs/ARCHITECTURE.md reports, on a folder whose answer
is known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE = """def check_name(x):
    if not x:
        raise ValueError(x)
    return x


class A:
    def _verify(self):
        pass

    def checked(self):
        raise KeyError
"""


def test_lines_check_functions_and_raises_are_counted(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text(CODE)
    (tmp_path / "sub" / "b.py").write_text("def refuse():\n    raise OSError\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lean_counts.py"), str(tmp_path)],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    # 12 + 2 lines; check_name (4 lines), _verify (2) and refuse (2) guard, `checked` does
    # not (a name that starts with "check" but says what was checked); 3 raises in 14 lines
    assert out == [
        "lines: 14",
        "check functions: 3",
        "their lines: 8",
        "raise: 3",
        "raise per 1,000 lines: 214.3",
    ]
