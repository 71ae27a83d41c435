"""Which sentences feature statistics are fitted on: a training checkpoint's fitting sample
(no training file is read again), else `--fit-files`, sampled in one pass (reservoir); a bare
string is not read as a list of characters; `vat features compare` replaces its output set
whole; `--seed -1` and `--pooling` with `--features` are one line."""

from __future__ import annotations

import hashlib
import itertools
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from eval_helpers import write_sts

import vat
from vat.errors import OptionError
from vat.feature_spec import FeatureSpec
from vat.features.choice import features_for, stats_path_for
from vat.features.encoder import pooled_features
from vat.features.fitting import FitOptions, count_tokens, reservoir_sample, sample_lines
from vat.share.checkpoint import read_checkpoint
from vat.share.resolve import load_model

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


# -- 1. the checkpoint's fitting sample ----------------------------------------------------
def test_the_fitting_sample_is_a_fixed_uniform_draw_of_the_training_split(tmp_path):
    from helpers import tiny_datamodule

    from vat.data.token_counts import fit_sample

    lines = [f"the dog number {i} runs in the park" for i in range(40)]
    dm = tiny_datamodule(tmp_path, _write(tmp_path / "train.txt", lines))
    dm.setup("fit")
    train = dm.splits["train"]
    every = [train[i] for i in range(len(train))]
    # more asked than there are: every training sentence, in corpus order
    whole = dm.fit_sample
    assert whole["ids"].dtype == torch.int32 and whole["lengths"].tolist() == [
        len(x) for x in every
    ]
    assert whole["ids"].tolist() == [i for x in every for i in x]

    def drawn(seed):
        sample = fit_sample(train, n=7, seed=seed)
        return [x.tolist() for x in sample["ids"].split(sample["lengths"].tolist())]

    first = drawn(0)
    where = [every.index(x) for x in first]  # each one a training sentence ...
    assert len(set(where)) == 7 and where == sorted(where)  # ... once each, in corpus order
    assert drawn(0) == first and drawn(1) != first  # fixed by its seed


def test_features_fit_on_the_sample_with_the_training_text_gone(
    tmp_path, capsys, senteval_dir, tiny_sentences
):
    """The issue's user path: train, move the training text away, then a post-processing spec
    is fitted from the checkpoint alone (`vat evaluate`, `vat export`); the export carries the
    statistics and no training text, so another spec on it takes --fit-files."""
    from helpers import TINY, one_line_error, train_main

    from vat.cli import main as vat_main
    from vat.features.encoder import pooled_ids

    train = _write(tmp_path / "text" / "train.txt", tiny_sentences)
    run = tmp_path / "run"
    code, err = train_main(
        ["fit", "-c", TINY, "--run_dir", str(run), f"--data.train_files=[{train}]",
         "--data.cache_dir", str(tmp_path / "cache")], capsys)  # fmt: skip
    assert code == 0, err
    train.unlink()
    (tmp_path / "text").rmdir()

    argv = ["evaluate", "--model", str(run), "--features", "mu/mean/whiten", "--tasks", "STS12",
            "--data-dir", str(senteval_dir), "--no-progress"]  # fmt: skip
    assert vat_main(argv) == 0, capsys.readouterr().err
    assert "STS12" in capsys.readouterr().out
    out = tmp_path / "export"
    assert vat_main(["export", str(run), str(out), "--features", "mu/mean/pc1"]) == 0
    capsys.readouterr()

    loaded = load_model(run)
    fitted = vat.load(out, device="cpu").default_features.fitted
    assert fitted.spec == FeatureSpec.parse("mu/mean/pc1")
    assert fitted.fit["from"] == "the checkpoint's fitting sample"
    assert fitted.fit["sentences"] == len(loaded.fit_sample) > 2
    mu = pooled_ids(loaded.model, loaded.fit_sample, [("mu", "mean")])[("mu", "mean")]
    np.testing.assert_allclose(fitted.arrays["mean"], mu.mean(0), atol=1e-5)
    assert vat.load(out, device="cpu").encode(["a dog runs"]).shape == (1, 32)

    # the export holds no training text: no sentence of the sample in any of its files
    text = "".join(f.read_text(errors="replace") for f in out.iterdir())
    shown = loaded.tokenizer.decode_batch(loaded.fit_sample)
    assert not [s for s in shown if len(s) > 12 and s in text]
    err = one_line_error(capsys, ["export", str(out), str(tmp_path / "again"),
                                  "--features", "mu/mean/whiten", "--no-progress"])  # fmt: skip
    assert err.startswith("error: --fit-files: ") and "carries the statistics of its own" in err


def test_a_checkpoint_without_a_sample_names_fit_files_and_a_damaged_one_is_one_line(
    tiny_ckpt, tmp_path, capsys
):
    from helpers import one_line_error

    from vat.errors import CheckpointError

    err = one_line_error(capsys, ["export", str(tiny_ckpt), str(tmp_path / "out"),
                                  "--features", "mu/mean/pc1", "--no-progress"])  # fmt: skip
    assert err.startswith("error: --fit-files: ") and "before vat kept a fitting sample" in err
    train = _write(tmp_path / "train.txt", TRAIN)
    fitted = features_for(load_model(tiny_ckpt), "mu/mean/pc1", FitOptions(fit_files=train),
                          save=False).fitted  # fmt: skip
    assert fitted.fit["files"] == [str(train)] and fitted.fit["sentences"] == len(TRAIN)

    raw = read_checkpoint(tiny_ckpt)
    for bad in ({"ids": torch.tensor([1, 2, 3]), "lengths": torch.tensor([2])},
                {"ids": torch.tensor([1, 10_000]), "lengths": torch.tensor([2])},
                {"ids": torch.tensor([1.0]), "lengths": torch.tensor([1])}, [1, 2]):  # fmt: skip
        raw["vat"]["fit_sample"] = bad
        torch.save(raw, tmp_path / "bad.ckpt")
        with pytest.raises(CheckpointError, match="'vat.fit_sample' is damaged"):
            load_model(tmp_path / "bad.ckpt")


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

    def interrupted(rows, path, baselines=()):
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
