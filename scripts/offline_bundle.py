"""The offline bundle (issue 22): everything a bare GPU node needs to run bench/gpu_suite.sh.

On a machine with package access (and the shared data):

    scripts/offline_bundle.sh [--python 3.12] [--packages "NAME==VER ..."] DIR

writes into DIR (new, or an earlier bundle) `wheels/` (the packages the node lacks, built
for its Python and platform, no dependencies resolved: name every one), `data/` (the files
the suite reads, copied from $VAT_DATA_DIR, same layout) and `bundle.json` (the manifest:
each wheel's SHA-256 and import names, each data file's size). It stays under 60 MiB.

On the node, with no index:

    scripts/offline_bundle.sh --install DIR [--target SITE]
    export VAT_DATA_DIR=DIR/data

checks every wheel against the manifest, installs them with `pip --no-index --no-deps`
(into SITE with --target, then put SITE on PYTHONPATH), imports each installed package, and
prints the VAT_DATA_DIR line. vat itself runs from the checkout (bench/gpu_suite.sh puts it
on PYTHONPATH): nothing to build. `--install` needs only the standard library and pip.

Errors (a failed download, a missing or altered wheel, another Python, an import that
fails) are one line on stderr with exit code 2; --debug shows the traceback.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "bundle.json"
MAX_BYTES = 60 * 2**20
DEFAULT_PACKAGES = (
    "datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 jsonargparse==4.53.0 "
    "docstring-parser==0.18.0 typeshed-client==2.14.0"
)
"""What the lent node lacked (no datasets, no jsonargparse): shared/GPU_NODE.md's list."""
DEFAULT_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


class BundleError(Exception):
    """A user error: one line, exit code 2."""


