"""`vat geometry`: vat checkpoints, a local Hugging Face
encoder, bad input, progress."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vat.cli.geometry import main
from vat.geometry.metrics import geometry_report

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def probe(tmp_path, tiny_sentences) -> Path:
    p = tmp_path / "probe.txt"
    p.write_text("\n".join(tiny_sentences) + "\n")
    return p


def cli(argv, capsys) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_vat_checkpoint(tmp_path, tiny_ckpt, probe, capsys):
    from vat.features import token_vectors
    from vat.geometry.probes import load_probe_sentences
    from vat.share.resolve import load_model

    out = tmp_path / "geo.json"
    rc, stdout, err = cli(
        ["--ckpt", tiny_ckpt, "--probe", probe, "--min-count", 3, "--output", out], capsys
    )
    assert rc == 0, err
    assert "anisotropy" in stdout and "active units" in stdout and "wrote" in stdout
    result = json.loads(out.read_text())
    loaded = load_model(tiny_ckpt)
    tv = token_vectors(loaded.model, loaded.tokenizer, load_probe_sentences(probe))
    expected = geometry_report(
        tv.vectors, tv.token_ids, tv.sentence_ids, tv.logvar, 0.4, min_count=3
    )
    m = result["metrics"]
    for key in (
        "anisotropy",
        "self_similarity",
        "intra_sentence_similarity",
        "isoscore",
        "effective_rank",
        "active_units",
        "kl_per_token",
        "mutual_information",
    ):
        assert m[key] == pytest.approx(getattr(expected, key), rel=1e-9), key
    assert len(m["kl_per_dim"]) == 32 and m["min_count"] == 3
    assert result["model"] == {
        "kind": "vat",
        "name": "tiny.ckpt",
        "path": str(tiny_ckpt),
        "prior_std": 0.4,
    }
    assert result["probe"]["num_sentences"] == 16
    per_type = result["self_similarity_by_type"]
    assert len(per_type) == expected.num_types and all(t["count"] >= 3 for t in per_type)
    assert [t["self_similarity"] for t in per_type] == sorted(
        t["self_similarity"] for t in per_type
    )
    assert not list(tmp_path.glob(".geo.json.tmp-*"))


def test_output_is_never_overwritten_without_flag(tmp_path, tiny_ckpt, probe, capsys):
    out = tmp_path / "geo.json"
    out.write_text("keep me")
    rc, _, err = cli(
        ["--ckpt", tiny_ckpt, "--probe", probe, "--min-count", 3, "--output", out], capsys
    )
    assert (
        rc == 2
        and err.strip() == f"error: --output {out} already exists; pass --overwrite to replace it"
    )
    assert out.read_text() == "keep me"
    rc, _, err = cli(
        ["--ckpt", tiny_ckpt, "--probe", probe, "--min-count", 3, "--output", out, "--overwrite"],
        capsys,
    )
    assert rc == 0, err
    assert "anisotropy" in json.loads(out.read_text())["metrics"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--ckpt", "{tmp}/missing.ckpt"], "does not exist"),
        (["--ckpt", "{ckpt}", "--layer", "2"], "--layer applies to --hf-model only"),
        (
            ["--ckpt", "{ckpt}", "--min-count", "1000"],
            "no word type occurs at least min_count=1000",
        ),
        (["--ckpt", "{ckpt}", "--min-count", "1"], "--min-count: must be at least 2, got 1"),
        (["--ckpt", "{ckpt}", "--probe", "{tmp}/nope.txt"], "No such file or directory"),
        (["--ckpt", "{ckpt}", "--data-dir", "{tmp}"], "no STS12 files"),
        (["--hf-model", "{tmp}/no_model"], "directory does not exist"),
        (["--hf-model", "{tmp}"], "no config.json"),
    ],
)
def test_bad_input_is_one_line(tmp_path, tiny_ckpt, probe, capsys, args, message):
    argv = [a.format(tmp=tmp_path, ckpt=tiny_ckpt) for a in args]
    if "--probe" not in argv and "--data-dir" not in argv:
        argv += ["--probe", str(probe)]
    rc, _, err = cli(argv + ["--output", str(tmp_path / "g.json"), "--no-progress"], capsys)
    assert rc == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "g.json").exists()


def test_python_m_vat_geometry(tmp_path, tiny_ckpt, probe, capsys):
    """`python -m vat geometry` in a process of its own (once: the exit code is the process's);
    the second run, in-process, never overwrites the first's --output."""
    out = tmp_path / "g.json"
    args = [
        "geometry",
        "--ckpt",
        str(tiny_ckpt),
        "--probe",
        str(probe),
        "--min-count",
        "3",
        "--output",
        str(out),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "vat", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["model"]["kind"] == "vat"
    # A second run never overwrites the first's --output: one line, exit 2.
    from vat.cli import main as vat_main

    written = out.read_bytes()
    assert vat_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --output") and err.count("\n") == 1 and "Traceback" not in err
    assert out.read_bytes() == written


def test_minilm_layers(tmp_path, probe, capsys, minilm_dir):
    model_dir = minilm_dir
    out = tmp_path / "minilm.json"
    rc, stdout, err = cli(
        [
            "--hf-model",
            model_dir,
            "--layer",
            3,
            "--probe",
            probe,
            "--min-count",
            2,
            "--output",
            out,
        ],
        capsys,
    )
    assert rc == 0, err
    result = json.loads(out.read_text())
    assert result["model"]["kind"] == "huggingface" and result["model"]["layer"] == 3
    assert result["model"]["num_layers"] == 6
    m = result["metrics"]
    assert m["dim"] == 384 and m["active_units"] is None and m["kl_per_token"] is None
    assert -1 < m["anisotropy"] < 1 and m["self_similarity"] > m["anisotropy"]
    assert "active units" not in stdout
    # WordPiece tokens carry their text in the per-type table.
    assert any(t["token"] == "the" for t in result["self_similarity_by_type"])
    rc, _, err = cli(
        ["--hf-model", model_dir, "--layer", 7, "--probe", probe, "--output", tmp_path / "x.json"],
        capsys,
    )
    assert rc == 2 and "error: --layer: " in err and "layers 0..6" in err and "got 7" in err


@pytest.mark.parametrize(
    "argv,message",
    [
        ([], "one of the arguments --model/--ckpt --hf-model is required"),
        (["--ckpt", "a", "--hf-model", "b", "--output", "g.json"], "not allowed with"),
    ],
)
def test_usage_errors_are_one_line(capsys, argv, message):
    rc, _, err = cli(argv, capsys)
    assert rc == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_progress_bar_and_quiet(tmp_path, tiny_ckpt, probe, capsys):
    args = ["--ckpt", tiny_ckpt, "--probe", probe, "--min-count", 3, "--batch-size", 4]
    rc, _, err = cli([*args, "--output", tmp_path / "a.json"], capsys)
    assert rc == 0 and "encoding" in err and "/4 " in err  # 16 probe sentences, 4 batches
    rc, stdout, err = cli([*args, "--output", tmp_path / "b.json", "--quiet"], capsys)
    assert rc == 0 and err == "" and "anisotropy" in stdout and "wrote" not in stdout
