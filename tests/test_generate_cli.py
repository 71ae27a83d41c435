"""`vat generate`: every command in-process through `vat.cli.main` (what vat does, without an
interpreter start-up per case), the bad-input paths, and one `python -m vat generate` in a
subprocess, where the process itself decodes its arguments."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vat.cli import main as vat_main
from vat.cli.generate import main

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--max-len", "6"]  # random weights never say </s>: keep every decode short


def run(capsys, *args: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """`vat generate ARGS` in-process (as `python -m vat generate` runs it: vat.cli.main),
    STDIN as its standard input: exit code, stdout, stderr."""
    if stdin is not None:
        stream = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
        monkeypatch.setattr(sys, "stdin", stream)
    rc = vat_main(["generate", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def lines(text: str) -> list[str]:
    return text.split("\n")[:-1] if text else []  # keep empty lines, drop the final newline's


@pytest.fixture()
def input_file(tmp_path) -> Path:
    p = tmp_path / "in.txt"
    p.write_text(
        "The cat sat on the mat.\n\nTwo dogs run through the snow.\n   \nHe bought fresh bread.\n"
    )
    return p


def test_reconstruct_input_file_one_line_per_input_line(tiny_ckpt, input_file, capsys):
    rc, out, err = run(
        capsys,
        "reconstruct", "--ckpt", str(tiny_ckpt), "--input", str(input_file), "--beam", "3", *FAST,
    )  # fmt: skip
    assert rc == 0, err
    out = lines(out)
    assert len(out) == 5  # blank lines 2 and 4 give empty output lines
    assert out[1] == "" and out[3] == "" and all(out[i] for i in (0, 2, 4))
    assert "skipped 2 empty input line" in err


def test_sample_json(tiny_ckpt, capsys):
    rc, out, err = run(
        capsys,
        "sample",
        "--ckpt",
        str(tiny_ckpt),
        "The cat sat.",
        "Two dogs run.",
        "-n",
        "3",
        "--tau",
        "0.5",
        "--json",
        *FAST,
    )
    assert rc == 0, err
    recs = [json.loads(x) for x in lines(out)]
    assert [x["input"] for x in recs] == ["The cat sat.", "Two dogs run."]
    assert all(len(x["samples"]) == 3 and x["tau"] == 0.5 for x in recs)


def test_resample_token_text(tiny_ckpt, capsys):
    rc, out, err = run(
        capsys,
        "resample-token",
        "--ckpt",
        str(tiny_ckpt),
        "--positions",
        "0,1",
        "The cat sat.",
        "-n",
        "2",
        *FAST,
    )
    assert rc == 0, err
    assert len(lines(out)) == 2  # n lines per input


def test_interpolate_stdin_pairs(tiny_ckpt, capsys, monkeypatch):
    rc, out, err = run(
        capsys,
        "interpolate",
        "--ckpt",
        str(tiny_ckpt),
        "--input",
        "-",
        "--alphas",
        "0,0.5,1",
        "--slerp",
        *FAST,
        stdin="The cat sat.\tTwo dogs run through the snow.\nA b.\tC d e.\n",
        monkeypatch=monkeypatch,
    )
    assert rc == 0, err
    assert len(lines(out)) == 6  # 3 alphas x 2 pairs


def test_prior_json_lengths_from_histogram(tiny_ckpt, capsys):
    rc, out, err = run(capsys, "prior", "--ckpt", str(tiny_ckpt), "-n", "4", "--json", *FAST)
    assert rc == 0, err
    recs = [json.loads(x) for x in lines(out)]
    assert len(recs) == 4 and all(
        2 <= x["length"] <= 7 for x in recs
    )  # tiny_ckpt's histogram support


def test_bad_checkpoint_is_one_line_exit_2(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"PK\x03\x04 this is not a checkpoint")
    rc, out, err = run(capsys, "reconstruct", "--ckpt", str(corrupt), "hello")
    assert rc == 2 and out == ""
    assert err.startswith("error:") and len(lines(err)) == 1 and "Traceback" not in err


# -- in process: bad input, options, JSON layout -------------------------------------------------


def _main(capsys, *args: str) -> tuple[int, list[str], str]:
    rc = main(list(args))
    cap = capsys.readouterr()
    return rc, lines(cap.out), cap.err


def test_missing_and_non_vat_checkpoints(tmp_path, capsys):
    rc, out, err = _main(capsys, "prior", "--ckpt", str(tmp_path / "nope.ckpt"))
    assert (
        rc == 2
        and out == []
        and err.startswith("error:")
        and "does not exist" in err
        and len(lines(err)) == 1
    )
    other = tmp_path / "other.ckpt"
    torch.save(
        {"state_dict": {}, "epoch": 3}, other
    )  # a Lightning-like checkpoint without vat metadata
    rc, _, err = _main(capsys, "prior", "--ckpt", str(other))
    assert rc == 2 and "not a vat checkpoint" in err and len(lines(err)) == 1


def test_json_reconstruct_keeps_line_count(tiny_ckpt, input_file, capsys):
    rc, out, _ = _main(
        capsys, "reconstruct", "--ckpt", str(tiny_ckpt), "--input", str(input_file), "--json", *FAST
    )
    assert rc == 0 and len(out) == 5
    recs = [json.loads(x) for x in out]
    assert recs[1] == {"input": "", "skipped": True}
    assert recs[0]["input"] == "The cat sat on the mat." and isinstance(recs[0]["output"], str)


def test_long_sentence_warns_and_still_prints_one_line(tiny_ckpt, capsys):
    long = " ".join(["the cat sat"] * 40)
    rc, out, err = _main(capsys, "reconstruct", "--ckpt", str(tiny_ckpt), long, "short one", *FAST)
    assert rc == 0 and len(out) == 2
    assert "warning: argument 1 has" in err and "truncated" in err


def test_bleu_command_prints_figures(tiny_ckpt, input_file, capsys):
    rc, out, _ = _main(
        capsys,
        "bleu",
        "--ckpt",
        str(tiny_ckpt),
        "--input",
        str(input_file),
        "--limit",
        "2",
        "--json",
        *FAST,
    )
    rec = json.loads(out[0])
    assert rc == 0 and rec["n"] == 2 and 0 <= rec["bleu"] <= 100 and rec["decoding"] == "greedy"
    rc, out, _ = _main(
        capsys, "bleu", "--ckpt", str(tiny_ckpt), "--input", str(input_file), "--beam", "2", *FAST
    )
    assert rc == 0 and out[0].startswith("BLEU ") and "beam 2" in out[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["reconstruct"], "no input"),
        (["interpolate", "only one"], "exactly two"),
        (["reconstruct", "x", "--beam", "3", "--sampling"], "exclude each other"),
        (["resample-token", "a b", "--positions", "9"], "out of range"),
        (["prior", "--length", "999"], "--length"),
        (["reconstruct", "--input", "/no/such/file.txt"], "no such file"),
        # NaN and infinities, refused as argparse reads the option
        (["interpolate", "A b.", "C d.", "--alphas", "0,nan,1"], "--alphas: expected comma"),
        (["interpolate", "A b.", "C d.", "--alphas", "inf"], "--alphas: expected comma"),
        (["sample", "A b.", "--sampling", "--temperature", "nan"], "--temperature: expected a fi"),
        (["sample", "A b.", "--tau=-inf"], "--tau: expected a finite number"),
        (["sample", "A b.", "--tau=-1"], "--tau: must be >= 0, got -1"),
    ],
)
def test_bad_options_are_one_line_errors(tiny_ckpt, capsys, args, message):
    rc, out, err = _main(capsys, args[0], "--ckpt", str(tiny_ckpt), *args[1:], *FAST)
    assert rc == 2 and out == [] and len(lines(err)) == 1 and message in err


def test_list_options_are_comma_separated(tiny_ckpt, capsys):
    rc, out, _ = _main(
        capsys, "interpolate", "--ckpt", str(tiny_ckpt), "--alphas", "0,1", "A b.", "C d e.", *FAST
    )
    assert rc == 0 and len(out) == 2
    # A usage error is one line too (no usage block), exit status 2.
    rc, out, err = _main(
        capsys, "resample-token", "--ckpt", str(tiny_ckpt), "--positions", "x", "A b."
    )
    assert rc == 2 and out == [] and len(lines(err)) == 1 and "comma-separated integers" in err


def test_interpolate_file_needs_tab_separated_pairs(tiny_ckpt, tmp_path, capsys):
    p = tmp_path / "pairs.txt"
    p.write_text("The cat sat.\tTwo dogs run.\n\nno tab here\n")
    rc, _, err = _main(capsys, "interpolate", "--ckpt", str(tiny_ckpt), "--input", str(p), *FAST)
    assert rc == 2 and "line 3" in err and "tab" in err


# -- input lines, encodings, numbers, Ctrl-C ------------------------------------------------


def test_only_newline_ends_an_input_line(tiny_ckpt, tmp_path, capsys):
    # str.splitlines() would split each of these five lines again (9 lines in all).
    text = "a\fb\n" + "c\u2028d\n" + "e\x85f\n" + "g\x1dh\r\n" + "i j\n"
    p = tmp_path / "odd.txt"
    p.write_bytes(text.encode("utf-8"))
    rc, out, _ = _main(
        capsys,
        "reconstruct",
        "--ckpt",
        str(tiny_ckpt),
        "--input",
        str(p),
        "--json",
        "--no-progress",
        *FAST,
    )
    assert rc == 0 and len(out) == 5
    assert [json.loads(x)["input"] for x in out] == ["a\fb", "c\u2028d", "e\x85f", "g\x1dh", "i j"]


def test_invalid_utf8_on_stdin_is_one_line_error(tiny_ckpt, monkeypatch, capsys):
    import io

    stdin = io.TextIOWrapper(io.BytesIO(b"fine line\nbad \xff byte\n"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    rc, out, err = _main(capsys, "reconstruct", "--ckpt", str(tiny_ckpt), "--input", "-", *FAST)
    assert rc == 2 and out == [] and len(lines(err)) == 1
    assert "error: stdin:2: bytes that are not UTF-8 (expected UTF-8 text)" in err


@pytest.mark.slow
def test_invalid_utf8_argument_is_one_line_error(tiny_ckpt):
    """The one `python -m vat generate` process: its arguments are bytes the interpreter
    decodes (a latin-1 byte becomes a surrogate), and the exit code is the process's."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = [
        sys.executable.encode(),
        b"-m",
        b"vat",
        b"generate",
        b"reconstruct",
        b"--ckpt",
        str(tiny_ckpt).encode(),
        b"caf\xe9 latte",
    ]  # latin-1, not UTF-8
    r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, timeout=120)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2 and r.stdout == b"" and len(lines(err)) == 1
    assert "argument" in err and "not valid UTF-8" in err and "Traceback" not in err


