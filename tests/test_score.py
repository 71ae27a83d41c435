"""`vat score` and `vat.load(...).score`: the text-VAE table on a .ckpt, a run folder and an
exported folder, the same numbers from both, the representation columns, and bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import export_folder

import vat
from vat.cli.score import main
from vat.errors import OptionError, VatError
from vat.score.representation import alignment, uniformity

FAST = ["--samples", "4", "--diversity-samples", "2", "--prior-samples", "3", "--no-progress"]
NUMBERS = ("likelihood", "latent", "reconstruction", "samples", "representation")


@pytest.fixture(scope="module")
def lines(tiny_sentences) -> list[str]:
    return tiny_sentences[:12]


@pytest.fixture
def text_file(tmp_path, lines) -> Path:
    p = tmp_path / "lines.txt"
    p.write_text("\n".join(lines[:6]) + "\n\n" + "\n".join(lines[6:]) + "\n")  # a blank line
    return p


@pytest.fixture
def sts_file(tmp_path, lines) -> Path:
    """Pairs in STS-B's layout: genre, file, year, id, score, sentence, sentence."""
    rows = [
        f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\t{lines[i]}\t{lines[i + 1]}"
        for i, score in enumerate((5.0, 4.2, 1.0, 4.0, 0.4, 2.5))
    ]
    p = tmp_path / "pairs.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


@pytest.fixture(scope="module")
def models(tiny_ckpt, tmp_path_factory) -> dict[str, Path]:
    run = tmp_path_factory.mktemp("run") / "demo"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_ckpt, run / "checkpoints" / "last.ckpt")
    folder = export_folder(tiny_ckpt, tmp_path_factory.mktemp("exp") / "model")
    return {"checkpoint": tiny_ckpt, "run folder": run, "exported folder": folder}


def cli(argv, capsys) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("kind", ["checkpoint", "run folder", "exported folder"])
def test_command_and_api_give_the_same_table(
    kind, models, text_file, sts_file, lines, tmp_path, capsys
):
    out = tmp_path / "score.json"
    argv = ["--model", models[kind], text_file, *FAST, "--sts-pairs", sts_file, "--output", out]
    rc, stdout, _ = cli([*argv, "--device", "cpu"], capsys)
    assert rc == 0
    got = json.loads(out.read_text())
    assert got["data"]["sentences"] == len(lines)  # the blank line is skipped
    assert "NLL (importance-weighted, K=4)" in stdout and "PPL" in stdout and "AU" in stdout

    model = vat.load(models[kind], device="cpu")
    table = model.score(
        lines, samples=4, diversity_samples=2, prior_samples=3, sts_pairs=sts_file
    ).to_dict()
    for key in NUMBERS:
        assert table[key] == got[key], key

    lik = table["likelihood"]
    assert lik["ppl"] == pytest.approx(math.exp(lik["nll_per_token"]))
    assert lik["neg_elbo"] == pytest.approx(lik["reconstruction"] + lik["kl"])
    tokens = sum(len(x) + 1 for x in model.tokenizer.encode_batch(lines))  # subwords + </s>
    assert got["data"]["target_tokens"] == tokens
    assert lik["nll_per_token"] == pytest.approx(lik["nll"] * len(lines) / tokens)
    assert lik["nll"] <= lik["neg_elbo_same_draws"] + 1e-9  # Jensen, on the same draws
    assert 0 <= table["latent"]["au"] <= model.dim
    assert table["latent"]["mi"] <= math.log(min(512, table["latent"]["latent_tokens"])) + 1e-9

    # alignment and uniformity of the model's own features: the folder's spec, else mu/mean
    rep = table["representation"]
    pairs = [r.split("\t") for r in sts_file.read_text().splitlines()]
    positive = [(a, b) for *_, s, a, b in pairs if float(s) >= 4]
    assert rep["positive_pairs"] == 3 == len(positive)
    fa = model.encode([a for a, _ in positive])
    fb = model.encode([b for _, b in positive])
    assert rep["alignment"] == pytest.approx(alignment(fa, fb), abs=1e-6)
    distinct = sorted({x for *_, a, b in pairs for x in (a, b)})
    assert rep["uniformity"] == pytest.approx(uniformity(model.encode(distinct)), abs=1e-6)
    own = model.loaded.feature_spec
    assert rep["features"] == (str(own) if own is not None else "mu/mean/none")
    assert rep["features"] in stdout


def test_one_sample_is_the_same_draws_elbo_and_seeds_repeat(models, lines):
    model = vat.load(models["checkpoint"], device="cpu")
    fast = dict(diversity_samples=0, prior_samples=0, representation=False)
    one = model.score(lines, samples=1, **fast).likelihood
    assert one["nll"] == pytest.approx(one["neg_elbo_same_draws"], abs=1e-9)  # L_1 is log w_1
    a = model.score(lines, samples=5, seed=3, **fast).to_dict()
    b = model.score(lines, samples=5, seed=3, **fast).to_dict()
    c = model.score(lines, samples=5, seed=4, **fast).to_dict()
    assert a["likelihood"] == b["likelihood"] and a["latent"] == b["latent"]
    assert a["likelihood"]["nll"] != c["likelihood"]["nll"]
    # the closed-form KL and the greedy reconstruction draw nothing
    assert a["likelihood"]["kl"] == c["likelihood"]["kl"]
    assert a["reconstruction"] == c["reconstruction"]


