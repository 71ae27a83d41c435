"""docs/FAULTS.md names, in each row of its tables whose last column is "test", the tests
that hold vat to that row: every one of them must exist, so that merging, moving or renaming
a test cannot leave a row pointing at nothing."""

from __future__ import annotations

import re

from conftest import ROOT

REF = re.compile(r"(?:tests/)?(test_\w+\.py)?(?:::(\w+))?")


def test_every_row_names_tests_that_exist():
    text = (ROOT / "docs" / "FAULTS.md").read_text()
    problems, rows, header = [], 0, None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if line.startswith("|---") or header[-1] != "test":
            continue
        rows += 1
        named, current = 0, None
        for ref in re.findall(r"`([^`]*)`", cells[-1]):
            file, name = REF.match(ref).groups()
            current = file or current  # `::name` continues the file named before it
            if not (file or name):
                continue
            named += 1
            path = ROOT / "tests" / (current or "?")
            if not path.is_file():
                problems.append(f"{ref}: no such test file ({line[:50]}...)")
            elif name and not re.search(rf"^\s*def {name}\(", path.read_text(), re.M):
                problems.append(f"{current}::{name}: no such test")
        if not named:
            problems.append(f"names no test: {line[:70]}...")
    assert rows > 300  # the tables were found
    assert not problems, "\n".join(problems)
