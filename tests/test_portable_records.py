"""Portable training-file records: each training file recorded by its path inside the data
folder ($VAT_DATA_DIR) with its size and digest, beside the training machine's absolute paths
(provenance, which nothing opens); what leaves the machine (scripts/add_pretrained.py, a Hub
push) names no place on it; a continued run's tokens (init_from, tokens_total) on the card and in
the listing."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import add_main, export_folder, one_line_error
from test_hub import RecordingHfApi

import vat
from vat.cli import main as vat_main
from vat.errors import CheckpointError, OptionError, VatError
from vat.features.encoder import pooled_features
from vat.share.checkpoint import read_checkpoint
from vat.share.export import export_model
from vat.share.model_card import model_card
from vat.share.pretrained import SHIPPED_DIR_ENV, listing_facts
from vat.share.resolve import load_model
from vat.share.training_record import (
    DATA_DIR_ENV,
    RECORDS_KEY,
    machine_path,
    machine_paths,
    portable_training,
    training_record,
)

TRAIN = [f"the dog number {i} runs in the park" for i in range(24)]
OTHER = [f"the cat number {i} sits in the yard" for i in range(24)]  # same length as TRAIN


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


@pytest.fixture
def trained(tiny_ckpt, tmp_path, monkeypatch):
    """A checkpoint as `vat train` records it on the training machine: two files under its
    data folder (one through a glob) and one outside it. Returns (checkpoint, data folder,
    the outside file)."""
    data = tmp_path / "machine" / "data"
    _write(data / "corpus" / "a.1.txt", TRAIN[:12])
    _write(data / "corpus" / "a.2.txt", TRAIN[12:])
    outside = _write(tmp_path / "machine" / "mine.txt", ["an extra line of mine"] * 3)
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    monkeypatch.chdir(tmp_path / "machine")  # the files as `vat train` was given them
    record = training_record(
        global_step=1,
        epoch=0,
        tokens_seen=10,
        sentences_seen=2,
        data_hparams={"train_files": ["data/corpus/a.[12].txt", "mine.txt"]},
    )
    ckpt = read_checkpoint(tiny_ckpt)
    ckpt["vat"]["training"] = record
    path = tmp_path / "machine" / "run" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save(ckpt, path)
    return path, data, outside


def _mean_of_mu(loaded, lines: list[str]) -> np.ndarray:
    return pooled_features(loaded.model, loaded.tokenizer, lines, [("mu", "mean")])[
        ("mu", "mean")
    ].mean(0)


# -- what training records -----------------------------------------------------------------
def test_training_records_absolute_paths_and_each_file_inside_the_data_folder(trained):
    ckpt, data, outside = trained
    recorded = read_checkpoint(ckpt)["vat"]["training"]["data"]
    assert recorded["train_files"] == [str(data / "corpus" / "a.[12].txt"), str(outside)]
    a1, a2 = data / "corpus" / "a.1.txt", data / "corpus" / "a.2.txt"
    assert recorded[RECORDS_KEY] == [  # the glob expanded, each file with its size and digest
        {"path": "corpus/a.1.txt", "bytes": a1.stat().st_size, "digest": _digest(a1)},
        {"path": "corpus/a.2.txt", "bytes": a2.stat().st_size, "digest": _digest(a2)},
        {"name": "mine.txt", "bytes": outside.stat().st_size, "digest": _digest(outside)},
    ]


@pytest.mark.parametrize(
    "bad, error, says",
    [
        ([{"path": "../../etc/passwd"}], VatError, "training.data.train_files[0] names a place"),
        ([{"path": "/etc/passwd"}], VatError, "training.data.train_files[0] names a place"),
        ([{"name": 3}], CheckpointError, f"training.data.{RECORDS_KEY} is [{{'name': 3}}]"),
        ("corpus/a.txt", CheckpointError, f"training.data.{RECORDS_KEY} is 'corpus/a.txt'"),
    ],
)
def test_a_malformed_record_or_one_naming_a_place_here_is_refused_for_the_hub(
    trained, tmp_path, bad, error, says
):
    """The records are provenance, which nothing opens; what leaves the machine is refused in
    one line when they are no list of names or name a place on it, before anything is written."""
    ckpt, _, _ = trained
    raw = read_checkpoint(ckpt)
    raw["vat"]["training"]["data"][RECORDS_KEY] = bad
    torch.save(raw, ckpt)
    with pytest.raises(error, match=re.escape(says)):
        export_model(load_model(ckpt), tmp_path / "out", repo_id="me/x")
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_from_before_the_record_names_its_data_as_vat_train_was_given_it(
    tiny_ckpt, tmp_path
):
    """Its card facts come from the checkpoint alone; a config.yaml beside its run is not read."""
    raw = read_checkpoint(tiny_ckpt)
    raw["vat"].pop("training", None)
    raw["datamodule_hyper_parameters"] = {"train_files": ["data/a.txt"], "max_len": 64}
    ckpt = tmp_path / "run" / "checkpoints" / "old.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save(raw, ckpt)
    (tmp_path / "run" / "config.yaml").write_text("data: {train_files: [elsewhere.txt]}\n")
    assert load_model(ckpt).training["data"] == {"train_files": ["data/a.txt"], "max_len": 64}


# -- what leaves the machine -------------------------------------------------------------------
def test_machine_paths_are_found_in_any_string():
    for text in ("/home/u/data/a.txt", "../shared/data/corpus/a.gz", "~/data", "~bob/x",
                 "C:\\data\\a.txt", "trained on `/scratch/a.txt`", "x=/opt/a", "a/../../b",
                 ".."):  # fmt: skip
        assert machine_path(text), text
    for text in ("corpus/a.txt.gz", "nats/token", "28.00 / 0.770", "~650M tokens", "w1..wn",
                 "https://pypi.org/x", "lines <= 63", "bench/gpu_suite.sh --plan x"):  # fmt: skip
        assert machine_path(text) is None, text
    config = {"training": {"data": {"train_files": ["corpus/a", "/home/u/b"]}}, "n": 3}
    assert machine_paths(config) == [("training.data.train_files[1]", "/home/u/b")]


def test_portable_training_keeps_only_the_records(trained):
    ckpt, data, outside = trained
    record = read_checkpoint(ckpt)["vat"]["training"]
    out = portable_training(record)
    assert out["data"]["train_files"] == ["corpus/a.1.txt", "corpus/a.2.txt", "mine.txt"]
    assert out["data"][RECORDS_KEY] == record["data"][RECORDS_KEY]
    assert machine_paths(out) == [] and record["data"]["train_files"][1] == str(outside)
    # an older record, without them: each file named against the data folder, none opened
    old = {"data": {"train_files": [str(data / "corpus" / "a.1.txt"), "/gone/b.txt", "c.txt"]}}
    assert portable_training(old)["data"][RECORDS_KEY] == [
        {"path": "corpus/a.1.txt"},
        {"name": "b.txt"},
        {"name": "c.txt"},
    ]
    started = {"init_from": {"model": "/home/u/runs/x/checkpoints/last.ckpt", "kind": "checkpoint"}}
    assert portable_training(started)["init_from"]["model"] == "last.ckpt"


def test_pretrained_add_writes_portable_records_and_refuses_a_machine_path(
    trained, tmp_path, monkeypatch, capsys
):
    ckpt, data, _ = trained
    folder = export_folder(ckpt, tmp_path / "export", features="mu/mean/none")
    config = json.loads((folder / "config.json").read_text())
    assert config["training"]["data"]["train_files"][0].startswith("/")  # the machine's own
    reg = tmp_path / "registry"
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(reg))
    check = _write(data / "check" / "sentences.txt", TRAIN[:3])
    argv = [str(folder), "--name", "tiny-portable", "--check-file", str(check)]
    assert add_main(argv) == 0
    capsys.readouterr()
    shipped = reg / "tiny-portable"
    config = json.loads((shipped / "config.json").read_text())
    assert config["training"]["data"]["train_files"] == [
        "corpus/a.1.txt",
        "corpus/a.2.txt",
        "mine.txt",
    ]
    info = json.loads((shipped / "shipped.json").read_text())
    assert info["fp32_match"]["from"] == "check/sentences.txt"  # inside the data folder
    for f in shipped.iterdir():
        assert str(tmp_path) not in f.read_text(errors="replace"), f.name
    # the shipped copy carries no training text: another spec is fitted on files named
    with pytest.raises(OptionError, match="carries the statistics of its own spec") as e:
        vat.load("tiny-portable", device="cpu").feature_encoder("mu/mean/pc1", save=False)
    assert e.value.name == "fit_files"

    # a path in a text given, or left anywhere in config.json, is refused naming the key,
    # before any work
    err = one_line_error(capsys, [str(folder), "--name", "other",
                                   "--rebuild", "cd ~/vat && make"], main=add_main)  # fmt: skip
    assert "shipped.json rebuild names a place on this machine ('~/vat')" in err
    config = json.loads((folder / "config.json").read_text())
    config["measurements"] = [{"title": "m", "text": "run in /home/u/runs/x", "rows": []}]
    (folder / "config.json").write_text(json.dumps(config))
    err = one_line_error(capsys, [*argv[:5], "--overwrite"], main=add_main)
    assert "cannot add tiny-portable to the shipped models: config.json measurements[0].text" in err
    assert "'/home/u/runs/x'" in err
    assert sorted(p.name for p in reg.iterdir()) == ["tiny-portable"]


def test_a_hub_push_writes_portable_records_and_refuses_a_folder_with_machine_paths(
    trained, tmp_path, capsys, monkeypatch
):
    import huggingface_hub

    ckpt, _, _ = trained
    api = RecordingHfApi()
    vat.load(ckpt, device="cpu").push_to_hub("me/portable", api=api)
    config = json.loads(api.uploaded["config.json"])
    assert config["training"]["data"]["train_files"] == [
        "corpus/a.1.txt",
        "corpus/a.2.txt",
        "mine.txt",
    ]
    assert str(tmp_path) not in api.uploaded["config.json"].decode()
    assert str(tmp_path) not in api.uploaded.get("features.safetensors", b"").decode(
        errors="replace"
    )

    # `vat export MODEL DIR --push-to-hub`: the folder written is the portable one; the
    # upload then fails offline, after the folder is complete
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    out = tmp_path / "for-hub"
    assert vat_main(["export", str(ckpt), str(out), "--push-to-hub", "me/portable"]) == 2
    assert "cannot push to the Hugging Face Hub repo me/portable" in capsys.readouterr().err
    assert str(tmp_path) not in (out / "config.json").read_text()

    # a folder exported for this machine keeps its absolute paths: pushing it is refused
    local = export_folder(ckpt, tmp_path / "local")
    capsys.readouterr()
    err = one_line_error(capsys, ["export", str(local), "--push-to-hub", "me/portable"])
    assert f"cannot push {local} to me/portable: config.json training.data.train_files[0]" in err
    assert "export it again for the Hub" in err
    with pytest.raises(VatError, match="training.data.train_files\\[0\\] names a place"):
        from vat.share.hub import upload

        upload(local, "me/portable", api=RecordingHfApi())


# -- a continued run (vat train --init-from) -----------------------------------------------------
CONTINUED = {
    "global_step": 500,
    "tokens_seen": 1_000_000,
    "tokens_total": 2_651_086,
    "init_from": {
        "model": "demo-wordnet-d64",
        "kind": "shipped",
        "global_step": 2000,
        "tokens_seen": 1_651_086,
    },
    "data": {"train_files": ["corpus/a.txt"]},
}


def test_the_card_and_the_listing_count_the_tokens_behind_the_whole_model(tiny_ckpt, tmp_path):
    config = {
        "model_config": {
            "d_model": 32,
            "n_encoder_layers": 2,
            "n_decoder_layers": 2,
            "vocab_size": 100,
        },  # fmt: skip
        "prior_std": 0.4,
        "training": CONTINUED,
    }
    card = model_card(config, 100)
    assert (
        "- training tokens: 1,000,000 (this run) + 1,651,086 (started from demo-wordnet-d64) = "
        "2,651,086" in card
    )
    assert (
        "- started from: demo-wordnet-d64 (a model that ships with vat, at its step 2,000)" in card
    )
    facts = listing_facts(config, 0, "float16")
    assert facts["trained on"] == "a.txt (2.65M tokens, from demo-wordnet-d64)"
    plain = {**config, "training": {"tokens_seen": 1_000_000}}
    assert "- training tokens: 1,000,000\n" in model_card(plain, 100)
    assert listing_facts(plain, 0, "float16")["trained on"] == "not recorded (1M tokens)"

    # `vat export` carries them from the checkpoint's record into config.json and the card
    raw = read_checkpoint(tiny_ckpt)
    raw["vat"]["training"] = CONTINUED
    ckpt = tmp_path / "continued.ckpt"
    torch.save(raw, ckpt)
    folder = export_folder(ckpt, tmp_path / "out", features="mu/mean/none")
    training = json.loads((folder / "config.json").read_text())["training"]
    assert training["init_from"] == CONTINUED["init_from"]
    assert training["tokens_total"] == CONTINUED["tokens_total"]
    assert "= 2,651,086" in (folder / "README.md").read_text()
