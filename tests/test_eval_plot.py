"""`vat evaluate --plot`: a bar chart comparing encoders and poolings across tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from eval_helpers import write_mini_senteval

from vat.cli.evaluate import main
from vat.eval.plots import headline_scores, plot_comparison

ENCODER = f"{Path(__file__).parent / 'eval_helpers.py'}:bag_encoder"
FAST = ["--preset", "prototyping", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> Path:
    return write_mini_senteval(tmp_path_factory.mktemp("senteval"))


def _colours(png: Path) -> int:
    import matplotlib.image

    img = matplotlib.image.imread(str(png))  # (H, W, 4) floats
    return len(np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0))


def test_headline_scores_are_the_table_numbers():
    res = {
        "STS12": {"all": {"spearman": {"mean": 0.25, "wmean": 0.3}}},
        "STSBenchmark-cosine": {"dev": {"spearman": 0.9}, "test": {"spearman": 0.5}},
        "SICKRelatedness": {"spearman": 0.4, "pearson": 0.1},
        "MR": {"acc": 61.5, "devacc": 60.0},
        "STS13": {"all": {"spearman": {"mean": float("nan")}}},
        "_meta": {"encoder": "x"},
    }
    assert headline_scores(res) == pytest.approx(
        {"STS12": 25.0, "STSBenchmark": 50.0, "SICKRelatedness": 40.0, "MR": 61.5}
    )


def test_cli_plot_compares_runs(tmp_path, mini, tiny_ckpt, capsys):
    tasks = ["--tasks", "STS12,STSBenchmark,SST2", "--data-dir", str(mini)]
    first = tmp_path / "bag.json"
    assert main(["--encoder", ENCODER, *tasks, "--output", str(first), *FAST]) == 0
    second = tmp_path / "mean.json"
    assert (
        main(
            ["--ckpt", str(tiny_ckpt), "--pooling", "mean", *tasks, "--output", str(second), *FAST]
        )
        == 0
    )
    png = tmp_path / "charts" / "compare.png"
    assert (
        main(
            [
                "--ckpt",
                str(tiny_ckpt),
                "--pooling",
                "precision",
                *tasks,
                "--plot",
                str(png),
                "--compare",
                str(first),
                str(second),
                *FAST,
            ]
        )
        == 0
    )
    assert f"wrote {png}" in capsys.readouterr().err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert _colours(png) > 20  # bars in three colours, text, legend: not a blank canvas
    single = tmp_path / "single.png"
    assert main(["--encoder", ENCODER, *tasks, "--plot", str(single), *FAST]) == 0
    assert single.stat().st_size > 5_000
    # an existing chart is kept unless --overwrite
    code = main(["--encoder", ENCODER, *tasks, "--plot", str(single), *FAST])
    assert code == 2 and "--plot" in capsys.readouterr().err


def test_plot_bad_arguments(tmp_path, mini, capsys):
    tasks = ["--tasks", "STS12", "--data-dir", str(mini), "--encoder", ENCODER, *FAST]
    assert main([*tasks, "--compare", str(tmp_path / "a.json")]) == 2
    assert "--compare needs --plot" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main([*tasks, "--plot", str(tmp_path / "p.png"), "--compare", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.png").exists()  # it failed before any work
    with pytest.raises(Exception, match="no task scores"):
        plot_comparison({"empty": {}}, tmp_path / "e.png")
