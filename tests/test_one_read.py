"""A model argument is resolved and read once, at the edge, and the loaded object travels.
Every `torch.load` and `safe_open` is counted by file: each command, and each Python entry
point, reads the model's checkpoint (or each file of its folder) exactly once."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch
from eval_helpers import write_mini_senteval
from helpers import checkpoint_with_counts, export_folder

import vat
from vat.share.checkpoint import read_checkpoint
from vat.share.pretrained import PACKAGE_SHIPPED_DIR
from vat.share.resolve import load_model

DEMO = "demo-wordnet-d64"  # a model that ships with vat (tests/test_shipped.py)
DEMO_DIR = PACKAGE_SHIPPED_DIR / DEMO

FAST = ["--no-progress", "--device", "cpu"]


@pytest.fixture
def reads(monkeypatch):
    """{resolved path: number of torch.load / safe_open calls} while the test runs."""
    counts: Counter[Path] = Counter()
    real_load, real_open = torch.load, safetensors.safe_open

    def counting_load(f, *args, **kwargs):
        if isinstance(f, str | os.PathLike):
            counts[Path(f).resolve()] += 1
        return real_load(f, *args, **kwargs)

    def counting_open(filename, *args, **kwargs):
        counts[Path(filename).resolve()] += 1
        return real_open(filename, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    monkeypatch.setattr(safetensors, "safe_open", counting_open)
    monkeypatch.setattr(safetensors.torch, "safe_open", counting_open)  # load_model's name
    return counts


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_ckpt, tiny_sentences):
    """The three local kinds of model argument, with what `vat train` records (token counts,
    training files): {kind: (argument, files that make up the model)}, and the data."""
    root = tmp_path_factory.mktemp("one_read")
    lines = tiny_sentences + [s.lower() + " again" for s in tiny_sentences]
    run = root / "run"
    last, train, _ = checkpoint_with_counts(
        tiny_ckpt, root, lines, run / "checkpoints" / "last.ckpt", (0, 1, 2, 3)
    )
    single = root / "model.ckpt"
    shutil.copy(last, single)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = export_folder(single, root / "exported")  # layer0/sif/none: with statistics
    assert (folder / "features.safetensors").is_file()
    return {
        "checkpoint": (single, [single]),
        "run folder": (run, [last]),
        "exported folder": (
            folder,
            [folder / "model.safetensors", folder / "features.safetensors"],
        ),
        "shipped model": (
            DEMO,
            [DEMO_DIR / "model.safetensors", DEMO_DIR / "features.safetensors"],
        ),
        "data": write_mini_senteval(root / "senteval", n=12),
        "lines": lines,
        "train": train,
    }


KINDS = ["checkpoint", "run folder", "exported folder", "shipped model"]


def assert_read_once(reads: Counter, files: list[Path]) -> None:
    """Each file of the model read exactly once, and no file at all read twice."""
    for f in files:
        assert reads[f.resolve()] == 1, (f, dict(reads))
    assert all(n == 1 for n in reads.values()), dict(reads)


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_reads_its_model_once(models, kind, reads, tmp_path, capsys):
    from vat.cli.evaluate import main

    model, files = models[kind]
    data = str(models["data"])
    base = ["--model", str(model), "--tasks", "STS12", "--data-dir", data, *FAST]
    assert main(base) == 0, capsys.readouterr().err
    assert_read_once(reads, files)
    reads.clear()
    # a spec fitted on the model's training files (their text is read, not the model; an
    # exported folder records them by name only, so it is given them)
    folder = kind in ("exported folder", "shipped model")
    fit = ["--fit-files", str(models["train"])] if folder else []
    assert main([*base, "--features", "mu/mean/whiten", *fit]) == 0, capsys.readouterr().err
    assert_read_once(reads, files)


@pytest.mark.parametrize("kind", KINDS)
def test_export_reads_its_model_once(models, kind, reads, tmp_path, capsys):
    """`vat export` read a checkpoint twice before."""
    from vat.cli.export import main

    model, files = models[kind]
    argv = [str(model), str(tmp_path / "out"), "--evaluate", "STS12"]
    assert main([*argv, "--data-dir", str(models["data"]), "--device", "cpu"]) == 0
    assert_read_once(reads, files)


@pytest.mark.parametrize("kind", KINDS)
def test_generate_geometry_and_compare_read_their_model_once(models, kind, reads, tmp_path, capsys):
    from vat.cli.features import main as features_main
    from vat.cli.generate import main as generate_main
    from vat.cli.geometry import main as geometry_main

    model, files = models[kind]
    assert generate_main(["reconstruct", "--model", str(model), "A cat.", "--max-len", "4"]) == 0
    assert_read_once(reads, files)
    reads.clear()
    probe = tmp_path / "probe.txt"
    probe.write_text("\n".join(models["lines"]) + "\n")
    argv = ["--model", str(model), "--probe", str(probe), "--min-count", "2", *FAST]
    assert geometry_main(argv) == 0, capsys.readouterr().err
    assert_read_once(reads, files)
    reads.clear()
    argv = ["compare", "--model", str(model), "--output-dir", str(tmp_path / "cmp")]
    argv += (
        ["--fit-files", str(models["train"])]
        if kind in ("exported folder", "shipped model")
        else []
    )
    assert features_main([*argv, "--data-dir", str(models["data"])]) == 0
    assert_read_once(reads, files)


def test_finetune_reads_its_model_once_for_every_task(models, reads, tmp_path, capsys):
    """Each task fine-tunes a copy of the one loaded model (it was read once per task)."""
    from vat.cli.evaluate import main
    from vat.eval.finetune import FinetuneSettings, finetune_tasks

    model, files = models["checkpoint"]
    argv = ["--model", str(model), "--finetune", "--tasks", "MR,CR", "--epochs", "1"]
    assert main([*argv, "--data-dir", str(models["data"]), *FAST]) == 0
    assert_read_once(reads, files)
    loaded = load_model(model)  # and the loaded model itself is left as it was
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    settings = FinetuneSettings(epochs=1, progress=False)
    finetune_tasks(loaded, ["MR"], models["data"], settings)
    assert all(torch.equal(before[k], v) for k, v in loaded.model.state_dict().items())


def test_mteb_command_reads_its_model_once(models, reads, tmp_path, monkeypatch, capsys):
    """(The task data cannot be fetched offline: the command ends in one line after the
    model was read, once.)"""
    import huggingface_hub

    from vat.cli.mteb import main

    model, files = models["exported folder"]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    argv = ["--model", str(model), "--tasks", "STSBenchmark", "--output", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "cannot fetch MTEB task data" in capsys.readouterr().err
    assert_read_once(reads, files)


def test_python_entry_points_read_once(models, reads):
    """vat.load and everything done with it; sentence-transformers, transformers' AutoModel
    and mteb's registry each read the folder once; a Hub id is a download read once."""
    import mteb
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from vat.integrations.mteb import register_model
    from vat.integrations.sentence_transformers import to_sentence_transformer

    folder, files = models["exported folder"]
    lines = models["lines"][:4]
    model = vat.load(folder, device="cpu")
    want = model.encode(lines)
    model.encode(lines, features="mu/mean/none")
    model.reconstruct(lines, max_len=4)
    to_sentence_transformer(model).encode(lines)
    register_model(model)
    np.testing.assert_allclose(mteb.get_model(str(folder)).model.encode(lines), want, atol=1e-6)
    assert_read_once(reads, files)
    for load in (
        lambda: SentenceTransformer(str(folder), trust_remote_code=True, device="cpu"),
        lambda: AutoModel.from_pretrained(folder),
    ):
        reads.clear()
        np.testing.assert_allclose(load().encode(lines), want, atol=1e-5)
        assert_read_once(reads, files)


