"""A degenerate encoder is said loudly (a warning naming the task and the reason; exit 1 under
--strict), and an exception in a user's --encoder function is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_helpers import write_mini_senteval

from vat.cli.evaluate import main

FAST = ["--preset", "prototyping", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> Path:
    return write_mini_senteval(tmp_path_factory.mktemp("senteval"))


def _encoder(tmp_path: Path, body: str) -> str:
    f = tmp_path / "enc.py"
    f.write_text("import numpy as np\n\ndef encode(sentences):\n" + body)
    return f"{f}:encode"


@pytest.mark.parametrize(
    "body",
    [
        "    return np.ones((len(sentences), 4))\n",
        "    return np.zeros((len(sentences), 4))\n",
    ],
)
def test_constant_vectors_warn_and_fail_under_strict(tmp_path, mini, capsys, body):
    args = [
        "--encoder",
        _encoder(tmp_path, body),
        "--tasks",
        "STSBenchmark",
        "--data-dir",
        str(mini),
    ]
    assert main([*args, *FAST]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    warned = [line for line in err if line.startswith("vat: warning: STSBenchmark")]
    assert len(warned) == 1 and "constant" in warned[0], err
    assert main([*args, *FAST, "--strict"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --strict: degenerate encoder on STSBenchmark"), err


def test_a_working_encoder_gives_no_warning_under_strict(tmp_path, mini, capsys):
    body = "    return np.array([[len(s), s.count('a') + 1.0] for s in sentences])\n"
    args = ["--encoder", _encoder(tmp_path, body), "--tasks", "STSBenchmark"]
    assert main([*args, "--data-dir", str(mini), *FAST, "--strict"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_an_exception_in_the_users_encoder_is_one_line(tmp_path, mini, capsys):
    spec = _encoder(tmp_path, "    raise KeyError('vocab')\n")
    assert main(["--encoder", spec, "--tasks", "STSBenchmark", "--data-dir", str(mini), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --encoder {spec} raised KeyError"), err
    assert "Traceback" not in err[0]
