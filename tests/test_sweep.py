"""vat.experiments.sweep: a 2-value sweep of any key with the tiny config, its outputs
(records, CSV, PNGs, TensorBoard hparams), one checkpoint read per measurement, resume,
parallel runs, and one-line errors."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ASSETS, ROOT

from vat.cli import sweep as sweep_cli
from vat.experiments import config as sweep_config
from vat.experiments import frontier, measure, sweep
from vat.experiments.config import SweepConfig, run_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = ("frontier.png", "fig3a_similarities.png", "fig3b_losses.png", "fig2_curves.png")
KEY = "model.loss.free_bits"


def _config(tmp_path: Path, **overrides) -> Path:
    cfg = {
        "train_config": str(ASSETS / "tiny.yaml"),
        "out_dir": str(tmp_path / "sweep"),
        "sweep": {KEY: [0.0, 0.5]},
        "extra_args": ["--trainer.max_steps", "4", "--data.cache_dir", str(tmp_path / "cache")],
        "probe": str(ASSETS / "sentences.txt"),
        "min_count": 2,
        "bleu_file": str(ASSETS / "sentences.txt"),
        "bleu_lines": 8,
        **overrides,
    }
    path = tmp_path / "sweep.yaml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _events(out: Path) -> list[Path]:
    return sorted(out.glob("free_bits_*/events.out.tfevents.*"))


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    assert sweep_cli.main(["-c", str(_config(tmp))]) == 0
    return tmp


def test_any_key_sweep_trains_each_value_and_records_it(swept):
    out = swept / "sweep"
    for value in (0.0, 0.5):
        run = out / f"free_bits_{value}"
        # the value reached training: the run's own saved config holds it
        assert (
            yaml.safe_load((run / "config.yaml").read_text())["model"]["loss"]["free_bits"] == value
        )
        rec = json.loads((run / "record.json").read_text())
        assert rec[KEY] == value and rec["run"] == run.name and rec["step"] == 4
        assert rec["checkpoint"] == str(run / "checkpoints" / "last.ckpt")
        assert rec["prior_std"] == pytest.approx(0.4)  # tiny.yaml's, unchanged (stored as float32)
        for key in (
            "val_nll",
            "val_kl",
            "val_kl_weighted",
            "val_loss",
            "geometry_anisotropy",
            "geometry_self_similarity",
            "geometry_intra_sentence_similarity",
            "geometry_self_similarity_adjusted",
            "geometry_intra_sentence_similarity_adjusted",
            "geometry_active_units",
            "bleu",
        ):
            assert isinstance(rec[key], int | float), key
        assert rec["stsb_spearman"] is None  # no senteval_dir given
        assert rec["curves"]["train/loss"] and rec["curves"]["val/loss"]
        assert rec["geometry_self_similarity_adjusted"] == pytest.approx(
            rec["geometry_self_similarity"] - rec["geometry_anisotropy"]
        )


def test_sweep_writes_table_plots_and_hparams(swept):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = swept / "sweep"
    with open(out / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r[KEY]) for r in rows] == [0.0, 0.5]
    assert {
        "run",
        "checkpoint",
        "val_kl",
        "geometry_anisotropy",
        "geometry_active_units",
        "geometry_intra_sentence_similarity",
        "stsb_spearman",
        "bleu",
    } <= set(rows[0])
    assert "curves" not in rows[0]
    table = json.loads((out / "sweep.json").read_text())
    assert [r[KEY] for r in table["runs"]] == [0.0, 0.5]
    assert table["columns"] == list(rows[0])
    for fig in FIGURES:
        data = (out / fig).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, fig
    for r in table["runs"]:  # one hparams run per point, its metrics equal to the record's
        ea = EventAccumulator(str(out / "hparams" / r["run"]))
        ea.Reload()
        assert ea.Scalars("hparam/val_kl")[0].value == pytest.approx(r["val_kl"], rel=1e-6)
        assert ea.Scalars("hparam/bleu")[0].value == pytest.approx(r["bleu"], rel=1e-6)
        assert KEY.encode() in ea.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    assert sorted(p.name for p in (out / "hparams").iterdir() if p.is_dir()) == [
        "free_bits_0.0",
        "free_bits_0.5",
    ]


def test_a_run_is_quiet_and_the_sweep_ends_with_its_table(tmp_path, capfd, caplog):
    """Before, each run reprinted `vat train`'s model summary, end-of-fit summary and `next:`
    hints, and no results table came at the end. Now one line starts a run, one finishes it
    with its measurements, and stdout is the table sweep.md holds."""
    extra = ["--trainer.max_steps", "2", "--data.cache_dir", str(tmp_path / "cache")]
    extra += ["--trainer.enable_model_summary", "true"]  # asked for, still not per run
    cfg = _config(tmp_path, sweep={KEY: [0.5]}, extra_args=extra, bleu_file=None)
    assert sweep_cli.main(["-c", str(cfg), "--no-progress"]) == 0
    out, err = capfd.readouterr()
    rec = json.loads((tmp_path / "sweep" / "free_bits_0.5" / "record.json").read_text())
    assert out == (tmp_path / "sweep" / "sweep.md").read_text()
    assert out.splitlines() == [
        f"| {KEY} | steps | val KL (nats/token) | val NLL | active units |",
        "|---:|---:|---:|---:|---:|",
        f"| 0.5 | 2 | {rec['val_kl']:.2f} | {rec['val_nll']:.3f} | "
        f"{rec['geometry_active_units']} |",
    ]
    for noise in ("next:", "vat evaluate", "Params", "Seed set", "GPU available", "stopped"):
        assert noise not in err + caplog.text, noise  # a run's summary, hints, info lines
    lines = [ln.removeprefix("[sweep] ") for ln in err.splitlines() if ln.startswith("[sweep]")]
    assert lines[0].startswith(f"free_bits_0.5: training ({KEY} 0.5; run 1 of 1) in ")
    assert lines[1] == "free_bits_0.5: measuring"
    assert re.fullmatch(
        rf"free_bits_0\.5: finished in \d+:\d\d: 2 steps, val KL {rec['val_kl']:.2f} "
        rf"nats/token, val NLL {rec['val_nll']:.3f}",
        lines[2],
    ), lines[2]
    assert lines[3].startswith("wrote ") and len(lines) == 4


def test_the_table_shows_the_headline_columns_closed_form():
    records = [
        {KEY: 0.05, "step": 600, "val_kl": 1.0599, "val_nll": 4.87488, "bleu": 0.0,
         "stsb_spearman": 0.123456, "sts12_spearman": None, "geometry_active_units": 3},
        {KEY: 1.0, "step": 600, "val_kl": 16.4263, "val_nll": 4.8619, "bleu": None,
         "stsb_spearman": 0.17, "sts12_spearman": 0.2, "geometry_active_units": 20},
    ]  # fmt: skip
    assert frontier.markdown_table(records, [KEY]).splitlines() == [
        f"| {KEY} | steps | val KL (nats/token) | val NLL | BLEU | STS-B | STS12 | active units |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        "| 0.05 | 600 | 1.06 | 4.875 | 0.0 | 12.35 | - | 3 |",
        "| 1.0 | 600 | 16.43 | 4.862 | - | 17.00 | 20.00 | 20 |",
    ]
    assert frontier.headline(records[0]) == (
        "val KL 1.06 nats/token, val NLL 4.875, BLEU 0.0, STS-B 12.35"
    )


def test_readme_and_docs_suggest_the_sweep_that_works():
    """Before, README suggested frontier_cpu.yaml, whose every point scored BLEU 0.0, and
    docs/sweep.md's table left out frontier_cpu_target_kl.yaml."""
    readme = (ROOT / "README.md").read_text()
    (row,) = [ln for ln in readme.splitlines() if ln.startswith("| sweep any config key")]
    assert "vat sweep -c configs/sweeps/frontier_cpu_target_kl.yaml" in row
    assert "frontier_cpu.yaml" not in row
    docs = (ROOT / "docs" / "sweep.md").read_text()
    first = next(ln for ln in docs.splitlines() if "vat sweep -c" in ln)
    assert "configs/sweeps/frontier_cpu_target_kl.yaml" in first
    rows = {ln.split("|")[1].strip() for ln in docs.splitlines() if ln.startswith("| `")}
    for path in (ROOT / "configs" / "sweeps").glob("*.yaml"):
        assert f"`{path.name}`" in rows, path.name  # every shipped sweep has a row
    (cpu,) = [ln for ln in docs.splitlines() if ln.startswith("| `frontier_cpu.yaml`")]
    assert "BLEU 0.0 at every point" in cpu  # says what it shows


