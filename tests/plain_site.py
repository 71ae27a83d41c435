"""What a plain install (`pip install torch -e .`, no extras) can import, inside the test
environment: a folder of links to the installed distributions vat's own requirements pull
in, and nothing else.

The test environment holds the dev extras (transformers, matplotlib, gradio, ...), and their
presence changes what imports do: Lightning imports some of them when they are installed,
and that once hid a bug that every plain install hit (tests/test_whole_numbers.py). A Python
started with `-S` (no site-packages) and PYTHONPATH = this folder + the checkout imports what a
plain install imports: the same packages at the same versions, and no others. Metadata
(importlib.metadata, which Lightning's availability checks read) comes with the links too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from conftest import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DISTRIBUTION = "variational-auto-transformer"


def plain_requirements(root: str = DISTRIBUTION) -> set[str]:
    """The distributions a plain install of `root` installs: its requirements without its
    own extras, with the extras those requirements name (jsonargparse[signatures]), and
    theirs, recursively (canonical names)."""
    seen: set[tuple[str, str]] = set()
    todo = [(root, "")]
    while todo:
        name, extra = todo.pop()
        name = canonicalize_name(name)
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        dist = _distribution(name)
        if dist is None:
            continue  # an optional platform dependency that is not installed here
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue  # another extra's requirement, or another platform's
            todo += [(req.name, ""), *((req.name, e) for e in req.extras)]
    return {name for name, _ in seen}


def make_plain_site(folder: Path) -> Path:
    """Links in `folder` to every top-level file and folder (modules, packages, .libs,
    .dist-info) of the plain requirements' distributions, except vat's own (the checkout
    goes on PYTHONPATH instead); returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in plain_requirements() - {DISTRIBUTION}:
        dist = _distribution(name)
        if dist is None:
            continue
        base = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue  # scripts in bin/, and start-up hooks a -S interpreter never reads
            link = folder / top
            if not link.exists() and (base / top).exists():
                link.symlink_to(base / top)
    return folder


def plain_env(folder: Path) -> dict[str, str]:
    """The environment of a `-S` interpreter that sees only the plain site and the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(folder)])
    env["PYTHONNOUSERSITE"] = "1"
    return env


def plain_python() -> list[str]:
    """The command line of that interpreter (append `-c CODE` or `-m MODULE ...`)."""
    return [sys.executable, "-S"]


def plain_interpreter() -> tuple[str, dict[str, str]]:
    """A `python` that sees only the plain site and the checkout, and its environment: what
    the tests' vat processes run in (tests/helpers.py). The environment a user's
    `pip install vat` gives, and 2-3 s faster to start a training process than the test
    environment's: with transformers installed, torchmetrics (which Lightning imports)
    imports it too (BENCHMARKS.md, "The test suite").

    A venv without pip or the system site-packages, so that the processes its processes start
    with sys.executable (DDP's second rank, a sweep's points) see the same. Made once per
    machine and set of versions, as torch keeps its inductor cache: in a folder of the
    temporary directory named by the interpreter, the checkout and the plain requirements'
    versions, moved into place whole (two workers that make it at once keep the first)."""
    dists = {n: _distribution(n) for n in plain_requirements() - {DISTRIBUTION}}
    versions = sorted((n, d.version) for n, d in dists.items() if d is not None)
    key = hashlib.sha256(repr((sys.executable, sys.version, str(ROOT), versions)).encode())
    home = Path(tempfile.gettempdir()) / f"vat-tests-plain-{os.getuid()}-{key.hexdigest()[:16]}"
    if not home.is_dir():
        part = Path(tempfile.mkdtemp(prefix=home.name + ".part-", dir=home.parent))
        make_plain_site(part / "site")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(part / "venv")],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        try:
            part.rename(home)
        except OSError:  # another worker's is there: keep it
            shutil.rmtree(part, ignore_errors=True)
    return str(home / "venv" / "bin" / "python"), plain_env(home / "site")


def _distribution(name: str) -> metadata.Distribution | None:
    """The installed distribution `name`, or None."""
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
