"""`vat evaluate` (vat/cli/evaluate.py): encoders, output file safety,
bad input, fine-tuning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from eval_helpers import write_mini_senteval
from helpers import load_file_module

from vat.cli.evaluate import main
from vat.errors import OptionError
from vat.eval.encoders import callable_encoder, senteval_batcher, vat_encoder
from vat.eval.engine import EvalSettings, evaluate
from vat.eval.tasks.registry import ALL_TASKS
from vat.share.resolve import load_model

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--preset", "prototyping", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> Path:
    return write_mini_senteval(tmp_path_factory.mktemp("senteval"))


def _encoder_file(tmp_path: Path, body: str) -> str:
    f = tmp_path / "enc.py"
    f.write_text("import numpy as np\n" + body)
    return f"{f}:encode"


GOOD = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from eval_helpers import bag_encoder
CALLS = []
def encode(sentences):
    CALLS.extend(sentences)
    return bag_encoder(sentences)
"""


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def run_ckpt(ckpt: Path, data_dir: Path, capsys, *args: str) -> tuple[int, str, str]:
    """`run` on a vat checkpoint with `--data-dir data_dir`, FAST settings and `args`."""
    return run(["--ckpt", str(ckpt), "--data-dir", str(data_dir), *args, *FAST], capsys)


def test_callable_encoder_all_tasks_writes_senteval_layout(tmp_path, mini, capsys):
    out = tmp_path / "res" / "results.json"
    code, stdout, _ = run(
        [
            "--encoder",
            _encoder_file(tmp_path, GOOD),
            "--tasks",
            "all",
            "--data-dir",
            str(mini),
            "--output",
            str(out),
            "--relatedness",
            "both",
            *FAST,
        ],
        capsys,
    )
    assert code == 0
    res = json.loads(out.read_text())
    for t in ALL_TASKS:
        assert t in res or f"{t}-cosine" in res, t
    assert set(res["STS13"]) == {"FNWN", "headlines", "OnWN", "all"}
    assert set(res["STS12"]["all"]["spearman"]) == {"mean", "wmean", "all"}
    assert set(res["STSBenchmark-cosine"]) == {"dev", "test"}
    assert {"devpearson", "pearson", "spearman", "mse"} <= set(res["SICKRelatedness"])
    assert {"devacc", "acc", "f1", "ndev", "ntest"} == set(res["MRPC"])
    assert res["_meta"]["preset"] == "prototyping" and res["_meta"]["classifier"]["kfold"] == 5
    # _scores: one score per requested task under its own name, all in percent
    scores = res["_scores"]
    assert list(scores) == list(ALL_TASKS) and {s["unit"] for s in scores.values()} == {"percent"}
    sts_b = scores["STSBenchmark"]  # the cosine protocol, not "STSBenchmark-cosine"
    assert sts_b["field"] == "STSBenchmark-cosine.test.spearman" and sts_b["split"] == "test"
    assert sts_b["value"] == round(100 * res["STSBenchmark-cosine"]["test"]["spearman"], 4)
    assert scores["STS12"]["value"] == round(100 * res["STS12"]["all"]["spearman"]["mean"], 4)
    assert scores["MR"] == {
        "task": "MR",
        "type": "text-classification",
        "metric": "accuracy",
        "split": "test",
        "value": round(res["MR"]["acc"], 4),
        "unit": "percent",
        "field": "MR.acc",
    }
    assert "Avg." in stdout and "SICK-E" in stdout and "STS16" in stdout
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp files left
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_each_protocol_is_seeded(mini):
    from eval_helpers import bag_encoder

    s = EvalSettings(progress=False, relatedness="both")
    a, _ = evaluate(bag_encoder, "MR,TREC,SST2,STSBenchmark", mini, s)
    b, _ = evaluate(bag_encoder, "MR,TREC,SST2,STSBenchmark", mini, s)
    assert a == b
    c, _ = evaluate(
        bag_encoder,
        "MR,TREC,SST2,STSBenchmark",
        mini,
        EvalSettings(progress=False, seed=5, relatedness="both"),
    )
    assert c != a