# -- building --------------------------------------------------------------------------------
def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def import_names(wheel: Path) -> list[str]:
    """Top-level modules a wheel installs: its top_level.txt, else its RECORD's paths."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        top = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        if top:
            mods = z.read(top[0]).decode().split()
        else:
            mods = sorted(
                {
                    n.split("/")[0].removesuffix(".py")
                    for n in names
                    if not n.split("/")[0].endswith((".dist-info", ".data"))
                    and (n.endswith(".py") or "/" in n)
                }
            )
    return [m for m in mods if m.isidentifier() and not m.startswith("_")] or mods


def download_wheels(packages: list[str], python: str, platforms: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", python, "--implementation", "cp", "--disable-pip-version-check"]
    for p in platforms:
        cmd += ["--platform", p]
    cmd += ["-d", str(dest), *packages]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.startswith("ERROR")]
        raise BundleError(
            f"--packages: pip could not download a wheel for Python {python} "
            f"({lines[0] if lines else f'pip exit {r.returncode}'})"
        )


def copy_data(data_dir: Path, dest: Path, patterns: list[str]) -> list[dict]:
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(str(data_dir / pattern)))
        if not matches:
            raise BundleError(
                f"--data-dir {data_dir}: {pattern} is missing (set VAT_DATA_DIR or --data-dir)"
            )
        for m in map(Path, matches):
            for src in sorted(m.rglob("*")) if m.is_dir() else [m]:
                if not src.is_file():
                    continue
                rel = src.relative_to(data_dir)
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel)
                files.append({"path": str(rel), "bytes": src.stat().st_size})
    return files


def suite_data_patterns() -> list[str]:
    """The files the GPU suite reads (its own list, bench/gpu_suite/plan.py, so the two never
    disagree)."""
    if str(ROOT) not in sys.path:  # the checkout: bench.gpu_suite and vat, nothing installed
        sys.path.insert(0, str(ROOT))
    from bench.gpu_suite.plan import data_patterns

    return data_patterns()


def build(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    if out.exists() and (
        not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())
    ):
        raise BundleError(f"DIR {out} exists and is not an offline bundle; choose a new folder")
    packages = args.packages.split()
    platforms = args.platform or list(DEFAULT_PLATFORMS)
    out.mkdir(parents=True, exist_ok=True)
    wheels_dir = out / "wheels"
    for old in wheels_dir.glob("*.whl"):  # an earlier bundle's wheels (this script wrote them)
        old.unlink()
    if packages:
        download_wheels(packages, args.python, platforms, wheels_dir)
    wheels = [
        {"file": w.name, "sha256": sha256(w), "bytes": w.stat().st_size, "imports": import_names(w)}
        for w in sorted(wheels_dir.glob("*.whl"))
    ]
    data: list[dict] = []
    if not args.no_data:
        data_dir = Path(
            args.data_dir or os.environ.get("VAT_DATA_DIR") or ROOT.parent / "shared" / "data"
        )
        data = copy_data(data_dir.resolve(), out / "data", suite_data_patterns())
    total = sum(w["bytes"] for w in wheels) + sum(f["bytes"] for f in data)
    manifest = {
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": args.python,
        "platforms": platforms,
        "packages": packages,
        "wheels": wheels,
        "data": data,
        "total_bytes": total,
    }
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out / MANIFEST)
    if total > MAX_BYTES:
        raise BundleError(f"bundle {out} is {total / 2**20:.1f} MiB, over the 60 MiB limit")
    print(
        f"wrote {out}: {len(wheels)} wheels for Python {args.python}, {len(data)} data files, "
        f"{total / 2**20:.1f} MiB. On the node: scripts/offline_bundle.sh --install {out}"
    )
    return 0


# -- installing (standard library and pip only) --------------------------------------------
def install(args: argparse.Namespace) -> int:
    bundle = Path(args.dir)
    mpath = bundle / MANIFEST
    if not mpath.is_file():
        raise BundleError(f"--install {bundle}: no {MANIFEST} (not an offline bundle)")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BundleError(f"{mpath} is not valid JSON ({e})") from None
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != here:
        raise BundleError(
            f"--install {bundle}: its wheels are for Python {manifest['python']}, this is "
            f"Python {here} (build one with --python {here})"
        )
    paths = []
    for w in manifest["wheels"]:
        p = bundle / "wheels" / w["file"]
        if not p.is_file():
            raise BundleError(f"{p} is missing (listed in {mpath}); rebuild the bundle")
        if sha256(p) != w["sha256"]:
            raise BundleError(
                f"{p} differs from the one {mpath} lists (SHA-256); rebuild the bundle"
            )
        paths.append(str(p))
    for f in manifest["data"]:
        p = bundle / "data" / f["path"]
        if not p.is_file() or p.stat().st_size != f["bytes"]:
            raise BundleError(
                f"{p} is missing or truncated (listed in {mpath}); rebuild the bundle"
            )
    env = dict(os.environ)
    if paths:
        cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir"]
        cmd += ["--disable-pip-version-check", "--quiet"]
        if args.target:
            cmd += ["--target", args.target, "--upgrade"]
        r = subprocess.run([*cmd, *paths], capture_output=True, text=True)
        if r.returncode != 0:
            lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
            raise BundleError(
                f"pip install --no-index failed: {lines[-1] if lines else r.returncode}"
            )
    if args.target:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.target, env.get("PYTHONPATH")]))
    for w in manifest["wheels"]:
        for mod in w["imports"]:
            r = subprocess.run(
                [sys.executable, "-c", f"import {mod}"], capture_output=True, text=True, env=env
            )
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["?"])[-1]
                raise BundleError(f"{w['file']} is installed but `import {mod}` fails: {last}")
    print(f"installed {len(paths)} wheels from {bundle} (no index); each imports")
    if args.target:
        print(f"export PYTHONPATH={args.target}:$PYTHONPATH")
    if manifest["data"]:
        print(f"export VAT_DATA_DIR={(bundle / 'data').resolve()}")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/offline_bundle.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", metavar="DIR", help="the bundle folder")
    p.add_argument("--install", action="store_true", help="install from DIR with no index")
    p.add_argument("--target", help="--install: into this folder (pip --target)")
    p.add_argument("--python", default="3.12", help="the node's Python, e.g. 3.12 (default)")
    p.add_argument(
        "--platform",
        action="append",
        help="pip --platform tag (repeatable; default manylinux 2_28 ... 1, x86_64)",
    )
    p.add_argument(
        "--packages",
        default=DEFAULT_PACKAGES,
        help=f'wheels to bundle, "NAME==VER ..." (default: "{DEFAULT_PACKAGES}")',
    )
    p.add_argument("--data-dir", help="the shared data (default $VAT_DATA_DIR, ../shared/data)")
    p.add_argument("--no-data", action="store_true", help="wheels only")
    p.add_argument("--debug", action="store_true", help="tracebacks for errors")

    def one_line(message: str):
        raise BundleError(f"{message} (see {p.prog} --help)")

    p.error = one_line  # usage errors are one line too
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        return install(args) if args.install else build(args)
    except BundleError as e:
        if "--debug" in argv:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