def test_ctrl_c_is_one_line_exit_130(tiny_ckpt, monkeypatch, capsys):
    from vat.generate.generator import VATGenerator

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(VATGenerator, "reconstruct_hypotheses", interrupted)
    rc, out, err = _main(capsys, "reconstruct", "--ckpt", str(tiny_ckpt), "A b.", *FAST)
    assert rc == 130 and out == [] and err == "error: interrupted\n"


# -- progress on stderr, --quiet ------------------------------------------------------------


def test_progress_bar_for_input_files_and_quiet(tiny_ckpt, input_file, capsys):
    rc, out, err = _main(
        capsys, "reconstruct", "--ckpt", str(tiny_ckpt), "--input", str(input_file), *FAST
    )
    assert rc == 0 and len(out) == 5 and "decoding" in err and "/3 " in err  # 3 sentences
    rc, out, err = _main(
        capsys,
        "reconstruct",
        "--ckpt",
        str(tiny_ckpt),
        "--input",
        str(input_file),
        "--quiet",
        *FAST,
    )
    assert rc == 0 and len(out) == 5 and err == ""  # no bar, no "skipped" note


def test_output_file_is_written_atomically_and_never_overwritten(
    tiny_ckpt, input_file, tmp_path, capsys
):
    out = tmp_path / "out.txt"
    rc, stdout, err = _main(
        capsys,
        "reconstruct",
        "--ckpt",
        str(tiny_ckpt),
        "--input",
        str(input_file),
        "--output",
        str(out),
        "--no-progress",
        *FAST,
    )
    assert rc == 0 and stdout == [] and f"wrote {out}" in err
    assert len(lines(out.read_text())) == 5 and not list(tmp_path.glob(".out.txt.tmp-*"))
    out.write_text("keep me")
    rc, _, err = _main(
        capsys, "reconstruct", "--ckpt", str(tiny_ckpt), "A b.", "--output", str(out), *FAST
    )
    assert rc == 2 and "already exists" in err and out.read_text() == "keep me"


