"""What `vat train` shows: one progress bar (steps of max_steps, loss, KL nats/token,
tokens/s), no validation bars or tips, and at the end the checkpoints, the final validation
numbers and the next commands (vat.callbacks.progress, vat.callbacks.summary)."""

from __future__ import annotations

import logging
from pathlib import Path

from conftest import ROOT
from helpers import fit_args, scalars


def test_one_bar_and_the_summary(tmp_path, capsys):
    from vat.cli.train import main

    run = tmp_path / "run"
    assert main(fit_args(run, tmp_path / "cache", "--trainer.enable_progress_bar", "true")) == 0
    out, err = capsys.readouterr()
    # the one bar (on stderr, stdout is for results): steps of max_steps with loss, KL
    # nats/token and tokens/s; nothing else
    assert "training: 100%" in err and "2/2" in err and "step/s" in err
    assert "training:" not in out
    writes = err.replace("\n", "\r").split("\r")
    (final,) = [w for w in writes if "training: 100%" in w]  # the last step: written once
    assert "loss=" in final and "nats/tok" in final and "tok/s=" in final
    for noise in ("Training:", "Validation", "Sanity Checking", "Epoch 0"):
        assert noise not in out + err, noise
    # the summary, with the real paths and numbers
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    lines = out[out.index("vat: 2 steps in") :].splitlines()
    assert lines[1].startswith(f"vat: best checkpoint {best} (val/loss ")
    assert lines[2] == f"vat: last checkpoint {run / 'checkpoints' / 'last.ckpt'}"
    nll = scalars(run)["val/nll"][-1][1]
    assert lines[3].startswith(f"vat: final validation: NLL given z {nll:.4f} nats/token ")
    assert "(reconstruction perplexity " in lines[3] and "), KL " in lines[3]
    assert "BLEU not measured" in lines[3]
    assert lines[4:] == [
        "next:",
        f"  vat evaluate --model {run} --tasks sts",
        f'  vat generate reconstruct --model {run} "A man is playing a guitar."',
        f"  vat export {run} run-model --evaluate STS12,STSBenchmark",
    ]
    assert "hp_metric" not in scalars(run)  # no meaningless -1 in TensorBoard


def test_lightning_tips_are_dropped():
    import vat.cli.train  # noqa: F401 - installs the filter with its warning filters
    from vat.cli.train import _quiet_warnings

    _quiet_warnings()
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord(logger.name, logging.INFO, __file__, 1, msg, None, None)

    assert not logger.filter(record("💡 Tip: For seamless cloud logging, try litlogger"))
    assert logger.filter(record("GPU available: False, used: False"))


def test_the_summary_names_both_checkpoints_as_the_run_was_named(tmp_path, monkeypatch, capsys):
    """`--run_dir runs/demo` gives `runs/demo/checkpoints/...` for the best and the last
    checkpoint alike (Lightning made the last one absolute)."""
    from vat.cli.train import main

    data = f"[{ROOT / 'tests' / 'assets' / 'sentences.txt'}]"  # tiny.yaml's, from the checkout
    monkeypatch.chdir(tmp_path)
    assert main(fit_args(Path("run"), Path("cache"), "--data.train_files", data)) == 0
    out = capsys.readouterr().out.splitlines()
    (best,) = [line for line in out if line.startswith("vat: best checkpoint ")]
    assert best.startswith("vat: best checkpoint run/checkpoints/best-step")
    assert "vat: last checkpoint run/checkpoints/last.ckpt" in out
