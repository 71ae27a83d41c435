"""A sweep over a list of points (an ablation: each point sets its own keys, `{}` the train
config as it is), and the feature-spec comparison as a sweep measurement: its record fields
against `compare_sts` on the same model, the table, bleu_vs_select.png, and a change of its
settings re-measuring without retraining."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ASSETS
from eval_helpers import write_mini_senteval

from vat.cli import sweep as sweep_cli
from vat.experiments import frontier, measure, sweep
from vat.experiments.config import SweepConfig, point_label, run_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FREE_BITS = "model.loss.free_bits"
PRIOR_STD = "model.loss.prior_std"
POINTS = [{}, {FREE_BITS: 0.5}]


def _config(tmp_path: Path, **overrides) -> Path:
    """A sweep YAML of the tiny train config (2 steps a run) over POINTS, without STS."""
    cfg = {
        "train_config": str(ASSETS / "tiny.yaml"),
        "out_dir": str(tmp_path / "sweep"),
        "sweep": POINTS,
        "extra_args": ["--trainer.max_steps", "2", "--data.cache_dir", str(tmp_path / "cache")],
        "probe": str(ASSETS / "sentences.txt"),
        "min_count": 2,
        "bleu_file": str(ASSETS / "sentences.txt"),
        "bleu_lines": 8,
        **overrides,
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _raw_config(tmp_path: Path, sweep_yaml: str, **overrides) -> Path:
    """_config with `sweep:` written as the YAML text a user types."""
    path = _config(tmp_path, **overrides)
    data = yaml.safe_load(path.read_text())
    del data["sweep"]
    path.write_text(yaml.safe_dump(data) + f"sweep:\n{sweep_yaml}\n")
    return path


def _one_line_error(capsys, argv: list[str]) -> str:
    assert sweep_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


# -- the list form: parsing, names, refusals ---------------------------------------------------
def test_a_list_of_points_is_kept_as_given_with_defaults_for_the_empty_point(tmp_path):
    path = _raw_config(
        tmp_path,
        f"  - {{}}\n  - {{{FREE_BITS}: 1e-1}}\n  - {{{PRIOR_STD}: 0.3}}\n"
        f"  - {{{PRIOR_STD}: 0.3, {FREE_BITS}: 0.2}}",
    )
    cfg = SweepConfig.from_yaml(path)
    # numbers as `vat train` reads them (YAML 1.1 reads 1e-1 as a string)
    assert cfg.points() == [
        {},
        {FREE_BITS: 0.1},
        {PRIOR_STD: 0.3},
        {PRIOR_STD: 0.3, FREE_BITS: 0.2},
    ]
    assert cfg.keys == [FREE_BITS, PRIOR_STD]  # first seen first
    assert [run_name(p) for p in cfg.points()] == [
        "defaults",
        "free_bits_0.1",
        "prior_std_0.3",
        "prior_std_0.3-free_bits_0.2",
    ]
    assert point_label({}) == "defaults"
    assert point_label(cfg.points()[3]) == "prior_std=0.3, free_bits=0.2"
    # the empty point trains the train config as it is: no override of its own
    base = ["fit", "-c", cfg.train_config, "--run_dir", "r", *cfg.extra_args]
    assert sweep.train_args(cfg, {}, Path("r")) == base
    assert sweep.train_args(cfg, cfg.points()[1], Path("r")) == [*base, f"--{FREE_BITS}", "0.1"]
    # the mapping form is unchanged
    grid = SweepConfig.from_yaml(_config(tmp_path / "grid", sweep={FREE_BITS: [0.1, 0.2]}))
    assert grid.points() == [{FREE_BITS: 0.1}, {FREE_BITS: 0.2}] and grid.keys == [FREE_BITS]


@pytest.mark.parametrize(
    "sweep_yaml, msg",
    [
        (f"  - {{{FREE_BITS}: 0.1}}\n  - {{{FREE_BITS}: 1e-1}}", "points 1 (free_bits=0.1) and 2"),
        (f"  - {{{FREE_BITS}: 1}}\n  - {{{FREE_BITS}: 1.0}}", "are the same point"),
        ("  - {}\n  - {}", "points 1 (defaults) and 2 (defaults) are the same point"),
        (
            f"  - {{{FREE_BITS}: 0.1, {PRIOR_STD}: 0.3}}\n"
            f"  - {{{PRIOR_STD}: 0.3, {FREE_BITS}: 0.1}}",
            "are the same point",
        ),
        (
            f"  - {{{FREE_BITS}: 'a b'}}\n  - {{{FREE_BITS}: a_b}}",
            "would both be run free_bits_a_b",
        ),
        (
            f"  - {{{PRIOR_STD}: 0.3}}\n  - {{model.arch.prior_std: 0.5}}",
            f"must end in different names, got {PRIOR_STD} and model.arch.prior_std",
        ),
        ("  - {run_dir: x}", "sweep key 'run_dir'"),
        ("  - {seed_everything: 3}", "sweep key 'seed_everything'"),
        ("  - {'not a key': 3}", "sweep key 'not a key'"),
        (f"  - {{{FREE_BITS}: [0.1, 0.2]}}", "point 1 sets model.loss.free_bits to [0.1, 0.2]"),
        (f"  - {FREE_BITS}", "sweep point 1 must be a mapping"),
        ("  []", "sweep is an empty list"),
    ],
)
def test_bad_point_lists_are_one_line_errors(tmp_path, capsys, sweep_yaml, msg):
    path = _raw_config(tmp_path, sweep_yaml)
    err = _one_line_error(capsys, ["-c", str(path)])
    assert msg in err, err
    assert not (tmp_path / "sweep").exists()  # refused before anything is written


def test_values_needs_a_one_key_mapping_not_a_list(tmp_path, capsys):
    err = _one_line_error(capsys, ["-c", str(_config(tmp_path)), "--values", "0.1,0.2"])
    assert "--values needs a sweep over one key" in err and "lists its points (2)" in err


def test_the_table_shows_a_dash_for_a_key_a_point_does_not_set_closed_form():
    records = [
        {"run": "defaults", "step": 2, "val_kl": 1.234, "val_nll": 4.5678,
         "select_mu_mean": 12.345, "select_layer0_sif": None,
         "best_contextual_spec": "layer2/mean/whiten", "select_best_contextual": 20.0,
         "best_spec": "firstlast/sif/pc1", "select_best": 21.5, "stsb_test_best": 18.25},
        {"run": "free_bits_0.5", FREE_BITS: 0.5, "step": 2, "val_kl": 2.0, "val_nll": 4.0,
         "select_mu_mean": 10.0, "select_layer0_sif": 11.0,
         "best_contextual_spec": "firstlast/mean/none", "select_best_contextual": 9.0,
         "best_spec": "layer0/sif/none", "select_best": 11.0, "stsb_test_best": None},
        {"run": "free_bits_null", FREE_BITS: None, "step": 2},  # set to null: not a dash
    ]  # fmt: skip
    assert frontier.markdown_table(records, [FREE_BITS]).splitlines() == [
        f"| {FREE_BITS} | steps | val KL (nats/token) | val NLL | select mu/mean/none "
        "| select layer0/sif/none | best contextual spec | select best contextual | best spec "
        "| select best | STS-B test (best spec) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        "| - | 2 | 1.23 | 4.568 | 12.35 | - | layer2/mean/whiten | 20.00 | firstlast/sif/pc1 "
        "| 21.50 | 18.25 |",
        "| 0.5 | 2 | 2.00 | 4.000 | 10.00 | 11.00 | firstlast/mean/none | 9.00 "
        "| layer0/sif/none | 11.00 | - |",
        "| null | 2 | - | - | - | - | - | - | - | - | - |",
    ]
    # a finished run's line names the winner's score, not every column
    assert (
        frontier.headline(records[0]) == "val KL 1.23 nats/token, val NLL 4.568, select best 21.50"
    )
    # the swept key leads sweep.csv even when the first record lacks it
    assert frontier.table_columns(records, [FREE_BITS])[:3] == [FREE_BITS, "run", "step"]


def test_parallel_children_of_a_list_sweep_get_no_values(tmp_path):
    """Each child reads its point from the YAML by its run name; a --values (which a list
    sweep refuses) is passed only for a one-key mapping, whose values the parent may have
    overridden."""
    argv_file = tmp_path / "argv.json"
    child = (
        sys.executable,
        "-c",
        "import json, sys; f = open(sys.argv[1], 'a'); f.write(json.dumps(sys.argv[2:]) + '\\n')",
        str(argv_file),
    )
    runner = sweep.Runner(
        train=lambda argv: 0, check=lambda argv: 0, prepare=lambda argv: 0, child=child
    )
    for sweep_value, values in (
        (POINTS, [None, None]),
        ({FREE_BITS: [0.1, 0.2]}, ["0.1", "0.2"]),
    ):
        argv_file.unlink(missing_ok=True)
        path = _config(tmp_path, sweep=sweep_value, jobs=2)
        cfg = SweepConfig.from_yaml(path)
        sweep.run_parallel(runner, cfg, str(path), cfg.points(), log=lambda m: None, poll_s=0.05)
        calls = [json.loads(ln) for ln in argv_file.read_text().splitlines()]
        by_run = {c[c.index("--run") + 1]: c for c in calls}
        assert sorted(by_run) == sorted(run_name(p) for p in cfg.points())
        got = [
            by_run[run_name(p)][by_run[run_name(p)].index("--values") + 1]
            if "--values" in by_run[run_name(p)]
            else None
            for p in cfg.points()
        ]
        assert got == values


# -- feature_compare: its settings ---------------------------------------------------------------
@pytest.fixture(scope="module")
def mini_senteval(tmp_path_factory) -> Path:
    """A miniature SentEval folder (STS12's five sets and STS-B among its tasks)."""
    return write_mini_senteval(tmp_path_factory.mktemp("senteval"), n=20)


def test_bad_feature_compare_settings_are_one_line_errors(tmp_path, capsys, mini_senteval):
    inside = mini_senteval / "STS" / "STSBenchmark" / "sts-dev.csv"
    fit = {"feature_compare": True, "senteval_dir": str(mini_senteval)}
    for overrides, msg in [
        ({"feature_compare": "yes"}, "feature_compare must be true or false"),
        ({"feature_compare": True}, "feature_compare needs senteval_dir"),
        ({**fit, "fit_sentences": 1}, "fit_sentences must be a whole number >= 2, got 1"),
        ({**fit, "fit_sentences": True}, "fit_sentences must be a whole number >= 2"),
        ({**fit, "fit_files": []}, "fit_files must be a non-empty list"),
        ({**fit, "fit_files": str(ASSETS / "sentences.txt")}, "fit_files must be a non-empty list"),
        ({**fit, "fit_files": [str(tmp_path / "none.txt")]}, "none.txt does not exist"),
        ({**fit, "fit_files": [str(inside)]}, f"fit_files: {inside} lies in the evaluation data"),
    ]:
        err = _one_line_error(capsys, ["-c", str(_config(tmp_path, **overrides))])
        assert msg in err, err
    assert not (tmp_path / "sweep").exists()


def test_feature_compare_settings_are_measure_settings_only_when_it_runs(tmp_path, mini_senteval):
    """A sweep without the comparison keeps the measurement settings it had (its records are
    not measured again); with it, the fitting settings are part of them."""
    plain = SweepConfig.from_yaml(_config(tmp_path, fit_sentences=50))
    assert "fit_sentences" not in sweep.measure_settings(plain)
    on = SweepConfig.from_yaml(
        _config(tmp_path, feature_compare=True, senteval_dir=str(mini_senteval), fit_sentences=50)
    )
    assert {k: sweep.measure_settings(on)[k] for k in ("feature_compare", "fit_files")} == {
        "feature_compare": True,
        "fit_files": None,
    }
    assert sweep.measure_settings(on)["fit_sentences"] == 50
    # a change of the comparison's settings does not change what trains
    assert sweep.train_settings(on, {FREE_BITS: 0.5}) == sweep.train_settings(
        plain, {FREE_BITS: 0.5}
    )


# -- feature_compare: a trained list sweep -------------------------------------------------------
@pytest.fixture(scope="module")
def compared(tmp_path_factory, mini_senteval) -> Path:
    """The two POINTS trained for 2 steps and measured with the feature comparison, fitted on
    each run's fitting sample."""
    tmp = tmp_path_factory.mktemp("sweep_points")
    cfg = _config(tmp, feature_compare=True, senteval_dir=str(mini_senteval))
    assert sweep_cli.main(["-c", str(cfg), "--no-progress"]) == 0
    return tmp


def _rows_of(run_dir: Path, senteval: Path, fit_sentences: int = 20_000) -> list[dict]:
    """`compare_sts` on the run's model, as `vat features compare` runs it."""
    from vat.features.compare import CompareSettings, compare_sts, load_sts_tasks
    from vat.share.resolve import load_model

    loaded = load_model(run_dir / "checkpoints" / "last.ckpt", "cpu")
    assert loaded.fit_sample  # what the comparison fits on
    comparison = compare_sts(
        loaded, load_sts_tasks(senteval), None, CompareSettings(fit_sentences=fit_sentences)
    )
    return comparison.rows


def test_feature_compare_records_what_compare_sts_gives(compared, mini_senteval):
    from vat.feature_spec import FeatureSpec
    from vat.features.compare import SELECT

    out = compared / "sweep"
    for name in ("defaults", "free_bits_0.5"):
        run = out / name
        rec = json.loads((run / "record.json").read_text())
        rows = _rows_of(run, mini_senteval)
        by_spec = {r["spec"]: r for r in rows}
        assert rec["select_mu_mean"] == pytest.approx(by_spec["mu/mean/none"][SELECT], abs=1e-9)
        # the tiny training run records its token counts, so sif is there
        assert rec["select_layer0_sif"] == pytest.approx(
            by_spec["layer0/sif/none"][SELECT], abs=1e-9
        )
        best = max(rows, key=lambda r: r[SELECT])
        assert rec["best_spec"] == rows[0]["spec"]
        assert rec["select_best"] == pytest.approx(best[SELECT], abs=1e-9)
        for field, column in (
            ("sts12_best", "STS12"),
            ("stsb_dev_best", "STS-B dev"),
            ("stsb_test_best", "STS-B test"),
        ):
            assert rec[field] == pytest.approx(rows[0][column], abs=1e-9), field
        # a transformer layer above the embeddings, or the first and last layers together
        source = FeatureSpec.parse(rec["best_contextual_spec"]).source
        assert source in ("layer1", "layer2", "firstlast"), source
        contextual = [
            r
            for r in rows
            if FeatureSpec.parse(r["spec"]).source in ("layer1", "layer2", "firstlast")
        ]
        top = max(contextual, key=lambda r: r[SELECT])
        assert rec["select_best_contextual"] == pytest.approx(top[SELECT], abs=1e-9)
        assert by_spec[rec["best_contextual_spec"]][SELECT] == pytest.approx(top[SELECT], abs=1e-9)
        # the comparison's own set, in the run's folder
        with open(run / "feature_compare" / "compare.csv") as f:
            written = {r["spec"]: float(r[SELECT]) for r in csv.DictReader(f)}
        assert written["mu/mean/none"] == pytest.approx(rec["select_mu_mean"], abs=0.006)
        assert len(written) == len(rows)
        assert (run / "feature_compare" / "compare.png").read_bytes().startswith(PNG_MAGIC)


def test_the_sweep_table_and_plots_of_a_list_sweep(compared):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = compared / "sweep"
    records = {r["run"]: r for r in json.loads((out / "sweep.json").read_text())["runs"]}
    assert list(records) == ["defaults", "free_bits_0.5"]
    assert FREE_BITS not in records["defaults"] and records["free_bits_0.5"][FREE_BITS] == 0.5
    lines = (out / "sweep.md").read_text().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[0] == FREE_BITS and "select mu/mean/none" in header and "best spec" in header
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    assert [r[0] for r in rows] == ["-", "0.5"]  # defaults: the train config's value
    for row, rec in zip(rows, records.values()):
        cell = dict(zip(header, row))
        assert cell["select mu/mean/none"] == f"{rec['select_mu_mean']:.2f}"  # x 100 already
        assert cell["best spec"] == rec["best_spec"]
        assert cell["best contextual spec"] == rec["best_contextual_spec"]
    with open(out / "sweep.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert list(csv_rows[0])[0] == FREE_BITS and [r[FREE_BITS] for r in csv_rows] == ["", "0.5"]
    assert float(csv_rows[1]["select_best"]) == pytest.approx(
        records["free_bits_0.5"]["select_best"]
    )
    for name in ("frontier.png", "bleu_vs_select.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, name
    assert not (out / "fig3a_similarities.png").exists()  # not a one-key numeric sweep
    for name, value in (("defaults", "-"), ("free_bits_0.5", "0.5")):
        ea = EventAccumulator(str(out / "hparams" / name))
        ea.Reload()
        info = ea.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        assert FREE_BITS.encode() in info and value.encode() in info
        assert ea.Scalars("hparam/select_mu_mean")[0].value == pytest.approx(
            records[name]["select_mu_mean"], rel=1e-6
        )


def test_plot_all_draws_bleu_against_select_only_with_both(tmp_path):
    base = {"run": "defaults", "val_kl": 1.0, "bleu": 12.0}
    written = frontier.plot_all([{**base, "select_mu_mean": 30.0}], [], tmp_path)
    assert [p.name for p in written] == ["frontier.png", "bleu_vs_select.png"]
    assert (tmp_path / "bleu_vs_select.png").read_bytes().startswith(PNG_MAGIC)
    other = tmp_path / "other"
    other.mkdir()
    assert [p.name for p in frontier.plot_all([base], [], other)] == ["frontier.png"]


def test_a_new_fit_sentences_measures_again_without_training(compared, tmp_path, mini_senteval):
    """The comparison's settings are measurement settings: the runs (copied, so the module's
    sweep stays as it was) are measured again, fitted on 6 sentences, and not trained."""
    out = tmp_path / "sweep"
    shutil.copytree(compared / "sweep", out)
    runs = [out / "defaults", out / "free_bits_0.5"]
    events = sorted(p for run in runs for p in run.glob("events.out.tfevents.*"))
    ckpts = {p: p.stat().st_mtime_ns for p in out.glob("*/checkpoints/last.ckpt")}
    assert len(events) == 2 and len(ckpts) == 2
    cfg = _config(
        tmp_path,
        out_dir=str(out),
        feature_compare=True,
        senteval_dir=str(mini_senteval),
        fit_sentences=6,
        extra_args=["--trainer.max_steps", "2", "--data.cache_dir", str(compared / "cache")],
    )
    assert sweep_cli.main(["-c", str(cfg), "--no-progress"]) == 0
    assert sorted(p for run in runs for p in run.glob("events.out.tfevents.*")) == events
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/checkpoints/last.ckpt")} == ckpts
    run = out / "free_bits_0.5"
    rec = json.loads((run / "record.json").read_text())
    assert rec["measure_settings"]["fit_sentences"] == 6
    assert "fitted on 6 sentences" in (run / "feature_compare" / "compare.md").read_text()
    rows = _rows_of(run, mini_senteval, fit_sentences=6)
    assert rec["best_spec"] == rows[0]["spec"]
    assert rec["select_best"] == pytest.approx(rows[0]["select (STS12 sets + STS-B dev)"], abs=1e-9)


def test_turning_the_comparison_off_keeps_what_it_recorded(
    compared, mini_senteval, tmp_path, capsys
):
    """A sweep without the comparison keeps the records it has (before: every run was
    measured again and its select_* fields dropped); a change of another measurement setting
    measures the runs again and keeps the comparison's fields, which it does not change."""
    out = tmp_path / "sweep"
    shutil.copytree(compared / "sweep", out)
    records = {p: p.read_bytes() for p in out.glob("*/record.json")}
    assert len(records) == 2
    extra = ["--trainer.max_steps", "2", "--data.cache_dir", str(compared / "cache")]
    same = {"out_dir": str(out), "extra_args": extra, "senteval_dir": str(mini_senteval)}
    assert sweep_cli.main(["-c", str(_config(tmp_path, **same)), "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert "measuring" not in cap.err and cap.err.count("done, skipping") == 2
    assert {p: p.read_bytes() for p in out.glob("*/record.json")} == records
    assert "select mu/mean/none" in cap.out.splitlines()[0] and "best spec" in cap.out
    # bleu_lines 4: measured again, the comparison's fields and settings kept
    assert sweep_cli.main(["-c", str(_config(tmp_path, **same, bleu_lines=4))]) == 0
    assert capsys.readouterr().err.count("measuring") == 2
    for path, before in records.items():
        old, new = json.loads(before), json.loads(path.read_text())
        assert new["measure_settings"] == {**old["measure_settings"], "bleu_lines": 4}
        kept = measure.FEATURE_COMPARE_FIELDS
        assert {k: new[k] for k in kept} == {k: old[k] for k in kept}
    # with the comparison on again (its settings unchanged), the runs are measured already
    cfg = _config(tmp_path, **same, bleu_lines=4, feature_compare=True)
    assert sweep_cli.main(["-c", str(cfg), "--no-progress"]) == 0
    assert capsys.readouterr().err.count("done, skipping") == 2


def test_baselines_are_rows_of_the_table_and_lines_of_the_plot(tmp_path, mini_senteval, capsys):
    """A sweep's `baselines` are scored on its STS data as `vat evaluate --word-vectors` scores
    them, and written as rows of sweep.md/.csv, lines across bleu_vs_select.png; not in the
    hparams view. A missing file or a bad entry is one line."""
    from vat.cli.evaluate import main as evaluate_main
    from vat.eval.word_vectors import tokenize

    words = sorted(
        {t for p in (mini_senteval / "STS").rglob("*.txt") for t in tokenize(p.read_text())}
    )
    vectors = tmp_path / "ft" / "vectors.txt"
    vectors.parent.mkdir()
    lines = [f"{w} {i % 7 - 3} {i % 5 - 2} {(i * i) % 11 - 5}" for i, w in enumerate(words)]
    vectors.write_text("\n".join(lines) + "\n")  # GloVe layout: no header
    cfg = SweepConfig.from_yaml(
        _config(tmp_path, senteval_dir=str(mini_senteval), baselines=[{"vectors": str(vectors)}])
    )
    (record,) = measure.baseline_records(cfg)
    assert record["run"] == "ft/vectors.txt (mean)" and record["baseline"] == str(vectors)
    res = tmp_path / "eval.json"
    args = ["--word-vectors", str(vectors), "--tasks", "STS12", "--data-dir", str(mini_senteval)]
    assert evaluate_main([*args, "--output", str(res), "--no-progress"]) == 0
    got, _ = json.loads(res.read_text()), capsys.readouterr()
    assert record["sts12_best"] == pytest.approx(100 * got["STS12"]["all"]["spearman"]["mean"])
    run = {"run": "defaults", "val_kl": 1.0, "bleu": 12.0, "select_mu_mean": 30.0}
    out = tmp_path / "out"
    out.mkdir()
    table = frontier.write_table([run, record], [], out)
    assert f"| ft/vectors.txt (mean) | {record['select_best']:.2f} |" in table
    written = frontier.plot_all([run, record], [], out)
    assert [p.name for p in written] == ["frontier.png", "bleu_vs_select.png"]
    for bad, msg in [
        ([{"vectors": str(tmp_path / "none.txt")}], "baselines: vectors"),
        ([{"vector": str(vectors)}], "baselines must be a list of {vectors: FILE"),
    ]:
        err = _one_line_error(
            capsys, ["-c", str(_config(tmp_path, senteval_dir=str(mini_senteval), baselines=bad))]
        )
        assert msg in err, err
