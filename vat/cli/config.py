"""`vat config [NAME]`: the configs that ship inside the package (vat/configs/*.yaml), which
`-c NAME` accepts wherever a path is expected (a file of that name wins)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from vat.cli.common import Parser
from vat.errors import OptionError, VatError, did_you_mean, nearest, run_cli


def packaged_configs() -> dict[str, Path]:
    """{name: path}, names relative to vat/configs without .yaml, e.g. "demo", "sweeps/sweep"."""
    root = Path(str(resources.files("vat") / "configs"))
    return {p.relative_to(root).with_suffix("").as_posix(): p for p in sorted(root.rglob("*.yaml"))}


def find_config(name: str) -> Path | None:
    """The packaged config called `name` ("demo", "demo.yaml", "configs/demo.yaml"), or None."""
    key = name.removesuffix(".yaml").removeprefix("configs/")
    return packaged_configs().get(key)


def resolve_config_args(argv: Sequence[str], kind: str | None = "train") -> list[str]:
    """`-c`/`--config` values that are no file replaced by the packaged config of that name."""
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
        # jsonargparse also takes a config's text as the -c value (`-c '{"seed_everything": 1}'`)
        elif kind is not None and not (
            "\n" in value.strip() or ": " in value or value.lstrip().startswith(("{", "["))
        ):
            existing(value, kind, flag)
    return out


def existing(value: str, kind: str, flag: str = "-c") -> str:
    """`value` if it is a file (or link), else an error naming the nearest packaged config."""
    if Path(value).exists() or Path(value).is_symlink():
        return value
    names = [n for n in packaged_configs() if n.startswith("sweeps/") == (kind == "sweep")]
    # a sweep may be named without its folder: "sweep" is nearest to sweeps/sweep
    spellings = {**{n.rsplit("/", 1)[-1]: n for n in names}, **{n: n for n in names}}
    key = value.removesuffix(".yaml").removeprefix("configs/")
    near = nearest(key, list(spellings))
    hint = f" (did you mean {spellings[near]}?)" if near else ""
    parent = Path(value).parent
    if not hint and str(parent) != "." and parent.is_dir():
        beside = [str(p) for p in sorted(parent.glob("*.y*ml"))[:200]]
        hint = did_you_mean(value, beside)
    listed = ", ".join(names) or "none"
    raise OptionError(
        flag,
        f"{value} is no file and no packaged config{hint}; the packaged {kind} configs: "
        f"{listed} (vat config shows them)",
    )


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
        description="List the packaged configs, or print one (vat config demo > my.yaml).",
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
            f"no packaged config {args.name!r}{did_you_mean(args.name, list(configs))}; "
            f"expected one of {', '.join(configs)} (see vat config)"
        )
    if args.path:
        print(path)
    else:
        sys.stdout.write(path.read_text(encoding="utf-8"))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