def test_a_hub_id_is_downloaded_once_and_read_once(models, reads, monkeypatch, tmp_path):
    import vat.share.resolve as resolve

    folder, _ = models["exported folder"]
    snapshot = tmp_path / "hub-cache" / "snapshot"
    shutil.copytree(folder, snapshot)
    downloads = []

    def download(repo_id, **kwargs):
        downloads.append(repo_id)
        return snapshot

    monkeypatch.setattr(resolve, "download", download)
    model = vat.load("someone/vat-tiny", device="cpu")
    source = model.loaded.source
    assert (source.kind, source.location, source.path) == ("hub", "someone/vat-tiny", snapshot)
    assert source.writable_home is None  # nothing fitted is ever written into the Hub cache
    assert downloads == ["someone/vat-tiny"]
    assert_read_once(reads, [snapshot / "model.safetensors", snapshot / "features.safetensors"])
    np.testing.assert_array_equal(
        model.encode(models["lines"]), vat.load(folder, device="cpu").encode(models["lines"])
    )


@pytest.mark.slow
def test_a_resume_reads_its_checkpoint_once(tmp_path, reads, capsys):
    """LightningCLI's hyperparameters, the run folder's resume checks and the Trainer's
    restore take one read (before: four torch.loads of last.ckpt)."""
    from helpers import fit_args

    from vat.cli.train import main

    run = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(fit_args(run, tmp_path / "cache")) == 0
        last = run / "checkpoints" / "last.ckpt"
        steps = read_checkpoint(last)["global_step"]
        reads.clear()
        resume = [*fit_args(run, tmp_path / "cache"), "--ckpt_path", "last"]
        assert main([*resume, "--trainer.max_steps", str(steps + 2)]) == 0, capsys.readouterr()
    assert reads[last.resolve()] == 1, dict(reads)
    assert read_checkpoint(last)["global_step"] == steps + 2


def test_config_counts_are_checked_in_one_place():
    """errors.check_count is the one positive-count check: a config key is named as the YAML
    spells it, a Python argument as a flag on the command line."""
    from vat.errors import OptionError, check_count, cli_message
    from vat.train.schedules import KLSchedule

    with pytest.raises(
        OptionError, match=r"^model.loss.kl_schedule.warmup_steps: must be at least"
    ):
        KLSchedule(warmup_steps=0)
    with pytest.raises(OptionError) as e:
        check_count(True, "num_samples")  # a bool is no count
    assert cli_message(e.value).startswith("--num-samples: ")
    with pytest.raises(OptionError) as e:
        check_count(0, "model.optim.warmup_steps")
    assert cli_message(e.value).startswith("model.optim.warmup_steps: must be at least 1")


def test_models_fixture_records_what_training_records(models):
    """The fixture's checkpoint carries token counts and a fitting sample, as vat train's do."""
    loaded = load_model(models["checkpoint"][0])
    assert loaded.token_counts is not None and loaded.fit_sample
    folder = load_model(models["exported folder"][0])
    assert str(folder.feature_spec) == "layer0/sif/none" and folder.own_features is not None
    assert json.loads((models["exported folder"][0] / "config.json").read_text())["training"]
