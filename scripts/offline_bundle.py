"""The offline bundle: everything a bare GPU node needs to run bench/gpu_suite.sh.

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
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "bundle.json"
MANIFEST_LIMIT = 4 << 20
"""The most bytes read of a bundle.json (one lists a few dozen files in kilobytes)."""
MAX_BYTES = 60 * 2**20
DEFAULT_PACKAGES = (
    "datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 jsonargparse==4.53.0 "
    "docstring-parser==0.18.0 typeshed-client==2.14.0"
)
"""What a bare GPU node without internet may lack (no datasets, no jsonargparse): the
wheels of these, and of what they need, travel in the bundle."""
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


def data_files(data_dir: Path, patterns: list[str]) -> list[tuple[Path, Path]]:
    """(source, path under data/) of every file the suite reads, found before anything is
    written: a missing one stops the build with the bundle as it was."""
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(str(data_dir / pattern)))
        if not matches:
            raise BundleError(
                f"--data-dir {data_dir}: {pattern} is missing (set VAT_DATA_DIR or --data-dir)"
            )
        for m in map(Path, matches):
            for src in sorted(m.rglob("*")) if m.is_dir() else [m]:
                if src.is_file():
                    files.append((src, src.relative_to(data_dir)))
    return files


def check_data_targets(dest: Path, files: list[tuple[Path, Path]], ours: set[str]) -> None:
    """Before anything is written: every folder on the way to a data file is a real folder
    (or absent), and every file the build would replace is one the earlier bundle.json lists
    (a user's file at that path is theirs, never overwritten)."""
    for _, rel in files:
        target = dest / rel
        for parent in reversed(target.relative_to(dest).parents[:-1]):
            check_folder(dest / parent, "DIR")
        if (target.exists() or target.is_symlink()) and str(rel) not in ours:
            raise BundleError(
                f"{target} is not one of this bundle's data files ({MANIFEST} does not list "
                "it); move it away or choose a new folder"
            )
        if target.is_dir():
            raise BundleError(f"{target} is a folder where the bundle puts a data file; "
                              "move it away or choose a new folder")  # fmt: skip


def replace_file(src: Path, target: Path) -> None:
    """A copy under a fresh temporary name beside `target`, renamed over it: a link at
    `target` is replaced, never written through, and no other file is touched."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_data(dest: Path, files: list[tuple[Path, Path]]) -> list[dict]:
    out = []
    for src, rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_file(src, target)
        out.append({"path": str(rel), "bytes": target.stat().st_size})
    return out


def suite_data_patterns() -> list[str]:
    """The files the GPU suite reads (its own list, bench/gpu_suite/plan.py, so the two never
    disagree)."""
    if str(ROOT) not in sys.path:  # the checkout: bench.gpu_suite and vat, nothing installed
        sys.path.insert(0, str(ROOT))
    from bench.gpu_suite.plan import data_patterns

    return data_patterns()


def check_folder(path: Path, what: str) -> None:
    """A folder the bundle writes into: absent, or a real folder; never a symbolic link (the
    bundle would write through it into someone else's files) or a link loop."""
    if path.is_symlink():
        target = (
            "a symbolic link loop" if not path.exists() else f"a symbolic link to {path.resolve()}"
        )
        raise BundleError(
            f"{what} {path} is {target}; the bundle never writes through a link: "
            "choose a new folder"
        )
    if path.exists() and not path.is_dir():
        raise BundleError(f"{what} {path} exists and is not a folder; choose a new folder")


def earlier_manifest(out: Path) -> dict:
    """The bundle.json of an earlier bundle in `out` ({} for a new folder): what this script
    wrote there, and so all it may replace."""
    if not out.exists() or not any(out.iterdir()):
        return {}
    if not (out / MANIFEST).is_file():
        raise BundleError(f"DIR {out} exists and is not an offline bundle; choose a new folder")
    return check_manifest(out / MANIFEST)


PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?([=<>!~]=?[^\s;]+)?")
"""A requirement as --packages takes it (NAME, NAME==VER): never a pip option or a file."""


def build(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    check_folder(out, "DIR")
    packages = args.packages.split()
    for spec in packages:
        if not PACKAGE.fullmatch(spec):
            raise BundleError(f"--packages: {spec!r} is not a package (NAME==VER)")
    platforms = args.platform or list(DEFAULT_PLATFORMS)
    earlier = earlier_manifest(out)
    for sub in ("wheels", "data"):
        check_folder(out / sub, "DIR")
    files: list[tuple[Path, Path]] = []
    if not args.no_data:
        data_dir = Path(
            args.data_dir or os.environ.get("VAT_DATA_DIR") or ROOT.parent / "shared" / "data"
        )
        files = data_files(data_dir.resolve(), suite_data_patterns())
        check_data_targets(out / "data", files, {f["path"] for f in earlier.get("data", [])})
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        wheels = replace_wheels(out, earlier, packages, args.python, platforms)
    except BaseException:
        if created:  # a folder this call made, holding nothing of anyone's: gone again
            shutil.rmtree(out, ignore_errors=True)
        raise
    data = copy_data(out / "data", files)
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
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{MANIFEST}.")
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600: the mode of the bundle's other files
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, out / MANIFEST)  # a link there is replaced, never written through
    if total > MAX_BYTES:
        raise BundleError(f"bundle {out} is {total / 2**20:.1f} MiB, over the 60 MiB limit")
    print(
        f"wrote {out}: {len(wheels)} wheels for Python {args.python}, {len(data)} data files, "
        f"{total / 2**20:.1f} MiB. On the node: scripts/offline_bundle.sh --install {out}"
    )
    return 0


def replace_wheels(
    out: Path, earlier: dict, packages: list[str], python: str, platforms: list[str]
) -> list[dict]:
    """Download `packages` into out/wheels/, replacing only the wheels the earlier manifest
    lists; the manifest entries of what was downloaded."""
    wheels_dir = out / "wheels"
    ours = {w["file"] for w in earlier.get("wheels", [])}
    # Download into a folder of our own first: a wheel of the same name already in wheels/
    # (the user's) would otherwise be taken for the download (pip reuses it).
    staging = Path(tempfile.mkdtemp(dir=out, prefix=".wheels-"))
    try:
        if packages:
            download_wheels(packages, python, platforms, staging)
        new = sorted(staging.glob("*.whl"))
        foreign = [
            w.name
            for w in new
            if ((wheels_dir / w.name).exists() or (wheels_dir / w.name).is_symlink())
            and w.name not in ours
        ]
        if foreign:
            raise BundleError(
                f"{wheels_dir / foreign[0]} is not one of this bundle's wheels ({MANIFEST} does "
                "not list it); move it away or choose a new folder"
            )
        wheels_dir.mkdir(exist_ok=True)
        for name in ours:  # an earlier bundle's wheels: only those its manifest lists
            old = wheels_dir / name
            if old.is_file() or old.is_symlink():
                old.unlink()  # a link itself, never its target
        for w in new:
            os.replace(w, wheels_dir / w.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [
        {
            "file": w.name,
            "sha256": sha256(wheels_dir / w.name),
            "bytes": (wheels_dir / w.name).stat().st_size,
            "imports": import_names(wheels_dir / w.name),
        }
        for w in new
    ]


# -- installing (standard library and pip only) --------------------------------------------
def check_manifest(mpath: Path) -> dict:
    """bundle.json, checked field by field before anything uses it: its file names stay
    inside the bundle and its import names are module names (they are run as `import NAME`)."""

    def bad(field: str, expected: str) -> BundleError:
        return BundleError(f"{mpath}: '{field}' must be {expected}; rebuild the bundle")

    try:
        with open(mpath, "rb") as f:  # a manifest is kilobytes: never read a huge file whole
            raw = f.read(MANIFEST_LIMIT + 1)
        if len(raw) > MANIFEST_LIMIT:
            raise BundleError(
                f"{mpath} is over {MANIFEST_LIMIT >> 20} MiB, not a bundle manifest; rebuild "
                "the bundle"
            )
        m = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise BundleError(f"{mpath} is not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(m, dict):
        raise BundleError(f"{mpath} is a JSON {type(m).__name__}, not a bundle manifest")
    if not isinstance(m.get("python"), str) or not PYTHON_VERSION.fullmatch(m["python"]):
        raise bad("python", "a Python version such as 3.12")
    for key in ("wheels", "data"):
        if not isinstance(m.get(key), list) or not all(isinstance(x, dict) for x in m[key]):
            raise bad(key, "a list of objects")
    for i, w in enumerate(m["wheels"]):
        name = w.get("file")
        if not isinstance(name, str) or not name.endswith(".whl") or Path(name).name != name:
            raise bad(f"wheels[{i}].file", "a wheel's file name (no folder)")
        if not isinstance(w.get("sha256"), str) or len(w["sha256"]) != 64:
            raise bad(f"wheels[{i}].sha256", "a SHA-256 in hex")
        imports = w.get("imports")
        if not isinstance(imports, list) or not all(
            isinstance(x, str) and all(p.isidentifier() for p in x.split(".")) for x in imports
        ):
            raise bad(f"wheels[{i}].imports", "a list of module names")
    for i, f in enumerate(m["data"]):
        rel = f.get("path")
        if (
            not isinstance(rel, str)
            or not rel
            or Path(rel).is_absolute()
            or ".." in Path(rel).parts
        ):
            raise bad(f"data[{i}].path", "a path inside the bundle's data/")
        size = f.get("bytes")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad(f"data[{i}].bytes", "a size in bytes")
    return m


def install(args: argparse.Namespace) -> int:
    bundle = Path(args.dir)
    if bundle.is_symlink() and not bundle.exists():
        raise BundleError(f"--install {bundle} is a symbolic link loop or a dangling link")
    mpath = bundle / MANIFEST
    if not mpath.is_file():
        raise BundleError(f"--install {bundle}: no {MANIFEST} (not an offline bundle)")
    manifest = check_manifest(mpath)
    for sub in ("wheels", "data"):  # read through a link is fine; a loop reads nothing
        if (bundle / sub).is_symlink() and not (bundle / sub).exists():
            raise BundleError(f"--install {bundle}: {sub}/ is a symbolic link loop or a "
                              "dangling link; rebuild the bundle")  # fmt: skip
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


PYTHON_VERSION = re.compile(r"3\.\d{1,2}")


def python_version(text: str) -> str:
    """--python: the node's CPython version, MAJOR.MINOR (pip download --python-version)."""
    if not PYTHON_VERSION.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a Python version such as 3.12, got {text!r}")
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/offline_bundle.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", metavar="DIR", help="the bundle folder")
    p.add_argument("--install", action="store_true", help="install from DIR with no index")
    p.add_argument("--target", help="--install: into this folder (pip --target)")
    p.add_argument(
        "--python",
        default="3.12",
        type=python_version,
        help="the node's Python, e.g. 3.12 (default)",
    )
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
