"""The CPU thread count of `vat train`: one thread on the CPU by default, `--threads N` and
$OMP_NUM_THREADS win, torch's default beside a GPU; said once on stderr. Speed is measured in
bench/bench_threads.py (BENCHMARKS.md "CPU threads"), not here."""

from __future__ import annotations

import pytest
import torch
from helpers import TINY

from vat.cli.train import vat_train
from vat.errors import OptionError, VatError
from vat.runtime import cpu_threads


def test_the_rule_first_match_wins():
    assert cpu_threads(None, None, cuda=False) == (1, "vat's default on the CPU")
    assert cpu_threads(None, "", cuda=False) == (1, "vat's default on the CPU")
    assert cpu_threads(None, None, cuda=True) == (None, "torch's default beside a GPU")
    assert cpu_threads(None, "3", cuda=False) == (3, "$OMP_NUM_THREADS")
    assert cpu_threads(None, "3", cuda=True) == (3, "$OMP_NUM_THREADS")
    assert cpu_threads(4, "3", cuda=True) == (4, "--threads")
    assert cpu_threads(2, None, cuda=False) == (2, "--threads")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_request_names_the_argument(bad):
    with pytest.raises(OptionError) as e:
        cpu_threads(bad, None, cuda=False)
    assert e.value.name == "threads"


@pytest.mark.parametrize("env", ["x", "0", "-2", "1.5"])
def test_a_bad_environment_value_is_named(env):
    with pytest.raises(VatError) as e:
        cpu_threads(None, env, cuda=False)
    assert str(e.value) == f"$OMP_NUM_THREADS {env!r}: expected a whole number >= 1"


@pytest.fixture
def two_threads(monkeypatch):
    """torch on 2 threads as torch chooses by itself on this machine; no $OMP_NUM_THREADS."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


# A start refused at once, after the thread rule ran: no training, and the error stays one line.
REFUSED = ["-c", TINY, "--run_dir", "unused", "--trainer.max_steps", "0"]


def test_vat_train_takes_one_thread_on_the_cpu_and_says_so_when_it_starts(
    two_threads, tmp_path, capsys
):
    assert vat_train(REFUSED) == 2
    assert torch.get_num_threads() == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err  # no thread line before it
    torch.set_num_threads(2)
    assert (
        vat_train(["-c", TINY, "--run_dir", str(tmp_path / "r"), "--trainer.max_steps", "1"]) == 0
    )
    assert torch.get_num_threads() == 1
    assert (
        "vat: training on 1 CPU thread (vat's default on the CPU; --threads N to change)"
        in capsys.readouterr().err.splitlines()
    )


@pytest.mark.parametrize("flag", [["--threads", "2"], ["--threads=2"]])
def test_threads_option_and_environment_win(two_threads, monkeypatch, flag):
    torch.set_num_threads(1)
    assert vat_train([*flag, *REFUSED]) == 2
    assert torch.get_num_threads() == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(1)
    assert vat_train(REFUSED) == 2
    assert torch.get_num_threads() == 2
    torch.set_num_threads(1)
    assert vat_train(["--threads", "3", *REFUSED]) == 2  # the option over the environment
    assert torch.get_num_threads() == 3


def test_the_line_names_the_reason_and_quiet_says_nothing(
    two_threads, monkeypatch, tmp_path, capsys
):
    from vat.cli.train import parse

    args = ["fit", "-c", TINY, "--run_dir", str(tmp_path / "r")]
    assert parse([*args, "--threads", "2"])[1] == "vat: training on 2 CPU threads (--threads)"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert parse(args)[1] == (
        "vat: training on 3 CPU threads ($OMP_NUM_THREADS; --threads N to change)"
    )
    assert vat_train([*args[1:], "--trainer.max_steps", "1", "--quiet"]) == 0
    assert "CPU thread" not in capsys.readouterr().err


def test_bad_values_are_one_line(two_threads, capsys):
    for bad in (["--threads", "0"], ["--threads", "two"], ["--threads"]):
        assert vat_train([*REFUSED, *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --threads"), err
