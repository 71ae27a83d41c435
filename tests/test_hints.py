"""Hints a user can act on, each from the command line with the line it prints: an option
that exists, the nearest real name, a note instead of silence, a path's folder named, and a
device setting that says what it does."""

from __future__ import annotations

import os
import subprocess

import pytest
import torch
from conftest import ROOT
from helpers import train_env, vat_python

from vat.cli import main as vat


def _vat(argv: list[str], capsys) -> tuple[int, list[str], str]:
    """`vat ARGV` in-process: exit code, stderr lines, stdout."""
    try:
        code = vat(argv)
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, [ln for ln in cap.err.strip().splitlines() if ln.strip()], cap.out


SHIPPED = "demo-wordnet-d64"
QUICK_SCORE = ["--samples", "2", "--diversity-samples", "0", "--prior-samples", "0"]


@pytest.fixture
def latin1(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"A man plays a guitar.\ncaf\xe9 au lait\nThe cat sat on the mat.\n")
    return path


def test_score_names_an_option_it_has_for_bytes_that_are_not_utf8(latin1, capsys):
    code, err, _ = _vat(["score", "--model", SHIPPED, str(latin1), *QUICK_SCORE], capsys)
    assert code == 2
    assert err[-1] == (
        f"error: {latin1}:2: bytes that are not UTF-8 (--on-bad-bytes skip skips such lines)"
    )
    code, err, out = _vat(
        ["score", "--model", SHIPPED, str(latin1), *QUICK_SCORE, "--on-bad-bytes", "skip",
         "--no-representation"],
        capsys,
    )  # fmt: skip
    assert code == 0, err[-3:]
    # the one warning every reader gives (training's and explore's too)
    assert f"warning: {latin1}: skipped 1 line with bytes that are not UTF-8" in err
    assert ": 2 sentences," in out.splitlines()[0]  # the two UTF-8 lines were scored


def test_score_says_what_its_perplexity_is(tmp_path, capsys):
    text = tmp_path / "two.txt"
    text.write_text("A man plays a guitar.\nThe cat sat on the mat.\n")
    code, err, out = _vat(
        ["score", "--model", SHIPPED, str(text), *QUICK_SCORE, "--no-representation"], capsys
    )
    assert code == 0, err[-3:]
    assert (
        "note: PPL bounds the likelihood of a model with a latent per token and includes what "
        "those latents cost (the rate, KL above): it is not comparable to a language model's "
        "perplexity"
    ) in out.splitlines()


def test_a_shipped_name_near_miss_names_the_shipped_model_before_a_local_folder(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "demo-export").mkdir()
    (tmp_path / "demo-export" / "config.json").write_text("{}")  # an exported folder's look
    monkeypatch.chdir(tmp_path)
    code, err, _ = _vat(["generate", "reconstruct", "--model", "demo-wordnet", "Hi."], capsys)
    assert code == 2
    assert err[-1].startswith(
        f"error: --model: demo-wordnet does not exist (did you mean the shipped model {SHIPPED}?)"
    )
    code, err, _ = _vat(["generate", "reconstruct", "--model", "demo-exprt", "Hi."], capsys)
    assert "(did you mean demo-export?)" in err[-1]  # the folder, where it is the nearer


@pytest.mark.parametrize("content", ["", "\n  \n\n"], ids=["empty", "blank lines"])
def test_generate_from_an_input_without_sentences_says_so(tmp_path, content, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text(content)
    code, err, out = _vat(
        ["generate", "reconstruct", "--model", SHIPPED, "--input", str(empty)], capsys
    )
    assert code == 2 and out == ""
    assert err[-1] == (
        f"error: --input {empty} holds no sentence (no non-empty line): nothing to decode"
    )


def test_a_config_run_from_another_folder_names_where_its_paths_are_read(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    code, err, _ = _vat(["train", "-c", "demo", "--run_dir", str(run)], capsys)
    assert code == 2
    assert err[-1] == (
        f"error: data.train_files data/demo_en.txt.gz: not found; a config's relative paths are "
        f"read from the folder vat runs in ({tmp_path}), not from the config's folder; it is in "
        f"{ROOT}: run there, or give it as {ROOT / 'data' / 'demo_en.txt.gz'}"
    )
    assert not run.exists()  # refused before anything was written
    code, err, _ = _vat(
        ["train", "-c", "demo", "--run_dir", str(run), "--data.train_files",
         f"[{ROOT / 'data' / 'demo_en.txt.gz'}]", "--data.val_files",
         f"[{ROOT / 'data' / 'demo_val.txt'}]"],
        capsys,
    )  # fmt: skip
    assert code == 2
    assert err[-1].startswith(
        "error: GeometryMetrics: probe_file data/demo_val.txt: not found; a config's relative "
    )


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["--trainer.max_step", "5"], "unrecognized arguments: --trainer.max_step 5 "
         "(did you mean --trainer.max_steps?)"),
        (["--model.arch.d_modl=32"], "unrecognized arguments: --model.arch.d_modl=32 "
         "(did you mean --model.arch.d_model?)"),
    ],
)  # fmt: skip
def test_a_mistyped_option_gets_the_nearest_real_one(argv, hint, capsys):
    code, err, _ = _vat(["train", "-c", "demo", *argv], capsys)
    assert code == 2 and err[-1] == f"error: {hint}"


