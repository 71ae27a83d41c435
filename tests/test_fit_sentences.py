"""Which sentences feature statistics are fitted on: recorded training files are found from
any folder and never replaced by a file of the same name in the current one; `--fit-files` is
sampled in one pass (reservoir); a bare string is not read as a list of characters; `vat
features compare` replaces its output set whole; `--seed -1` and `--pooling` with `--features`
are one line."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from eval_helpers import write_sts
from helpers import export_folder

import vat
from vat.errors import OptionError
from vat.feature_spec import FeatureSpec
from vat.features.choice import features_for, stats_path_for
from vat.features.encoder import pooled_features
from vat.features.fitting import FitOptions, count_tokens, reservoir_sample, sample_lines
from vat.share.checkpoint import read_checkpoint
from vat.share.resolve import load_model
from vat.share.training_record import training_record

TRAIN = [f"the dog number {i} runs in the park" for i in range(24)]
UNRELATED = [f"a totally unrelated line {i} about ships" for i in range(24)]


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _checkpoint(tiny_ckpt, path: Path, record: dict | None, typed: list[str]) -> Path:
    ckpt = read_checkpoint(tiny_ckpt)
    if record is not None:
        ckpt["vat"]["training"] = record
    ckpt["datamodule_hyper_parameters"] = {"train_files": typed}  # as `vat train` was given them
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:12] for p in folder.iterdir()}


def _mean_of_mu(loaded, lines: list[str]) -> np.ndarray:
    return pooled_features(loaded.model, loaded.tokenizer, lines, [("mu", "mean")])[
        ("mu", "mean")
    ].mean(0)


# -- 1. recorded training files ------------------------------------------------------------
def test_training_files_are_recorded_absolute_and_found_from_any_folder(
    tiny_ckpt, tmp_path, monkeypatch
):
    train = _write(tmp_path / "data" / "train.txt", TRAIN)
    monkeypatch.chdir(tmp_path / "data")  # `vat train --data.train_files '[train.txt]'` here
    record = training_record(
        global_step=1,
        epoch=0,
        tokens_seen=10,
        sentences_seen=2,
        data_hparams={"train_files": ["train.txt"]},
    )
    assert record["data"]["train_files"] == [str(train)]
    ckpt = _checkpoint(
        tiny_ckpt, tmp_path / "run" / "checkpoints" / "best.ckpt", record, ["train.txt"]
    )
    _write(tmp_path / "elsewhere" / "train.txt", UNRELATED)
    monkeypatch.chdir(tmp_path / "elsewhere")  # a file of the same name here is not it

    loaded = load_model(ckpt)
    fitted = features_for(loaded, "mu/mean/pc1", save=False).fitted
    assert fitted.fit["files"] == [str(train)] and fitted.fit["sentences"] == len(TRAIN)
    np.testing.assert_allclose(fitted.arrays["mean"], _mean_of_mu(loaded, TRAIN), atol=1e-5)

    folder = export_folder(ckpt, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    assert config["training"]["data"]["train_files"] == [str(train)]
    model = vat.load(folder, device="cpu")
    assert model.feature_encoder("mu/mean/pc1", save=False).fitted.fit["files"] == [str(train)]


def test_a_recorded_name_is_never_read_from_the_current_folder(tiny_ckpt, tmp_path, monkeypatch):
    """Older records (bare names; relative paths as typed) are looked for in the model's own
    folders only; otherwise an OptionError naming fit_files says where."""
    import argparse

    from vat.cli.explore import corpus_lines, training_text

    monkeypatch.chdir(tmp_path)
    with gzip.open(tmp_path / "demo_en.txt.gz", "wt") as f:
        f.write("\n".join(UNRELATED) + "\n")
    _write(tmp_path / "train.txt", UNRELATED)

    # the shipped demo records ["demo_en.txt.gz"]
    demo = vat.load("demo-wordnet-d64", device="cpu")
    with pytest.raises(OptionError) as e:
        demo.encode(["a dog runs"], features="mu/mean/pc1")
    want = str(demo.loaded.path.absolute() / "demo_en.txt.gz")
    assert e.value.name == "fit_files" and f"looked for {want};" in str(e.value)
    assert "--" not in str(e.value)
    assert training_text(demo.loaded) is None
    _, _, note = corpus_lines(argparse.Namespace(corpus=None, corpus_limit=5), demo.loaded)
    assert f"looked for {want}" in note

    # an exported folder recording a bare name: nothing fitted, nothing written into it
    folder = export_folder(tiny_ckpt, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    config.setdefault("training", {})["data"] = {"train_files": ["train.txt"]}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(OptionError, match=f"looked for {folder.absolute() / 'train.txt'};"):
        vat.load(folder, device="cpu").feature_encoder("mu/mean/pc1")
    assert not stats_path_for(folder, FeatureSpec.parse("mu/mean/pc1")).exists()

    # an old checkpoint: a bare name recorded, a relative path typed; RUN/checkpoints/x.ckpt
    old = {"global_step": 1, "epoch": 0, "data": {"train_files": ["train.txt"]}}
    run = tmp_path / "run"
    ckpt = _checkpoint(tiny_ckpt, run / "checkpoints" / "old.ckpt", old, ["train.txt"])
    with pytest.raises(OptionError) as e:
        features_for(load_model(ckpt), "mu/mean/pc1", save=False)
    assert f"looked for {run / 'train.txt'} and {run / 'checkpoints' / 'train.txt'};" in str(
        e.value
    )
    train = _write(run / "train.txt", TRAIN)  # beside the run: the model's own folder
    loaded = load_model(ckpt)
    fitted = features_for(loaded, "mu/mean/pc1", save=False).fitted
    assert fitted.fit["files"] == [str(train)]
    np.testing.assert_allclose(fitted.arrays["mean"], _mean_of_mu(loaded, TRAIN), atol=1e-5)


# -- 2. one pass over --fit-files ----------------------------------------------------------
def test_reservoir_sample_is_uniform_exact_deterministic_and_in_order():
    """Over 4000 seeds, each of N=12 lines is kept with frequency n/N = 1/3 and each pair
    with n(n-1)/(N(N-1)) = 1/11 (about 5 standard errors of slack); every sample holds
    exactly n distinct lines in stream order; a seed always gives the same sample."""
    lines = [f"line {i}" for i in range(12)]
    chunks = [lines[:3], lines[3:4], lines[4:9], lines[9:]]  # the reservoir crosses chunks
    n, runs = 4, 4000
    single, pair = np.zeros(12), np.zeros((12, 12))
    for seed in range(runs):
        got = reservoir_sample(iter(chunks), n, seed)
        idx = [lines.index(s) for s in got]
        assert len(idx) == n and idx == sorted(set(idx))
        single[idx] += 1
        for a, b in itertools.combinations(idx, 2):
            pair[a, b] += 1
    assert np.abs(single / runs - n / 12).max() < 0.04
    pairs = pair[np.triu_indices(12, 1)] / runs
    assert np.abs(pairs - n * (n - 1) / (12 * 11)).max() < 0.025
    assert reservoir_sample(iter(chunks), n, 7) == reservoir_sample(iter(chunks), n, 7)
    assert reservoir_sample(iter(chunks), 50, 0) == lines  # n >= N: every line, in order


def test_sample_lines_memory_does_not_grow_with_the_file(tmp_path, monkeypatch):
    """300,000 lines in 4 KB chunks: sampling 20 holds about one chunk (reading them all, as
    before, holds some 20 MB of strings)."""
    import vat.data.corpus

    monkeypatch.setattr(vat.data.corpus, "CHUNK_BYTES", 4096)
    big = tmp_path / "big.txt"
    big.write_text("".join(f"l{i}\n" for i in range(300_000)))
    tracemalloc.start()
    try:
        got = sample_lines([big], 20, seed=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, peak
    numbers = [int(s[1:]) for s in got]
    assert len(numbers) == 20 and numbers == sorted(set(numbers))
    assert numbers[-1] > 150_000  # drawn from the whole file, not its head
    assert sample_lines(str(big), 20, seed=3) == got  # one path is one file; same seed
    with pytest.raises(OptionError, match="seed: must be at least 0"):
        sample_lines([big], 20, seed=-1)


# -- 3. the argument kinds of the fitting options --------------------------------------------
def test_fit_options_refuse_strings_bytes_and_none_but_take_one_path(
    tiny_ckpt, tmp_path, tiny_sentences
):
    ckpt = tmp_path / "m.ckpt"
    ckpt.write_bytes(tiny_ckpt.read_bytes())
    loaded = load_model(ckpt)
    spec = "mu/mean/pc1"
    stats = stats_path_for(ckpt, FeatureSpec.parse(spec))
    refused = [
        (
            dict(fit_sentences="abcdefgh"),
            "fit_sentences: expected a list of sentences; got a string",
        ),
        (dict(fit_sentences=b"ab\ncd"), "fit_sentences: expected a list of sentences; got bytes"),
        (dict(fit_sentences=["a dog", None]), "fit_sentences: entry 1 is None"),
        (dict(fit_sentences=[b"a", b"b"]), "fit_sentences: entry 0 is bytes"),
        (dict(fit_sentences=[]), "fit_sentences: fitting needs at least 2 sentences, got 0"),
        (dict(fit_files=[]), "fit_files: is empty"),
        (dict(fit_files=b"x.txt"), "fit_files: expected a list of paths of text files; got bytes"),
        (dict(fit_files=[None]), "fit_files: entry 0 is None"),
        (dict(fit_files=5), "fit_files: expected a list of paths of text files; got int"),
        (dict(count_files=[]), "count_files: is empty"),
        (dict(fit_files=str(tmp_path / "gone.txt")), "fit_files: file"),
        (dict(n_fit=1), "n_fit: must be at least 2"),
        (dict(seed=-1), "seed: must be at least 0"),
    ]
    for kwargs, message in refused:
        with pytest.raises(OptionError) as e:
            features_for(loaded, spec, FitOptions(**kwargs))
        assert str(e.value).startswith(message) and "--" not in str(e.value), (kwargs, e.value)
        assert not stats.exists()  # nothing fitted on letters was stored beside the model

    train = _write(tmp_path / "t.txt", tiny_sentences)
    one = features_for(
        loaded, spec, FitOptions(fit_files=str(train)), save=False
    ).fitted  # one path: one file
    assert one.fit["files"] == [str(train)] and one.fit["sentences"] == len(tiny_sentences)
    as_path = features_for(loaded, spec, FitOptions(fit_files=train), save=False).fitted
    np.testing.assert_array_equal(as_path.arrays["mean"], one.arrays["mean"])
    gen = features_for(
        loaded, spec, FitOptions(fit_sentences=(s for s in tiny_sentences)), save=False
    ).fitted
    np.testing.assert_allclose(gen.arrays["mean"], one.arrays["mean"], atol=1e-6)
    numpy_strings = features_for(
        loaded, spec, FitOptions(fit_sentences=np.array(tiny_sentences)), save=False
    ).fitted
    np.testing.assert_allclose(numpy_strings.arrays["mean"], one.arrays["mean"], atol=1e-6)
    counts = count_tokens(loaded.tokenizer, str(train), loaded.config.vocab_size)
    assert counts.sum() == sum(len(ids) for ids in loaded.tokenizer.encode_batch(tiny_sentences))
    sif = features_for(loaded, "mu/sif", FitOptions(count_files=str(train)), save=False).fitted
    assert sif.fit["count_files"] == [str(train)]


# -- 4, 5. vat features compare: the output set, --seed ----------------------------------------
@pytest.fixture
def compare_inputs(tmp_path, tiny_ckpt, tiny_sentences):
    data = tmp_path / "senteval"
    write_sts(data, "STS12", n=12)
    fit = _write(tmp_path / "fit.txt", tiny_sentences)
    return ["--ckpt", str(tiny_ckpt), "--data-dir", str(data), "--fit-files", str(fit)]


def test_an_interrupted_compare_leaves_the_old_set_whole(
    compare_inputs, tmp_path, monkeypatch, capsys
):
    import vat.cli.features as features
    import vat.features.compare as compare

    out = tmp_path / "cmp"
    assert features.main(["compare", *compare_inputs, "--output-dir", str(out)]) == 0
    before = _digests(out)
    assert sorted(before) == ["compare.csv", "compare.md", "compare.png"]

    def interrupted(rows, path):
        raise KeyboardInterrupt  # after compare.csv and compare.md are written

    monkeypatch.setattr(compare, "_plot", interrupted)
    # a smaller fitting sample: a new table (compare.md names the sample size)
    code = features.main(["compare", *compare_inputs, "--output-dir", str(out), "--overwrite",
                          "--fit-sentences", "5"])  # fmt: skip
    assert code == 130
    assert _digests(out) == before  # the old set whole, not new csv and md with an old png
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp", "fit.txt", "senteval"]
    monkeypatch.undo()
    assert features.main(["compare", *compare_inputs, "--output-dir", str(out), "--overwrite",
                          "--fit-sentences", "5"]) == 0  # fmt: skip
    after = _digests(out)
    assert after.keys() == before.keys() and after["compare.md"] != before["compare.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp", "fit.txt", "senteval"]
    capsys.readouterr()


def test_compare_output_folders_and_seed_are_one_line_before_any_work(
    tmp_path, monkeypatch, capsys
):
    from vat.cli.features import main

    run = tmp_path / "run"
    _write(run / "config.yaml", ["seed: 1"])
    (run / "checkpoints").mkdir()
    model = ["compare", "--model", str(tmp_path / "no.ckpt")]
    cases = [
        (run / "checkpoints", [".", "--overwrite"], "is the current folder or contains it"),
        (run / "checkpoints", ["..", "--overwrite"], "is the current folder or contains it"),
        (run, [str(run), "--overwrite"], "is the current folder or contains it"),
        (tmp_path, [str(run), "--overwrite"], "holds files vat features compare did not write"),
        (tmp_path, ["run/cmp", "--seed", "-1"], "--seed: must be at least 0, got -1"),
    ]
    for cwd, extra, needle in cases:
        monkeypatch.chdir(cwd)
        assert main([*model, "--output-dir", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], (extra, err)
    # a new folder inside the run folder passes the checks: the missing model is what stops it
    assert main([*model, "--output-dir", str(run / "cmp"), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--output-dir" not in err and not (run / "cmp").exists()
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml"]


# -- 6. --pooling with --features -----------------------------------------------------------
def test_pooling_with_features_is_refused_unless_default(tiny_ckpt, tmp_path, capsys):
    from vat.cli.evaluate import main as evaluate

    model = vat.load(tiny_ckpt, device="cpu")
    with pytest.raises(OptionError) as e:
        model.encode(["a dog runs", "a cat"], pooling="sum", features="mu/mean/none")
    assert e.value.name == "pooling" and "'sum'" in str(e.value) and "--" not in str(e.value)
    default = model.encode(["a dog runs", "a cat"], pooling="mean", features="mu/sum/none")
    np.testing.assert_allclose(default, model.encode(["a dog runs", "a cat"], pooling="sum"))

    code = evaluate(["--model", str(tmp_path / "no.ckpt"), "--tasks", "STS12", "--data-dir",
                     str(tmp_path), "--pooling", "sum", "--features", "mu/mean/none"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --pooling: 'sum' cannot")
