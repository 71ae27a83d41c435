"""The bad-input catalogue across the `vat` commands (train, evaluate, generate).

Each case: a one-line `error: ...` naming the path or option, exit code 2, no traceback, no
partial output, and nothing earlier overwritten. Cases already covered next to their
feature: test_train_cli (missing/empty/directory corpus, config typo, unwritable run dir,
too many devices, other tokenizer), test_data (bad bytes, truncated gz, binary, 1 MB line),
test_eval_cli (missing task files, unknown task, bad encoder output, unwritable or existing
output), test_generate_cli (empty/long lines, corrupt or non-vat checkpoints),
test_geometry_cli.
"""

from __future__ import annotations

import gzip

import pytest
import torch
from helpers import evaluate_args, fit_args, train_main


def _corrupt_checkpoints(tmp_path, tiny_ckpt):
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(tiny_ckpt.read_bytes()[:2000])
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "epoch": 0}, other)
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"\x00\x01 not a checkpoint at all" * 100)
    return {
        "truncated": (truncated, "truncated, corrupt"),
        "other kind": (other, "not a vat checkpoint"),
        "garbage": (garbage, "truncated, corrupt"),
        "directory": (tmp_path, "is a directory"),
        "missing": (tmp_path / "nope.ckpt", "does not exist"),
    }


CKPT_CASES = ["truncated", "other kind", "garbage", "directory", "missing"]


@pytest.mark.parametrize("case", CKPT_CASES)
def test_evaluate_bad_checkpoint(tmp_path, tiny_ckpt, senteval_dir, case, capsys):
    from vat.cli.evaluate import main

    path, needle = _corrupt_checkpoints(tmp_path, tiny_ckpt)[case]
    out = tmp_path / "results.json"
    code = main(evaluate_args(path, senteval_dir, out))
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        code == 2
        and len(err) == 1
        and err[0].startswith("error:")
        and needle in err[0]
        and str(path) in err[0]
    )
    assert not out.exists()


@pytest.mark.parametrize("case", CKPT_CASES)
def test_generate_bad_checkpoint(tmp_path, tiny_ckpt, case, capsys):
    from vat.cli.generate import main

    path, needle = _corrupt_checkpoints(tmp_path, tiny_ckpt)[case]
    code = main(["reconstruct", "--ckpt", str(path), "a sentence"])
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0] and cap.out == ""


@pytest.mark.parametrize("case", ["truncated", "other kind", "garbage"])
def test_train_resume_from_bad_checkpoint(tmp_path, tiny_ckpt, case, capsys):
    path, needle = _corrupt_checkpoints(tmp_path, tiny_ckpt)[case]
    code, err = train_main(
        fit_args(tmp_path / "run", tmp_path / "cache", "--ckpt_path", str(path)), capsys
    )
    assert code == 2 and err[-1].startswith("error:") and needle in err[-1]
    assert not list((tmp_path / "run").glob("checkpoints/*.ckpt"))


def test_train_resume_with_other_model_config(tmp_path, capsys):
    run = tmp_path / "run"
    args = fit_args(run, tmp_path / "cache")
    assert train_main(args, capsys)[0] == 0
    before = (run / "checkpoints" / "last.ckpt").read_bytes()
    code, err = train_main(
        [*args, "--model.arch.d_ff", "128", "--trainer.max_steps", "4", "--ckpt_path", "last"],
        capsys,
    )
    assert code == 2 and err[-1].startswith(
        "error: --model.arch.d_ff: a resume cannot change it (64 in"
    )
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == before  # nothing overwritten


@pytest.mark.parametrize("case", ["bad utf-8 (strict)", "binary", "truncated gz"])
def test_train_bad_corpus_bytes(tmp_path, case, capsys):
    path = tmp_path / ("corpus.txt.gz" if case == "truncated gz" else "corpus.txt")
    extra = []
    if case == "bad utf-8 (strict)":
        path.write_bytes(b"a fine line\n\xc3\x28 broken\n")
        extra = ["--data.on_bad_bytes", "error"]
        needle = f"{path}:2: bytes that are not UTF-8"
    elif case == "binary":
        path.write_bytes(bytes(range(256)) * 40)
        needle = "binary file"
    else:
        data = gzip.compress(("\n".join(f"line {i}" for i in range(5000))).encode())
        path.write_bytes(data[: len(data) // 2])
        needle = "truncated or corrupt gzip"
    code, err = train_main(
        fit_args(tmp_path / "run", tmp_path / "cache", "--data.train_files", f"[{path}]", *extra),
        capsys,
    )
    assert code == 2 and err[-1].startswith("error:") and needle in err[-1] and str(path) in err[-1]


@pytest.mark.parametrize("case", ["missing", "directory", "bad utf-8"])
def test_generate_bad_input_file(tmp_path, tiny_ckpt, case, capsys):
    from vat.cli.generate import main

    path = {
        "missing": tmp_path / "nope.txt",
        "directory": tmp_path,
        "bad utf-8": tmp_path / "in.txt",
    }[case]
    if case == "bad utf-8":
        path.write_bytes(b"ok line\n\xff\xfe\n")
    code = main(["reconstruct", "--ckpt", str(tiny_ckpt), "--input", str(path)])
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert (
        code == 2
        and len(err) == 1
        and err[0].startswith("error:")
        and str(path) in err[0]
        and cap.out == ""
    )
