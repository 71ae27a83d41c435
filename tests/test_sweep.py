"""vat.experiments.sweep: a 2-value sweep with the tiny config, its outputs, and resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from conftest import ASSETS, ROOT

from vat.experiments import sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = ("fig3a_similarities.png", "fig3b_losses.png", "fig2_curves.png")


def _config(tmp_path: Path, **overrides) -> Path:
    cfg = {
        "train_config": str(ASSETS / "tiny.yaml"),
        "out_dir": str(tmp_path / "sweep"),
        "prior_stds": [0.2, 1.0],
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
    return sorted(out.glob("s_*/events.out.tfevents.*"))


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    assert sweep.main(["-c", str(_config(tmp))]) == 0
    return tmp


def test_sweep_writes_records_table_and_plots(swept):
    out = swept / "sweep"
    for name in ("s_0.2", "s_1.0"):
        rec = json.loads((out / name / "record.json").read_text())
        assert rec["prior_std"] == float(name[2:])
        assert rec["step"] == 4
        for key in ("val_nll", "val_kl", "val_kl_weighted", "val_loss", "geometry_anisotropy",
                    "geometry_self_similarity", "geometry_intra_sentence_similarity",
                    "geometry_self_similarity_adjusted", "geometry_intra_sentence_similarity_adjusted",
                    "geometry_active_units", "bleu"):
            assert isinstance(rec[key], int | float), key
        assert rec["stsb_spearman"] is None  # no stsb_dir given
        assert rec["curves"]["train/loss"] and rec["curves"]["val/loss"]
        assert rec["geometry_self_similarity_adjusted"] == pytest.approx(
            rec["geometry_self_similarity"] - rec["geometry_anisotropy"])

    with open(out / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["prior_std"]) for r in rows] == [0.2, 1.0]
    assert {"val_nll", "val_kl", "val_kl_weighted", "val_loss", "geometry_anisotropy", "geometry_self_similarity",
            "geometry_intra_sentence_similarity", "geometry_active_units", "stsb_spearman", "bleu"} <= set(rows[0])
    assert "curves" not in rows[0]
    table = json.loads((out / "sweep.json").read_text())
    assert [r["prior_std"] for r in table["runs"]] == [0.2, 1.0]
    assert table["columns"] == list(rows[0])
    for fig in FIGURES:
        data = (out / fig).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, fig


def test_rerun_skips_finished_runs(swept, capsys):
    out = swept / "sweep"
    events = _events(out)
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("s_*/record.json")}
    assert len(events) == 2 and len(mtimes) == 2
    assert sweep.main(["-c", str(swept / "sweep.yaml")]) == 0
    assert _events(out) == events  # no training ran
    assert {p: p.stat().st_mtime_ns for p in out.glob("s_*/record.json")} == mtimes
    assert capsys.readouterr().err.count("done, skipping") == 2


def test_trained_run_without_record_is_measured_not_retrained(swept):
    out = swept / "sweep"
    (out / "s_1.0" / "record.json").unlink()
    events = _events(out)
    assert sweep.main(["-c", str(swept / "sweep.yaml")]) == 0
    assert (out / "s_1.0" / "record.json").is_file()
    assert _events(out) == events


def test_sweep_yaml_is_valid_and_outside_train_configs():
    path = ROOT / "configs" / "sweeps" / "sweep.yaml"
    assert path not in set((ROOT / "configs").glob("*.yaml"))
    data = yaml.safe_load(path.read_text())
    assert data["prior_stds"] == [0.1, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert sweep.curve_pair(data["prior_stds"]) == (1.0, 0.4)


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_every_sweep_yaml_opens_with_its_command_and_has_known_keys(path):
    text = path.read_text()
    assert text.startswith("#") and f"vat sweep -c configs/sweeps/{path.name}" in text
    data = yaml.safe_load(text)
    assert set(data) <= {f.name for f in sweep.fields(sweep.SweepConfig)}
    assert (ROOT / data["train_config"]).is_file()
    cfg = sweep.SweepConfig(**{**data, "train_config": str(ROOT / data["train_config"]), "probe": str(ROOT)})
    cfg.validate(str(path))  # types and ranges (jobs, device, prior_stds)
    assert len(set(cfg.prior_stds)) == len(cfg.prior_stds)


@pytest.mark.parametrize("bad, msg", [({"prior_stds": [0.4, -1]}, "positive"), ({"probe": "/nonexistent"}, "probe"),
                                      ({"typo_key": 1}, "unknown key"), ({"jobs": 0}, "jobs"),
                                      ({"device": "tpu"}, "device")])
def test_bad_sweep_config_is_one_line_error(tmp_path, capsys, bad, msg):
    assert sweep.main(["-c", str(_config(tmp_path, **bad))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and msg in err[0]


def test_interrupted_training_resumes_from_last_checkpoint(swept, monkeypatch):
    """A run with checkpoints/last.ckpt but no .trained marker continues with --ckpt_path last."""
    import vat.cli.train

    out = swept / "sweep"
    run = out / "s_0.2"
    (run / "record.json").unlink()
    (run / sweep.TRAINED_MARKER).unlink()  # as if killed mid-training
    calls = []
    real = vat.cli.train.main
    monkeypatch.setattr(vat.cli.train, "main", lambda args: calls.append(args) or real(args))
    cfg = _config(swept / "resume", out_dir=str(out), extra_args=["--trainer.max_steps", "6", "--data.cache_dir",
                                                                   str(swept / "cache")])
    assert sweep.main(["-c", str(cfg), "--values", "0.2"]) == 0
    assert len(calls) == 1 and calls[0][-2:] == ["--ckpt_path", "last"]
    assert json.loads((run / "record.json").read_text())["step"] == 6


def test_parallel_jobs_train_each_value_in_its_own_process(tmp_path, capsys):
    """jobs=2: the data is prepared once, each value trains in a child process with its own
    log, and the parent writes the same table as a sequential sweep would."""
    cfg = _config(tmp_path, prior_stds=[0.3, 0.7], jobs=2, device="cpu")
    assert sweep.main(["-c", str(cfg)]) == 0
    out = tmp_path / "sweep"
    err = capsys.readouterr().err
    assert err.count("started in a child process") == 2 and "preparing the data once" in err
    caches = list((tmp_path / "cache").glob("data-*"))
    assert len(caches) == 1  # one tokenized cache, built by the parent, read by both children
    for name in ("s_0.3", "s_0.7"):
        log = (out / name / "sweep.log").read_text()
        assert "measuring" in log  # the child trained and measured this value
        assert json.loads((out / name / "record.json").read_text())["step"] == 4
    with open(out / "sweep.csv") as f:
        assert [float(r["prior_std"]) for r in csv.DictReader(f)] == [0.3, 0.7]


def test_failed_parallel_run_is_reported_with_its_log(tmp_path, capsys):
    """A child that fails does not stop the others; the parent names it and its log."""
    cfg = _config(tmp_path, prior_stds=[0.3, 0.7], jobs=2,
                  extra_args=["--trainer.max_steps", "4", "--data.cache_dir", str(tmp_path / "cache")])
    bad = tmp_path / "sweep" / "s_0.7" / "checkpoints"
    bad.mkdir(parents=True)
    (bad / "last.ckpt").write_text("not a checkpoint")  # resume of s=0.7 fails with a one-line error
    assert sweep.main(["-c", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: 1 of 2 runs failed: s=0.7") and "sweep.log" in err[-1]
    assert (tmp_path / "sweep" / "s_0.3" / "record.json").is_file()
    assert "last.ckpt" in (tmp_path / "sweep" / "s_0.7" / "sweep.log").read_text()
