"""A failure from outside vat is one line naming the cause and the way out. Here:
torch.compile on the CPU without a working C++ compiler (inductor's real error, produced by
pointing it at a compiler that does not exist)."""

from __future__ import annotations

import pytest

from vat.cli.outside_failures import outside_failure


@pytest.fixture(scope="module")
def no_compiler_error():
    """The real inductor error (about 15 s on the 2-core VM when dynamo is cold)."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    old = inductor_config.cpp.cxx
    inductor_config.cpp.cxx = (None, "/nonexistent/g++")
    torch._dynamo.reset()
    try:
        f = torch.compile(lambda x: (x * 3).cos())
        with pytest.raises(Exception) as e:
            f(torch.randn(4))
    finally:
        inductor_config.cpp.cxx = old
        torch._dynamo.reset()
    return e.value


@pytest.mark.slow
def test_a_missing_cxx_compiler_is_one_line_with_the_way_out(no_compiler_error, capsys):
    from vat.cli.train import _run

    msg = outside_failure(no_compiler_error)
    assert msg is not None and "--model.compile false" in str(msg)

    def fit(_):
        raise no_compiler_error

    assert _run(fit, []) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: model.compile: torch.compile found no")


def test_other_errors_are_not_taken_for_an_outside_failure():
    assert outside_failure(RuntimeError("CUDA out of memory")) is None
    assert outside_failure(BrokenPipeError(32, "Broken pipe")) is None  # vat's own output


@pytest.mark.slow
def test_a_dead_ddp_peer_is_one_line_and_the_run_can_resume(tmp_path):
    """2-process CPU DDP (gloo); rank 1 is SIGKILLed at step 2. Rank 0's next collective
    fails: before, a raw gloo traceback ("Connection reset by peer") and exit 1."""
    from helpers import DDP_TWO_CPU, fit_args, train_subprocess

    run = tmp_path / "run"
    kill = [
        "--trainer.callbacks+=crash_callbacks.KillRankAtStep",
        "--trainer.callbacks.rank",
        "1",
        "--trainer.callbacks.step",
        "2",
    ]
    args = fit_args(run, tmp_path / "cache", *DDP_TWO_CPU, "--trainer.max_steps", "6", *kill)
    r = train_subprocess(args, timeout=300)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1, r.stderr[-3000:]
    assert (
        errors[0].startswith("error: a DDP peer process died") and "--ckpt_path last" in errors[0]
    )
    assert "Traceback" not in r.stderr
    assert (run / "checkpoints" / "last.ckpt").is_file()  # what the way out resumes from