def test_measure_run_reads_the_checkpoint_once(swept, monkeypatch):
    """Geometry, STS and BLEU share one model: one torch.load of last.ckpt per record."""
    cfg = SweepConfig.from_yaml(swept / "sweep.yaml")
    run = swept / "sweep" / "free_bits_0.5"
    loads = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda f, *a, **k: loads.append(str(f)) or real(f, *a, **k))
    rec = measure.measure_run(cfg, {KEY: 0.5}, run)
    assert loads == [str(run / "checkpoints" / "last.ckpt")]
    assert rec["step"] == 4 and isinstance(rec["bleu"], float)


def test_rerun_skips_finished_runs(swept, capsys):
    """A rerun trains nothing, and its bar counts the runs (2/2 here, both finished)."""
    out = swept / "sweep"
    events = _events(out)
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("free_bits_*/record.json")}
    assert len(events) == 2 and len(mtimes) == 2
    assert sweep_cli.main(["-c", str(swept / "sweep.yaml")]) == 0
    assert _events(out) == events  # no training ran
    assert {p: p.stat().st_mtime_ns for p in out.glob("free_bits_*/record.json")} == mtimes
    err = capsys.readouterr().err
    assert err.count("done, skipping") == 2
    assert "sweep: 100%" in err and "2/2" in err and "[sweep]" in err  # the bar over runs
    assert sorted(p.name for p in (out / "hparams").iterdir() if p.is_dir()) == [
        "free_bits_0.0",
        "free_bits_0.5",
    ]


