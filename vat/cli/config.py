"""`vat config [NAME]`: the configs that ship inside the package (vat/configs/*.yaml).

They are package data, so they are there after `pip install vat` too; `vat train -c NAME`
accepts a packaged name wherever a path is expected (a file of that name wins).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from vat.cli.common import Parser
from vat.errors import VatError, run_cli


def config_dir() -> Path:
    """Where the packaged configs live (inside the installed `vat` package)."""
    return Path(str(resources.files("vat") / "configs"))


def packaged_configs() -> dict[str, Path]:
    """{name: path}, names relative to vat/configs without .yaml, e.g. "demo", "sweeps/sweep"."""
    root = config_dir()
    return {p.relative_to(root).with_suffix("").as_posix(): p for p in sorted(root.rglob("*.yaml"))}


def find_config(name: str) -> Path | None:
    """The packaged config called `name` ("demo", "demo.yaml", "configs/demo.yaml"), or None."""
    key = name.removesuffix(".yaml").removeprefix("configs/")
    return packaged_configs().get(key)


def resolve_config_args(argv: Sequence[str]) -> list[str]:
    """Replace the value of each `-c` / `--config` that is not a file by the packaged config
    of that name, so that `vat train -c demo` works from any folder."""
    out = list(argv)
    for i, arg in enumerate(out):
        flag, eq, value = arg.partition("=")
        if flag not in ("-c", "--config"):
            continue
        if eq:
            target = i
        elif i + 1 < len(out):
            target, value = i + 1, out[i + 1]
        else:
            continue
        packaged = None if Path(value).exists() else find_config(value)
        if packaged is not None:
            out[target] = f"{flag}={packaged}" if eq else str(packaged)
        elif Path(value).exists() or Path(value).is_symlink():
            from vat.io import regular_file

            regular_file(value, flag)  # a FIFO would block the parser, /dev/zero fill memory
    return out


def _summary(path: Path) -> str:
    """The first comment line of a config: what it is for."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()[:90]
        if line.strip():
            break
    return ""


def _main(argv: list[str]) -> int:
    p = Parser(
        prog="vat config",
        description="List the packaged configs, or print one "
        "(then edit a copy: vat config demo > my.yaml; vat train -c my.yaml).",
    )
    p.add_argument("name", nargs="?", help="config to print, e.g. demo or sweeps/sweep")
    p.add_argument("--path", action="store_true", help="print the file's path instead")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    args = p.parse_args(argv)
    configs = packaged_configs()
    if args.name is None:
        width = max(map(len, configs), default=0)
        for name, path in configs.items():
            print(f"{name:<{width}}  {_summary(path)}".rstrip())
        return 0
    path = find_config(args.name)
    if path is None:
        raise VatError(
            f"no packaged config {args.name!r}; expected one of {', '.join(configs)} "
            "(see vat config)"
        )
    if args.path:
        print(path)
    else:
        sys.stdout.write(path.read_text(encoding="utf-8"))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