def test_full_preset_and_mlp_run(mini):
    from eval_helpers import bag_encoder

    res, _ = evaluate(
        bag_encoder,
        "CR,SST5",
        mini,
        EvalSettings(preset="full", classifier="mlp", nhid=8, progress=False),
    )
    assert 0 <= res["CR"]["acc"] <= 100 and 0 <= res["SST5"]["devacc"] <= 100


def test_existing_output_is_kept_without_overwrite(tmp_path, mini, capsys):
    out = tmp_path / "results.json"
    out.write_text("old")
    args = [
        "--encoder",
        _encoder_file(tmp_path, GOOD),
        "--tasks",
        "STS12",
        "--data-dir",
        str(mini),
        "--output",
        str(out),
        *FAST,
    ]
    code, _, err = run(args, capsys)
    assert (
        code == 2
        and "already exists" in err
        and "--overwrite" in err
        and len(err.strip().splitlines()) == 1
    )
    assert out.read_text() == "old"
    code, _, _ = run([*args, "--overwrite"], capsys)
    assert code == 0 and "STS12" in json.loads(out.read_text())


def test_failed_run_leaves_old_file_and_no_partial(tmp_path, mini, capsys):
    out = tmp_path / "results.json"
    out.write_text("old")
    enc = _encoder_file(
        tmp_path,
        "def encode(s):\n    x = np.ones((len(s), 4))\n    x[0, 0] = np.nan\n    return x\n",
    )
    code, _, err = run(
        [
            "--encoder",
            enc,
            "--tasks",
            "STS12,MR",
            "--data-dir",
            str(mini),
            "--output",
            str(out),
            "--overwrite",
            *FAST,
        ],
        capsys,
    )
    assert code == 2 and "task STS12" in err and "NaN" in err
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [
        "enc.py",
        "results.json",
    ]


@pytest.mark.parametrize(
    "body,needle",
    [
        ("def encode(s):\n    return np.ones((len(s) + 1, 4))\n", "shape ("),
        ("def encode(s):\n    return np.ones(len(s))\n", "expected ("),
        ("def encode(s):\n    return [['a'] * 3 for _ in s]\n", "dtype"),
    ],
)
def test_bad_encoder_output_names_task(tmp_path, mini, capsys, body, needle):
    code, _, err = run(
        [
            "--encoder",
            _encoder_file(tmp_path, body),
            "--tasks",
            "MR",
            "--data-dir",
            str(mini),
            *FAST,
        ],
        capsys,
    )
    assert code == 2 and "task MR" in err and needle in err and len(err.strip().splitlines()) == 1


def test_missing_task_folder_names_path_and_layout(tmp_path, mini, capsys):
    code, _, err = run(
        [
            "--encoder",
            _encoder_file(tmp_path, GOOD),
            "--tasks",
            "SICKEntailment",
            "--data-dir",
            str(tmp_path),
            *FAST,
        ],
        capsys,
    )
    assert (
        code == 2
        and str(tmp_path / "SICK") in err
        and "SICK_{train,trial,test_annotated}.txt" in err
    )


def test_unknown_task_lists_valid_names(tmp_path, mini, capsys):
    code, _, err = run(
        [
            "--encoder",
            _encoder_file(tmp_path, GOOD),
            "--tasks",
            "STS12,Bogus",
            "--data-dir",
            str(mini),
            *FAST,
        ],
        capsys,
    )
    assert code == 2 and "Bogus" in err and "SICKEntailment" in err and "transfer" in err