def test_progress_bar_over_runs_and_quiet(swept, capsys):
    """--no-progress drops the bar over runs (test_rerun_skips_finished_runs shows it), --quiet
    the bar and the [sweep] log lines."""
    cfg = str(swept / "sweep.yaml")
    assert sweep_cli.main(["-c", cfg, "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "sweep: " not in err and "2/2" not in err and "[sweep]" in err
    assert sweep_cli.main(["-c", cfg, "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_trained_run_without_record_is_measured_not_retrained(swept):
    out = swept / "sweep"
    (out / "free_bits_0.5" / "record.json").unlink()
    events = _events(out)
    assert sweep_cli.main(["-c", str(swept / "sweep.yaml")]) == 0
    assert (out / "free_bits_0.5" / "record.json").is_file()
    assert _events(out) == events


def test_interrupted_training_resumes_from_last_checkpoint(swept, tmp_path, monkeypatch):
    """A run with checkpoints/last.ckpt but no .trained marker continues with --ckpt_path last.
    (On a copy of the module's run: resuming changes the run, and the tests sharing `swept`
    may run after this one on the same pytest-xdist worker.)"""
    import shutil

    import vat.cli.train

    out = tmp_path / "sweep"
    run = out / "free_bits_0.0"
    shutil.copytree(swept / "sweep" / "free_bits_0.0", run)
    (run / "record.json").unlink()
    (run / sweep.TRAINED_MARKER).unlink()  # as if killed mid-training
    calls = []
    real = vat.cli.train.main
    monkeypatch.setattr(vat.cli.train, "main", lambda args: calls.append(args) or real(args))
    cfg = _config(
        tmp_path,
        out_dir=str(out),
        extra_args=["--trainer.max_steps", "6", "--data.cache_dir", str(swept / "cache")],
    )
    assert sweep_cli.main(["-c", str(cfg), "--values", "0.0"]) == 0
    trains = [c for c in calls if "--print_config" not in c]
    assert len(trains) == 1 and trains[0][-2:] == ["--ckpt_path", "last"]
    assert trains[0][-4:-2] == ["--" + KEY, "0.0"]
    assert json.loads((run / "record.json").read_text())["step"] == 6


def test_grid_points_names_and_arguments(tmp_path):
    cfg = SweepConfig.from_yaml(
        _config(tmp_path, sweep={KEY: [0.1, 0.2], "model.loss.kl_schedule.beta": [1, 0.5]})
    )
    points = cfg.points()
    assert points == [
        {KEY: 0.1, "model.loss.kl_schedule.beta": 1},
        {KEY: 0.1, "model.loss.kl_schedule.beta": 0.5},
        {KEY: 0.2, "model.loss.kl_schedule.beta": 1},
        {KEY: 0.2, "model.loss.kl_schedule.beta": 0.5},
    ]
    assert [run_name(p) for p in points] == [
        "free_bits_0.1-beta_1",
        "free_bits_0.1-beta_0.5",
        "free_bits_0.2-beta_1",
        "free_bits_0.2-beta_0.5",
    ]
    assert sweep.train_args(cfg, points[1], Path("r"))[-4:] == [
        "--model.loss.free_bits",
        "0.1",
        "--model.loss.kl_schedule.beta",
        "0.5",
    ]
    assert (
        sweep_config.cli_value(True) == "true" and sweep_config.cli_value("constant") == "constant"
    )
    # exact, never rounded: the value passed is the value trained
    assert float(sweep_config.cli_value(0.1 + 0.2)) == 0.1 + 0.2
    assert sweep_config.cli_value(0.3) == "0.3" and sweep_config.cli_value(3e-11) == "3e-11"


def test_curve_pair_prefers_the_papers_pair_for_the_prior_std():
    assert frontier.curve_pair([0.1, 0.4, 1.0]) == (1.0, 0.4)
    assert frontier.curve_pair([0.1, 0.4, 1.0], KEY) == (1.0, 0.1)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "configs" / "sweeps").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_sweep_yaml_opens_with_its_command_and_has_known_keys(path):
    text = path.read_text()
    assert text.startswith("#") and f"vat sweep -c configs/sweeps/{path.name}" in text
    data = yaml.safe_load(text)
    assert set(data) <= {f.name for f in sweep_config.fields(SweepConfig)}
    assert (ROOT / data["train_config"]).is_file()
    cfg = SweepConfig(
        **{
            **data,
            "train_config": str(ROOT / data["train_config"]),
            "probe": str(ROOT),
            "senteval_dir": None,
            "bleu_file": None,
            "feature_compare": False,  # it needs senteval_dir, left out here
            "fit_files": None,
            "baselines": [],  # files made by `vat baseline word-vectors`, left out here
        }
    )
    cfg.validate(str(path))  # types and ranges (sweep, jobs, device)


def test_prior_scale_sweep_is_a_sweep_over_the_prior_std():
    data = yaml.safe_load((ROOT / "configs" / "sweeps" / "sweep.yaml").read_text())
    assert data["sweep"] == {"model.loss.prior_std": [0.1, 0.2, 0.4, 0.6, 0.8, 1.0]}


@pytest.mark.parametrize(
    "bad, msg",
    [
        ({"sweep": {KEY: [0.4, 0.4]}}, "repeat"),
        ({"sweep": {"run_dir": [1, 2]}}, "sweep key"),
        ({"sweep": {"a.b": [1], "c.d": [2], "e.f": [3]}}, "one or two"),
        ({"sweep": {KEY: []}}, "non-empty"),
        ({"probe": "/nonexistent"}, "probe"),
        ({"typo_key": 1}, "unknown key"),
        ({"jobs": 0}, "jobs"),
        ({"device": "tpu"}, "device"),
        ({"sts_tasks": ["MR"]}, "sts_tasks"),
        ({"prior_stds": [0.4]}, "sweep: {model.loss.prior_std: [0.4]}"),
    ],
)
def test_bad_sweep_config_is_one_line_error(tmp_path, capsys, bad, msg):
    assert sweep_cli.main(["-c", str(_config(tmp_path, **bad))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and msg in err[0]


def test_a_key_the_train_config_lacks_fails_before_any_training(tmp_path, capsys):
    assert (
        sweep_cli.main(["-c", str(_config(tmp_path, sweep={"model.loss.free_bitz": [0.1]}))]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unrecognized arguments: --model.loss.free_bitz" in err[0]
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize(
    "argv, msg",
    [
        ([], "-c/--config"),
        (["-c", "x.yaml", "--jobs", "two"], "--jobs"),
        (["-c", "missing.yaml"], "missing.yaml"),
        (["-c", "x.yaml", "--bogus"], "--bogus"),
        (["-c", "x.yaml", "--job", "2"], "unrecognized arguments: --job"),  # no prefix matching
    ],
)
def test_usage_errors_are_one_line(capsys, argv, msg):
    assert sweep_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and msg in err[0]


def test_values_on_a_grid_is_a_usage_error(tmp_path, capsys):
    cfg = _config(tmp_path, sweep={KEY: [0.1], "model.loss.prior_std": [0.4]})
    assert sweep_cli.main(["-c", str(cfg), "--values", "0.2"]) == 2
    assert "grid" in capsys.readouterr().err


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failed_point_is_in_the_table_and_the_others_still_run(
    tmp_path, capsys, jobs, vat_children
):
    """A point that fails while training does not stop the others, one after another or in
    child processes alike: it is a row of the table saying why, and the sweep ends with exit 2
    and one line naming it (before: with jobs 1 the sweep stopped there, so the points after it
    never trained; with either, no table was written).

    jobs=2 is also the parallel sweep: the data is prepared once, each value trains in a child
    process of its own with its own log, and the parent writes the same table as a sequential
    sweep would."""
    values = [0.3, 0.7]
    cfg = _config(tmp_path, sweep={"model.loss.prior_std": values}, jobs=jobs, device="cpu")
    out = tmp_path / "sweep"
    bad = out / "prior_std_0.3" / "checkpoints" / "last.ckpt"  # the first point: its resume fails
    bad.parent.mkdir(parents=True)
    bad.write_text("not a checkpoint")
    assert sweep_cli.main(["-c", str(cfg), "--no-progress"]) == 2
    cap = capsys.readouterr()
    why = f"checkpoint {bad} is truncated, corrupt or not a torch checkpoint"
    err = cap.err.strip().splitlines()
    assert err[-1].startswith(f"error: 1 of {len(values)} runs failed: prior_std_0.3 (")
    assert why in err[-1] and "rerun the same command to resume" in err[-1]
    if jobs > 1:  # the child's output is in its run's log
        assert "sweep.log" in err[-1] and why in (out / "prior_std_0.3" / "sweep.log").read_text()
        assert cap.err.count("started in a child process") == 2
        assert "preparing the data once" in cap.err
        caches = list((tmp_path / "cache").glob("data-*"))
        assert len(caches) == 1  # one tokenized cache, built by the parent, read by the children
        for value in values:  # each child did its own point, and only that one
            log = (out / f"prior_std_{value}" / "sweep.log").read_text()
            assert f"prior_std_{value}: training (model.loss.prior_std {value}; run 1 of 1)" in log
            assert all(f"prior_std_{v}" not in log for v in values if v != value), log
    assert [ln for ln in err if ln.startswith("[sweep] prior_std_0.3: failed: ")], err
    assert not (out / "prior_std_0.3" / "record.json").exists()
    for value in values[1:]:  # the points after the failed one trained and were measured
        rec = json.loads((out / f"prior_std_{value}" / "record.json").read_text())
        assert rec["step"] == 4 and rec["prior_std"] == pytest.approx(value)  # its own value
        if jobs > 1:  # the child trained and measured this value
            assert "measuring" in (out / f"prior_std_{value}" / "sweep.log").read_text()
    # the table, written and printed, holds them all: the failed one with its reason
    table = (out / "sweep.md").read_text()
    assert cap.out == table
    header, _, failed, *done = (ln.strip("|").split(" | ") for ln in table.splitlines())
    assert header[0].strip() == "model.loss.prior_std" and header[-1].strip() == "failed"
    assert failed[0].strip() == "0.3" and set(failed[1:-1]) == {"-"} and why in failed[-1]
    assert [row[0].strip() for row in done] == [str(v) for v in values[1:]]
    assert all(row[1] == "4" and row[-1].strip() == "-" for row in done)
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert [r["run"] for r in runs] == [f"prior_std_{v}" for v in values]
    assert why in runs[0]["failed"] and not any("failed" in r for r in runs[1:])
    with open(out / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["model.loss.prior_std"]) for r in rows] == values  # in the sweep's order
    assert [bool(r["failed"]) for r in rows] == [True] + [False] * (len(values) - 1)


def test_an_out_of_range_value_is_refused_before_any_point_trains(tmp_path, capsys):
    """vat train's own checks (here the loss config's) run for every point before the first
    trains (before: free_bits_0.5 trained, then -1.0 was refused when its turn came)."""
    cfg = _config(tmp_path, sweep={KEY: [0.5, -1.0]})
    assert sweep_cli.main(["-c", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: sweep point free_bits_-1.0: "), err
    assert "model.loss.free_bits must be finite and >= 0, got -1.0" in err[0]
    assert not (tmp_path / "sweep").exists()


def test_a_rerun_with_other_train_settings_is_refused_not_mixed(swept, tmp_path, capsys):
    """Before, changing extra_args (max_steps 4 -> 8) and rerunning skipped the finished runs
    as "done", so one frontier mixed 4-step and 8-step runs."""
    import shutil

    out = tmp_path / "sweep"
    shutil.copytree(swept / "sweep", out)
    records = {p: p.read_bytes() for p in out.glob("free_bits_*/record.json")}
    cfg = _config(
        tmp_path,
        out_dir=str(out),
        extra_args=["--trainer.max_steps", "8", "--data.cache_dir", str(swept / "cache")],
    )
    assert sweep_cli.main(["-c", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was trained with other settings" in err[0], err
    assert "'8'" in err[0] and "choose another --output" in err[0]
    assert {p: p.read_bytes() for p in out.glob("free_bits_*/record.json")} == records


@pytest.mark.parametrize("values", [[1e-11, 2e-11], [3e-11, 0.0]])
def test_tiny_values_are_passed_exactly_and_are_not_repeats(tmp_path, values):
    cfg = SweepConfig.from_yaml(_config(tmp_path, sweep={KEY: values}))  # no "repeat" error
    args = [sweep_config.point_args(p)[1] for p in cfg.points()]
    assert [float(a) for a in args] == values  # 3e-11 trained as 0.0 when rounded
    assert len({run_name(p) for p in cfg.points()}) == 2


def _config_with_raw_sweep(tmp_path: Path, sweep_yaml: str) -> Path:
    """_config, with the sweep written as raw YAML text (as a user types it)."""
    path = _config(tmp_path)
    data = yaml.safe_load(path.read_text())
    del data["sweep"]
    path.write_text(yaml.safe_dump(data) + f"sweep: {sweep_yaml}\n")
    return path


def test_numbers_are_read_as_numbers_and_two_spellings_of_one_are_refused(tmp_path, capsys):
    """YAML 1.1 reads 1e-1 as the string "1e-1", so [0.1, 1e-1] trained 0.1 twice
    (free_bits_0.1 and free_bits_1e-1). A repeat is refused rather than dropped: in a list
    typed by hand it is most likely a typo for a value the user wants on the frontier."""
    cfg = SweepConfig.from_yaml(_config_with_raw_sweep(tmp_path, f"{{{KEY}: [1e-2, 1E-1, 2]}}"))
    assert cfg.sweep[KEY] == [0.01, 0.1, 2]
    assert [run_name(p) for p in cfg.points()] == ["free_bits_0.01", "free_bits_0.1", "free_bits_2"]
    assert [sweep_config.point_args(p)[1] for p in cfg.points()] == ["0.01", "0.1", "2"]
    path = _config_with_raw_sweep(tmp_path, f"{{{KEY}: [0.1, 1e-1]}}")
    assert sweep_cli.main(["-c", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "repeat a value (0.1 and '1e-1' are both 0.1)" in err[0], err
    assert sweep_cli.main(["-c", str(_config(tmp_path)), "--values", "1,1.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "repeat a value (1 and 1.0 are both 1.0)" in err[0], err
    assert not (tmp_path / "sweep").exists()


def test_output_in_a_train_run_is_one_line(tmp_path, capsys):
    """A sweep's folder that is a `vat train` run, or lies in that run's checkpoints (which
    the run's --overwrite removes), is refused before anything is written."""
    from vat.runs.run_dir import FreshStart, begin_fresh

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    begin_fresh(FreshStart(run, {"--run_dir": run}, ["checkpoints"], [], False))
    cfg = str(_config(tmp_path))
    for output, msg in [
        (run, f"error: --output-dir {run} is the folder of a vat train run"),
        (
            run / "checkpoints" / "sw",
            f"error: --output-dir {run / 'checkpoints' / 'sw'} lies inside",
        ),
    ]:
        assert sweep_cli.main(["-c", cfg, "--output-dir", str(output)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(msg), err
    assert sorted(p.name for p in run.rglob("*")) == [".vat-run.json", "checkpoints"]


@pytest.mark.parametrize("code", [130, 143])
def test_a_run_stopped_by_ctrl_c_stops_the_sweep_as_interrupted(tmp_path, code, capsys):
    """A point's `vat train` stopped by Ctrl-C (130) or SIGTERM (143) saved its state at a
    step: the sweep stops as interrupted (the same command resumes it), not as a failure."""
    calls: list[list[str]] = []

    def train(argv: list[str]) -> int:
        calls.append(argv)
        return code

    runner = sweep.Runner(
        train=train, check=lambda argv: 0, prepare=lambda argv: 0, child=("vat", "sweep")
    )
    cfg = SweepConfig(
        train_config=str(ROOT / "configs" / "demo.yaml"),
        sweep={"model.loss.prior_std": [0.4]},
        out_dir=str(tmp_path / "sweep"),
    )
    point = cfg.points()[0]
    with pytest.raises(KeyboardInterrupt):
        sweep.train_run(runner, cfg, point, tmp_path / "sweep" / run_name(point))
    assert len(calls) == 1
    assert "the same sweep command resumes it" in capsys.readouterr().err
