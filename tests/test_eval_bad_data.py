"""Bad task data gives a one-line error naming the file, never a silent null, dash or 100%."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from eval_helpers import write_mini_senteval

from vat.cli.evaluate import main
from vat.errors import VatError
from vat.eval.tasks.registry import load_task

ENCODER = f"{Path(__file__).parent / 'eval_helpers.py'}:bag_encoder"
FAST = ["--preset", "prototyping", "--no-progress", "--device", "cpu", "--encoder", ENCODER]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return write_mini_senteval(tmp_path_factory.mktemp("senteval"))


@pytest.fixture
def data(pristine, tmp_path) -> Path:
    """A private copy of the mini SentEval folder, for a test to damage."""
    return Path(shutil.copytree(pristine, tmp_path / "senteval"))


def _one_line_error(argv: list[str], capsys, needle: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    return err


def _rewrite_line(path: Path, lineno: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[lineno - 1] = text
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_sts_gold_nan_names_file_and_line(data, capsys, value):
    gs = data / "STS" / "STS12-en-test" / "STS.gs.MSRvid.txt"
    _rewrite_line(gs, 3, value)
    err = _one_line_error(["--tasks", "STS12", "--data-dir", str(data), *FAST], capsys, str(gs))
    assert "line 3" in err and "finite" in err


@pytest.mark.parametrize("scored", [0, 1])
def test_sts_subset_with_fewer_than_two_scored_pairs(data, capsys, scored):
    """Empty gold lines are unscored pairs; a subset left with 0 or 1 pairs has no correlation."""
    gs = data / "STS" / "STS14-en-test" / "STS.gs.images.txt"
    n = len(gs.read_text().splitlines())
    gs.write_text("".join("2.5\n" if i < scored else "\n" for i in range(n)))
    _one_line_error(
        ["--tasks", "STS14", "--data-dir", str(data), *FAST], capsys, f"{gs}: {scored} scored pair"
    )


def test_sts_constant_gold_is_an_error(data):
    gs = data / "STS" / "STS13-en-test" / "STS.gs.FNWN.txt"
    gs.write_text("3.0\n" * len(gs.read_text().splitlines()))
    with pytest.raises(VatError, match="every gold score is 3"):
        load_task(data, "STS13")


def test_stsb_nan_score_and_empty_split(data, capsys):
    dev = data / "STS" / "STSBenchmark" / "sts-dev.csv"
    cols = dev.read_text().split("\n")[1].split("\t")
    cols[4] = "nan"
    _rewrite_line(dev, 2, "\t".join(cols))
    err = _one_line_error(
        ["--tasks", "STSBenchmark", "--data-dir", str(data), *FAST], capsys, str(dev)
    )
    assert "line 2" in err
    dev.write_text("")
    _one_line_error(
        ["--tasks", "STSBenchmark", "--data-dir", str(data), *FAST], capsys, f"{dev}: 0 scored pair"
    )


@pytest.mark.parametrize(
    "task,rel",
    [("MR", "MR/rt-polarity.neg"), ("SUBJ", "SUBJ/subj.objective"), ("CR", "CR/custrev.pos")],
)
def test_empty_class_file_is_an_error_not_100_percent(data, capsys, task, rel):
    (data / rel).write_text("\n\n" if task == "CR" else "")  # blank lines only count as empty
    _one_line_error(
        ["--tasks", task, "--data-dir", str(data), *FAST], capsys, f"{data / rel}: no sentences"
    )


@pytest.mark.parametrize(
    "task,rel",
    [
        ("SST2", "SST/binary/sentiment-test"),
        ("TREC", "TREC/TREC_10.label"),
        ("MRPC", "MRPC/msr_paraphrase_test.txt"),
    ],
)
def test_empty_split_file_is_an_error(data, capsys, task, rel):
    path = data / rel
    path.write_text(
        path.read_text().split("\n")[0] + "\n" if task == "MRPC" else ""
    )  # MRPC: header only
    _one_line_error(
        ["--tasks", task, "--data-dir", str(data), *FAST], capsys, f"{path}: no examples"
    )


def test_single_class_training_file_is_an_error(data, capsys):
    path = data / "SST" / "binary" / "sentiment-train"
    rows = [r for r in path.read_text().split("\n") if r.endswith("\t1")]
    path.write_text("\n".join(rows) + "\n")
    _one_line_error(
        ["--tasks", "SST2", "--data-dir", str(data), *FAST],
        capsys,
        f"{path}: every example has label 1",
    )


@pytest.mark.parametrize("task,folder", [("MR", "MR"), ("TREC", "TREC")])
def test_too_few_examples_for_the_folds(tmp_path, capsys, task, folder):
    """4 examples a class cannot be split into SentEval's 5 folds: a one-line error naming
    the task and its folder, not scikit-learn's traceback."""
    root = write_mini_senteval(tmp_path / "small", n=4)
    err = _one_line_error(
        ["--tasks", task, "--data-dir", str(root), *FAST], capsys, f"{task}: too few examples"
    )
    assert str(root / folder) in err and "5-fold" in err