def test_unwritable_output_dir(tmp_path, mini, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    code, _, err = run(
        [
            "--encoder",
            _encoder_file(tmp_path, GOOD),
            "--tasks",
            "STS12",
            "--data-dir",
            str(mini),
            "--output",
            str(blocker / "results.json"),
            *FAST,
        ],
        capsys,
    )
    assert code == 2 and err.startswith("error: --output") and "cannot write" in err
    assert len(err.strip().splitlines()) == 1


def test_data_dir_from_environment(tmp_path, mini, capsys, monkeypatch):
    monkeypatch.setenv("VAT_SENTEVAL_DIR", str(mini))
    code, stdout, _ = run(
        ["--encoder", _encoder_file(tmp_path, GOOD), "--tasks", "STS12", *FAST], capsys
    )
    assert code == 0 and "STS12" in stdout
    monkeypatch.delenv("VAT_SENTEVAL_DIR")
    monkeypatch.chdir(tmp_path)  # the default, ../shared/data/senteval, does not exist from here
    code, _, err = run(
        ["--encoder", _encoder_file(tmp_path, GOOD), "--tasks", "STS12", *FAST], capsys
    )
    assert code == 2 and "VAT_SENTEVAL_DIR" in err and "shared/data/senteval" in err


def test_usage_errors_are_one_line_and_help_warns_about_encoder_files(capsys):
    code, out, err = run(["--tasks", "STS12"], capsys)  # no encoder given
    assert (
        code == 2 and out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error:")
    )
    assert "usage:" not in err
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "EXECUTED as Python code" in help_text


def test_skip_missing(tmp_path, mini, capsys):
    import shutil

    shutil.copytree(mini / "TREC", tmp_path / "data" / "TREC")
    code, stdout, err = run(
        [
            "--encoder",
            _encoder_file(tmp_path, GOOD),
            "--tasks",
            "TREC,MR",
            "--data-dir",
            str(tmp_path / "data"),
            "--skip-missing",
            *FAST,
        ],
        capsys,
    )
    assert code == 0 and "skipping MR" in err and "TREC" in stdout


def test_empty_sentences_are_encoded_as_a_period(tmp_path, mini):
    """SentEval's example batchers turn an empty sentence into '.'; CR has empty lines."""
    path = _encoder_file(tmp_path, GOOD).rsplit(":", 1)[0]
    mod = load_file_module(path, "enc_mod")
    evaluate(mod.encode, "CR", mini, EvalSettings(progress=False))
    assert "" not in mod.CALLS and "." in mod.CALLS


def test_each_sentence_is_encoded_once(tmp_path, mini):
    calls: list[str] = []

    def enc(s: list[str]) -> np.ndarray:
        calls.extend(s)
        return np.random.default_rng(len(calls)).standard_normal((len(s), 4))

    evaluate(
        enc, "STS12,STS13,MRPC,SICKEntailment,SICKRelatedness", mini, EvalSettings(progress=False)
    )
    assert len(calls) == len(set(calls))


def test_callable_encoder_errors(tmp_path):
    from vat.errors import VatError

    with pytest.raises(VatError, match="does not exist"):
        callable_encoder(str(tmp_path / "nope.py") + ":f")
    with pytest.raises(VatError, match="has no function"):
        callable_encoder(_encoder_file(tmp_path, GOOD).replace(":encode", ":missing"))
    with pytest.raises(VatError, match="path/to/file.py:function"):
        callable_encoder("no_colon.py")


def test_oracle_hashbow_as_encoder_argument(oracle_dir, senteval_dir, tmp_path, capsys):
    """The reference encoder works as --encoder FILE:FUNC on the real STS12 files."""
    expected = json.loads((oracle_dir / "expected.json").read_text())
    out = tmp_path / "r.json"
    code, _, _ = run(
        [
            "--encoder",
            f"{oracle_dir / 'hashbow.py'}:encode",
            "--tasks",
            "STS12",
            "--data-dir",
            str(senteval_dir),
            "--output",
            str(out),
            *FAST,
        ],
        capsys,
    )
    assert code == 0
    got = json.loads(out.read_text())["STS12"]["all"]["spearman"]["wmean"]
    assert got == pytest.approx(expected["STS12"]["all"]["spearman"]["wmean"], abs=1e-4)


@pytest.mark.parametrize("pooling", ["mean", "sum", "start", "precision"])
def test_vat_checkpoint_poolings(tiny_ckpt, tmp_path, mini, capsys, pooling):
    out = tmp_path / f"{pooling}.json"
    code, stdout, _ = run_ckpt(
        tiny_ckpt,
        mini,
        capsys,
        "--pooling",
        pooling,
        "--tasks",
        "STS12,CR,MRPC",
        "--output",
        str(out),
    )
    assert code == 0 and "STS12" in stdout
    res = json.loads(out.read_text())
    assert res["_meta"]["pooling"] == pooling and 0 <= res["CR"]["acc"] <= 100


def test_vat_poolings_differ(tiny_ckpt, tiny_sentences):
    feats = {
        p: vat_encoder(load_model(tiny_ckpt), p)(tiny_sentences[:6])
        for p in ("mean", "sum", "start")
    }
    assert all(f.shape == (6, 32) for f in feats.values())
    assert not np.allclose(feats["mean"], feats["start"]) and not np.allclose(
        feats["mean"], feats["sum"]
    )


def test_vat_bad_pooling(tiny_ckpt, tmp_path, mini, capsys):
    code, _, err = run_ckpt(tiny_ckpt, mini, capsys, "--pooling", "cls", "--tasks", "STS12")
    assert code == 2 and "mean, sum, start" in err


def test_senteval_batcher(tiny_ckpt):
    batcher = senteval_batcher(load_model(tiny_ckpt), "mean")
    out = batcher(None, [["the", "cat", "sat"], [], "a dog ."])
    assert out.shape == (3, 32) and np.isfinite(out).all()
    # an empty token list is encoded as '.', like SentEval's examples do
    np.testing.assert_allclose(out[1], batcher(None, [["."]])[0], atol=1e-6)
    with pytest.raises(OptionError, match="^model: vat_encoder takes a loaded model"):
        senteval_batcher(tiny_ckpt, "mean")  # a path: load it once, then pass the model


def test_finetune_mode(tiny_ckpt, tmp_path, mini, capsys):
    out = tmp_path / "ft.json"
    code, stdout, _ = run_ckpt(
        tiny_ckpt,
        mini,
        capsys,
        "--finetune",
        "--epochs",
        "1",
        "--tasks",
        "CR,MRPC",
        "--output",
        str(out),
    )
    assert code == 0 and "Fine-tuning" in stdout
    res = json.loads(out.read_text())
    assert res["CR"]["ndev"] == 8 and res["CR"]["ntest"] == 8 and res["MRPC"]["ntest"] == 40
    assert res["_meta"]["mode"] == "finetune" and res["CR"]["best_epoch"] == 1


def test_finetune_refuses_sts(tiny_ckpt, mini, capsys):
    code, _, err = run_ckpt(tiny_ckpt, mini, capsys, "--finetune", "--tasks", "STS12")
    assert code == 2 and "fine-tuning covers" in err


def test_hf_model_minilm(tmp_path, mini, capsys, minilm_dir):
    path = minilm_dir
    out = tmp_path / "hf.json"
    code, _, _ = run(
        [
            "--hf-model",
            str(path),
            "--pooling",
            "cls",
            "--tasks",
            "STS12,SST2",
            "--data-dir",
            str(mini),
            "--output",
            str(out),
            *FAST,
        ],
        capsys,
    )
    assert code == 0
    res = json.loads(out.read_text())
    assert res["STS12"]["all"]["spearman"]["mean"] is not None and res["SST2"]["acc"] >= 50


@pytest.mark.slow
def test_evaluate_subprocess(tmp_path, mini, capsys, monkeypatch):
    """`python -m vat evaluate`: one-line error and exit 2 on bad input (the process, once);
    with --debug the error is raised instead (in-process), so Python shows its traceback."""
    args = ["evaluate", "--encoder", "x.py:f", "--tasks", "MR", "--data-dir", str(mini)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-m", "vat", *args], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "error: --encoder file x.py does not exist"
    ]
    from vat.cli import main as vat_main
    from vat.errors import VatError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(VatError, match="x.py does not exist"):
        vat_main([*args, "--debug"])
    assert capsys.readouterr().err == ""  # no one-line message: the traceback instead
