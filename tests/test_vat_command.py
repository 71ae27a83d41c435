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