def test_bleu_long_over_scores_long_and_short_lines_apart(tiny_ckpt, tmp_path, capsys):
    """--long-over N splits the lines at N subwords; each part's BLEU is the BLEU of that part
    scored alone (lines a model truncates are reported apart)."""
    from vat.share.resolve import load_model

    lines = ["the cat sat", "a dog", " ".join(["the cat sat on the mat"] * 3), "he ran far away"]
    n_sub = [len(ids) for ids in load_model(tiny_ckpt).tokenizer.encode_batch(lines)]
    cut = sorted(n_sub)[1]  # two lines at or under the cut, two over it
    (tmp_path / "all.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "long.txt").write_text("\n".join(t for t, k in zip(lines, n_sub) if k > cut))
    (tmp_path / "short.txt").write_text("\n".join(t for t, k in zip(lines, n_sub) if k <= cut))

    def bleu(name: str, *extra: str) -> dict:
        args = ("bleu", "--ckpt", str(tiny_ckpt), "--input", str(tmp_path / name), "--json")
        rc, out, _ = _main(capsys, *args, *extra, *FAST)
        assert rc == 0
        return json.loads(out[0])

    rec = bleu("all.txt", "--long-over", str(cut))
    assert rec["long"]["n"] == 2 and rec["short"]["n"] == 2 and rec["n"] == 4
    assert rec["long"]["bleu"] == pytest.approx(bleu("long.txt")["bleu"])
    assert rec["short"]["bleu"] == pytest.approx(bleu("short.txt")["bleu"])
    rc, _, err = _main(capsys, "bleu", "--ckpt", str(tiny_ckpt), "--input",
                       str(tmp_path / "all.txt"), "--long-over", "0", *FAST)  # fmt: skip
    assert rc == 2 and err.count("\n") == 1 and "--long-over" in err
