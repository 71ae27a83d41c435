"""Loading checkpoints: weights-only whatever the environment says, broken `vat` metadata and
non-finite weights refused in one line by every CLI, honest error messages."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from helpers import evaluate_args, fit_args, geometry_args, train_main

from vat.share.checkpoint import CheckpointError, atomic_torch_save, read_checkpoint
from vat.share.resolve import load_model


class _Payload:
    """Pickles as a call to os.makedirs(marker): loading it must never create the marker."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


@pytest.fixture
def evil_ckpt(tmp_path, tiny_ckpt):
    ckpt = torch.load(tiny_ckpt, weights_only=True)
    marker = tmp_path / "payload-ran"
    ckpt["extra"] = _Payload(str(marker))
    path = tmp_path / "evil.ckpt"
    torch.save(ckpt, path)
    return path, marker


def test_pickled_payload_is_refused_even_when_torch_is_told_otherwise(evil_ckpt, monkeypatch):
    from vat.train.system import VATSystem

    path, marker = evil_ckpt
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    for load in (read_checkpoint, load_model, VATSystem.load_from_checkpoint):
        with pytest.raises(CheckpointError) as e:
            load(path)
        msg = str(e.value)
        assert str(path) in msg and "pickled Python objects" in msg and "os.makedirs" in msg
        assert "weights_only" not in msg and "\n" not in msg  # no advice to turn the protection off
    assert not marker.exists()
    with pytest.raises(Exception, match="weights only"):
        VATSystem.load_from_checkpoint(path, weights_only=False)
    assert not marker.exists()


def test_train_resume_from_a_pickled_payload_is_refused(evil_ckpt, tmp_path, monkeypatch, capsys):
    path, marker = evil_ckpt
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    code, err = train_main(fit_args(tmp_path / "run", None, "--ckpt_path", str(path)), capsys)
    assert code == 2 and "pickled Python objects" in err[-1] and not marker.exists()


def _broken(tmp_path, tiny_ckpt, case):
    ckpt = torch.load(tiny_ckpt, weights_only=True)
    meta = ckpt["vat"]
    if case == "missing tokenizer":
        del meta["tokenizer"]
        needle = "lacks 'tokenizer'"
    elif case == "prior_std a string":
        meta["prior_std"] = "0.4"
        needle = "'vat.prior_std' is a str"
    elif case == "prior_std nan":
        meta["prior_std"] = float("nan")
        needle = "'vat.prior_std' must be a positive number"
    elif case == "garbage tokenizer":
        meta["tokenizer"] = '{"not": "a tokenizer"'
        needle = "'vat.tokenizer' is not a valid tokenizer"
    elif case == "unknown config key":
        meta["model_config"]["d_modle"] = 3
        needle = "bad 'vat.model_config'"
    elif case == "config of wrong type":
        meta["model_config"]["d_model"] = "wide"
        needle = "bad 'vat.model_config'"
    elif case == "metadata not a dict":
        ckpt["vat"] = ["format_version", 1]
        needle = "metadata is a list"
    elif case == "non-finite weights":
        key = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point())
        ckpt["state_dict"][key] = ckpt["state_dict"][key].clone().fill_(float("nan"))
        needle = "non-finite weights"
    elif case == "int32 weights":
        key = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point())
        ckpt["state_dict"][key] = ckpt["state_dict"][key].to(torch.int32)
        needle = f"{key.removeprefix('model.')} is int32, not floating point"
    path = tmp_path / f"{case.replace(' ', '_')}.ckpt"
    torch.save(ckpt, path)
    return path, needle


CASES = [
    "missing tokenizer",
    "prior_std a string",
    "prior_std nan",
    "garbage tokenizer",
    "unknown config key",
    "config of wrong type",
    "metadata not a dict",
    "non-finite weights",
    "int32 weights",
]


@pytest.mark.parametrize("case", CASES)
def test_load_model_refuses_broken_metadata_in_one_line(tmp_path, tiny_ckpt, case):
    path, needle = _broken(tmp_path, tiny_ckpt, case)
    with pytest.raises(CheckpointError) as e:
        load_model(path)
    assert needle in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["missing tokenizer", "garbage tokenizer", "non-finite weights"])
