"""The `vat` dispatcher: help, unknown commands, one-line usage errors, config, sweep.
(`vat export` is tested with vat.share.hub, which the sharing work adds.)"""

from __future__ import annotations

import pytest
import yaml

from vat.cli import COMMANDS, command, main
from vat.cli.config import find_config, packaged_configs


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_help_lists_every_command(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and all(f"  {name}" in out for name in COMMANDS)
    assert all(callable(command(name)) for name in COMMANDS)  # each target imports


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "no command given"),
        (["trian"], "unknown command 'trian'"),
        (["export"], "the model to export is required: vat export MODEL DIR"),
        (["config", "demo", "extra"], "unrecognized arguments: extra"),
        (["config", "nope"], "no packaged config 'nope'"),
        (["geometry", "--ckpt", "x.ckpt"], "--model: x.ckpt does not exist"),
    ],
)
def test_errors_are_one_line_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ")
    assert message in err and "usage:" not in err


def test_config_lists_and_prints_packaged_configs(capsys):
    code, out, _ = run(capsys, "config")
    names = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and names == list(packaged_configs()) and "demo" in names
    code, out, _ = run(capsys, "config", "sweeps/sweep")
    assert code == 0 and yaml.safe_load(out) == yaml.safe_load(
        find_config("sweeps/sweep").read_text()
    )


def test_sweep_dispatches_with_packaged_config_names(monkeypatch):
    import vat.cli.sweep

    seen = []
    monkeypatch.setattr(vat.cli.sweep, "_main", lambda argv: seen.append(argv) or 0)
    assert main(["sweep", "-c", "sweeps/sweep", "--jobs", "2"]) == 0
    assert seen == [["-c", str(find_config("sweeps/sweep")), "--jobs", "2"]]


# The commands a user runs to read about vat answer without torch or Lightning (issue: fast
# feedback); each runs in one fresh interpreter, which then must not have imported either.
LIGHT_COMMANDS = [
    ["--help"],
    ["config"],
    ["config", "demo"],
    ["pretrained"],
    ["pretrained", "show", "demo-wordnet-d64"],
    *([name, "--help"] for name in COMMANDS if name != "train"),
    ["generate", "reconstruct", "--help"],
    ["features", "compare", "--help"],
]


def test_help_and_listing_commands_import_neither_torch_nor_lightning():
    import json
    import subprocess
    import sys

    from conftest import ROOT

    code = (
        "import contextlib, io, json, sys\n"
        "from vat.cli import main\n"
        "seen = {}\n"
        f"for argv in {LIGHT_COMMANDS!r}:\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        try:\n"
        "            code = main(argv)\n"
        "        except SystemExit as e:\n"
        "            code = e.code\n"
        "    heavy = sorted(m for m in ('torch', 'lightning') if m in sys.modules)\n"
        "    seen[' '.join(argv)] = [code, heavy, len(out.getvalue())]\n"
        "print(json.dumps(seen))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert set(seen) == {" ".join(a) for a in LIGHT_COMMANDS}
    for argv, (exit_code, heavy, printed) in seen.items():
        assert exit_code in (0, None) and printed > 0, (argv, exit_code)
        assert heavy == [], f"vat {argv} imported {heavy}"