def test_long_lines_are_cut_and_counted(models, capsys, tmp_path):
    long = " ".join(["word"] * 200)
    p = tmp_path / "long.txt"
    p.write_text(f"a short line\n{long}\n")
    rc, stdout, _ = cli(["--model", models["checkpoint"], p, *FAST, "--no-representation"], capsys)
    assert rc == 0
    assert "1 sentence(s) had more than max_len - 1 = 47 subwords" in stdout


def test_representation_is_skipped_without_sts_data(models, lines, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("VAT_SENTEVAL_DIR", str(tmp_path / "nothing-here"))
    table = vat.load(models["checkpoint"], device="cpu").score(
        lines, samples=2, diversity_samples=0, prior_samples=0
    )
    assert "no STS-B test split" in table.representation["skipped"]
    assert "alignment and uniformity: skipped" in table.table()


def test_sts_b_test_from_the_senteval_folder(models, lines, senteval_dir, capsys, tmp_path):
    p = tmp_path / "three.txt"
    p.write_text("\n".join(lines[:3]) + "\n")
    argv = ["--model", models["exported folder"], p, *FAST, "--data-dir", senteval_dir]
    rc, stdout, _ = cli(argv, capsys)
    assert rc == 0
    # SimCSE's positive pairs: the 338 test pairs scored 4 or more, of 1,379
    assert "on STS-B test: alignment" in stdout and "(338 pairs scored >= 4)" in stdout


def test_bad_input(models, text_file, tmp_path, capsys):
    ckpt = models["checkpoint"]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    cases = [
        ([ckpt, empty], f"FILE {empty}: no non-empty line"),
        ([ckpt, text_file, "--samples", "0"], "--samples: must be at least 1"),
        (
            [ckpt, text_file, "--prior-samples", "1"],
            "--prior-samples: must be 0 (skip) or at least 2",
        ),
        ([ckpt, text_file, "--limit", "0"], "--limit: must be at least 1"),
        ([ckpt, text_file, "--sts-pairs", tmp_path / "none.csv"], "--sts-pairs"),
        ([ckpt, tmp_path], "is a folder, expected a regular file"),
    ]
    for args, message in cases:
        rc, _, err = cli(["--model", *args], capsys)
        assert rc == 2 and message in err and err.count("\n") == 1, err
    out = tmp_path / "kept.json"
    out.write_text("{}")
    rc, _, err = cli(["--model", ckpt, text_file, "--output", out], capsys)
    assert rc == 2 and "--overwrite" in err and out.read_text() == "{}"


def test_api_refuses_bad_arguments_in_its_own_terms(models):
    model = vat.load(models["checkpoint"], device="cpu")
    for sentences, message in [
        (None, "sentences: expected a string or a list of strings, got None"),
        (b"bytes", "sentences: expected a string or a list of strings, got bytes"),
        (
            [b"bytes"],
            "sentences: expected a string or a list of strings, but sentences[0] is bytes",
        ),
        (["ok", "  "], "sentences: item 2 is empty"),
        ([], "sentences: is empty"),
    ]:
        with pytest.raises(OptionError, match=message.replace("(", r"\(").replace("[", r"\[")):
            model.score(sentences, samples=1)
    for kwargs, name in [
        ({"samples": 0}, "samples"),
        ({"samples": 2.5}, "samples"),
        ({"batch_size": -1}, "batch_size"),
        ({"diversity_samples": 1}, "diversity_samples"),
        ({"seed": "x"}, "seed"),
    ]:
        with pytest.raises(OptionError) as e:
            model.score(["a line"], **kwargs)
        assert e.value.name == name and "--" not in str(e.value)
    with pytest.raises(VatError, match="sts_pairs"):
        model.score(["a line"], samples=1, sts_pairs="no-such-file.csv")
    # a generator of strings is a sequence of sentences too
    got = model.score((s for s in ["a line", "another line"]), samples=1, diversity_samples=0,
                      prior_samples=0, representation=False)  # fmt: skip
    assert got.data["sentences"] == 2
    assert np.isfinite(got.likelihood["nll"])


def test_a_nearly_deterministic_posterior_is_said_by_the_one_rule():
    """vat score's note is vat.generate.variation's rule: the shipped demo (held at 25 nats
    per token) gets none; the same weights with the posterior narrowed 1000-fold do."""
    sentences = ["He held out his hand.", "Give me any peaches you don't want."]
    settings = dict(samples=2, diversity_samples=4, prior_samples=0, representation=False)
    model = vat.load("demo-wordnet-d64", device="cpu")
    table = model.score(sentences, **settings)
    v = table.samples["variational"]
    assert v["agreement_samples"] == 4 * sum(
        m.strip() == x for m, x in zip(model.reconstruct(sentences), sentences)
    )
    assert v["nearly_deterministic"] is False
    assert "nearly deterministic" not in table.table()
    net = model.loaded.model
    wide = net.config
    net.config = dataclasses.replace(wide, logvar_min=-32.0, logvar_max=-30.0)  # sigma ~ 1e-7
    try:
        narrow = model.score(sentences, **settings)
    finally:
        net.config = wide
    n = narrow.samples["variational"]
    assert n["nearly_deterministic"] is True
    assert n["agreement_identical"] == n["agreement_samples"] >= 4
    assert "note: the posterior is nearly deterministic: " in narrow.table()