def test_every_cli_refuses_a_broken_checkpoint_in_one_line(
    tmp_path, tiny_ckpt, senteval_dir, case, capsys
):
    from vat.cli.evaluate import main as evaluate
    from vat.cli.generate import main as generate
    from vat.cli.geometry import _main as geometry
    from vat.errors import run_cli

    path, needle = _broken(tmp_path, tiny_ckpt, case)
    probe = tmp_path / "probe.txt"
    probe.write_text("a sentence\nanother one\n")
    calls = {
        "generate": lambda: generate(["reconstruct", "--ckpt", str(path), "a sentence"]),
        "evaluate": lambda: evaluate(evaluate_args(path, senteval_dir, tmp_path / "results.json")),
        "geometry": lambda: run_cli(
            geometry, geometry_args(path, probe, tmp_path / "geometry.json")
        ),
    }
    for name, call in calls.items():
        code = call()
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and needle in err[0] and str(path) in err[0], (name, err)
    assert not (tmp_path / "results.json").exists() and not (tmp_path / "geometry.json").exists()


def test_full_disk_while_saving_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    from vat.errors import VatError

    path = tmp_path / "last.ckpt"
    atomic_torch_save({"w": torch.zeros(3)}, path)
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        f.write(b"PK partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(VatError) as e:
        atomic_torch_save({"w": torch.ones(3)}, path)
    assert str(e.value).startswith(f"cannot write {path}: no space left on device")
    monkeypatch.setattr(torch, "save", real_save)
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.zeros(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_corrupt_checkpoint_error_gives_no_advice_to_disable_weights_only(tmp_path):
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"\x00\x01 not a checkpoint at all" * 100)
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(garbage)
    msg = str(e.value)
    assert msg.startswith(f"checkpoint {garbage} is truncated, corrupt or not a torch checkpoint (")
    assert "weights_only" not in msg and "Re-running" not in msg and "\n" not in msg


def test_a_raw_pickle_as_a_checkpoint_is_vats_one_line_only(tmp_path, capsys):
    """A plain pickle (protocol 4) named .ckpt: before, torch's weights-only unpickler warned
    in two lines ("Detected pickle protocol 4 in the checkpoint ...") above vat's line."""
    import pickle
    import warnings

    from helpers import one_line_error

    raw = tmp_path / "raw.ckpt"
    raw.write_bytes(pickle.dumps({"state_dict": {}}, protocol=4))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        err = one_line_error(capsys, ["generate", "reconstruct", "--model", str(raw), "a b"])
    assert err.startswith(f"error: checkpoint {raw} is truncated, corrupt or not a torch"), err
    assert [str(w.message) for w in said] == []


def test_training_loads_every_checkpoint_weights_only_and_says_nothing_else(
    tmp_path, monkeypatch, capsys
):
    """A fit, an error that saves on_exception.ckpt, a resume from it and a validate: every
    torch.load that vat or Lightning makes is weights-only, and Lightning's "`weights_only`
    was not set, defaulting to `False`" (about what it saves) never shows."""
    import logging
    import sys

    sys.path.insert(0, str(Path(__file__).parent))  # crash_callbacks, for the config
    loads: list[object] = []
    real_load = torch.load

    def recording_load(*args, **kwargs):
        loads.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("lightning.pytorch").addHandler(handler)
    run, cache = tmp_path / "run", tmp_path / "cache"
    raise_at_2 = ["--trainer.callbacks+=crash_callbacks.RaiseAtStep", "--trainer.callbacks.step=2"]
    try:
        with pytest.raises(RuntimeError, match="a failure at step 2"):
            train_main(fit_args(run, cache, "--trainer.max_steps", "3", *raise_at_2), capsys)
        assert (run / "checkpoints" / "on_exception.ckpt").is_file()
        code, err = train_main(
            fit_args(run, cache, "--trainer.max_steps", "3", "--ckpt_path", "last"), capsys
        )
        assert code == 0, err[-3:]
        assert any("on_exception.ckpt, saved where an error stopped training" in ln for ln in err)
        validate = ["validate", *fit_args(run, cache, "--ckpt_path", "last")[1:]]
        code, err = train_main(validate, capsys)
        assert code == 0, err[-3:]
    finally:
        logging.getLogger("lightning.pytorch").removeHandler(handler)
    assert len(loads) >= 2 and all(w is True for w in loads), loads
    assert not [m for m in said if "weights_only" in m]