def test_a_mistyped_config_key_gets_the_nearest_real_one(tmp_path, capsys):
    typo = tmp_path / "typo.yaml"
    typo.write_text("trainer:\n  max_step: 5\n")
    code, err, _ = _vat(["train", "-c", "demo", "-c", str(typo)], capsys)
    assert code == 2 and err[-1] == (
        "error: Subcommand 'fit' does not accept option 'trainer.max_step' "
        "(did you mean trainer.max_steps?)"
    )


def test_a_mistyped_command_gets_the_nearest_real_one(capsys):
    code, err, _ = _vat(["trian"], capsys)
    assert code == 2 and err[-1].startswith(
        "error: unknown command 'trian' (did you mean train?); expected one of train, "
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_a_gpu_asked_for_on_a_machine_without_one_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    code, err, _ = _vat(
        ["train", "-c", "demo", "--trainer.accelerator", "gpu", "--run_dir", str(run)], capsys
    )
    assert code == 2
    assert err[-1].startswith(
        f"error: --trainer.accelerator gpu: no GPU is visible to torch {torch.__version__} "
    )
    assert err[-1].endswith(
        "use --trainer.accelerator cpu, or auto to take a GPU when there is one"
    )
    assert not run.exists()


def test_several_cpu_processes_say_what_they_do(tmp_path, monkeypatch, capsys):
    """`--trainer.devices 2` on the CPU starts two processes: said before anything runs (the
    run is stopped here by a missing file, checked right after)."""
    monkeypatch.chdir(tmp_path)
    code, err, _ = _vat(
        ["train", "-c", "demo", "--trainer.accelerator", "cpu", "--trainer.devices", "2"], capsys
    )
    assert code == 2  # data/demo_en.txt.gz is not in tmp_path
    assert (
        "vat: --trainer.devices 2 on the CPU runs 2 training processes (DDP over gloo) that "
        f"share this machine's {os.cpu_count()} cores and split every batch; on one machine "
        "that is rarely faster than one process"
    ) in err


@pytest.mark.slow
def test_training_data_that_is_not_utf8_is_one_warning_line(tmp_path):
    """Python's default shows a warning as `/path/vat/data/corpus.py:147: UserWarning: ...`
    and the source line under it; vat's own warnings are one line. What a fresh interpreter
    prints is the subject (in-process, pytest takes the warnings): this is also the run of
    `python -m vat train fit ARGS` (= `vat train ARGS`) in a fresh interpreter, exit code 0."""
    train = tmp_path / "train.txt"
    lines = [f"sentence number {i} of the corpus ." for i in range(40)]
    train.write_bytes(
        ("\n".join(lines[:5]) + "\ncaf\xe9\n" + "\n".join(lines[5:])).encode("latin-1")
    )
    env = {k: v for k, v in train_env().items() if k != "PYTHONWARNINGS"}
    r = subprocess.run(
        [vat_python(), "-m", "vat", "train", "fit", "-c", "tests/assets/tiny.yaml",
         "--data.train_files", f"[{train}]", "--run_dir", str(tmp_path / "run"),
         "--data.cache_dir", str(tmp_path / "cache"), "--trainer.max_steps", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert (
        f"warning: {train}: skipped 1 line with bytes that are not UTF-8" in r.stderr.splitlines()
    )
    assert "UserWarning" not in r.stderr and "rank_zero_warn(" not in r.stderr
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 1  # `fit` trained the run
