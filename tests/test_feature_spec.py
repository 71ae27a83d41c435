"""Sentence-feature specs: post-processing maths, sources and weightings, fitting on unlabeled
text only, one spec giving identical vectors in vat evaluate, vat.load, the
sentence-transformers module and the MTEB encoder, and `vat features compare`."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from eval_helpers import write_sts
from helpers import checkpoint_with_counts, export_folder

import vat
from vat.errors import VatError
from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.features.choice import features_for, stats_path_for
from vat.features.encoder import FeatureEncoder, encoder_states, pooled_features, weighted_pool
from vat.features.fitting import FitOptions
from vat.features.postprocess import (
    apply_pc_removal,
    apply_whitening,
    fit_pc_removal,
    fit_whitening,
    sif_weights,
)
from vat.share.resolve import load_model
from vat.tokenizer import make_batch

FAST = ["--no-progress", "--device", "cpu"]


# -- pure maths ------------------------------------------------------------------------------
def test_sif_weights_closed_form():
    w = sif_weights(np.array([0, 1, 3]), a=0.25)  # p = 0, 1/4, 3/4
    np.testing.assert_allclose(w, [1.0, 0.25 / 0.5, 0.25 / 1.0], rtol=1e-6)


def test_whitening_gives_identity_covariance_and_cuts_dimensions():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)) @ rng.normal(size=(6, 6)) + 3.0  # correlated, off-centre
    st = fit_whitening(x)
    y = apply_whitening(x, **st)
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(np.cov(y, rowvar=False), np.eye(6), atol=1e-4)
    st2 = fit_whitening(x, dim=2)
    y2 = apply_whitening(x, **st2)
    assert y2.shape == (500, 2)
    np.testing.assert_allclose(y2, y[:, :2], atol=1e-4)  # the leading whitened directions
    with pytest.raises(ValueError, match="1..6"):
        fit_whitening(x, dim=7)


def test_pc_removal_finds_and_removes_the_dominant_direction():
    rng = np.random.default_rng(1)
    u = np.array([3.0, 4.0, 0.0, 0.0]) / 5
    x = 10 * rng.normal(size=(400, 1)) * u + 0.1 * rng.normal(size=(400, 4)) + 2.0
    st = fit_pc_removal(x, 1)
    assert abs(abs(st["components"][0] @ u) - 1) < 1e-3  # the planted direction, up to sign
    y = apply_pc_removal(x, **st)
    assert np.abs(y @ st["components"][0]).max() < 1e-4  # nothing left along it
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-4)


def test_spec_parse_print_and_bad_specs():
    s = FeatureSpec.parse("firstlast/sif=0.01/whiten16")
    assert (s.source, s.weighting, s.post, s.sif_a, s.whiten_dim) == (
        "firstlast",
        "sif",
        "whiten16",
        0.01,
        16,
    )
    assert FeatureSpec.parse(str(s)) == s
    assert str(FeatureSpec.parse("mu")) == "mu/mean/none" and not FeatureSpec().needs_fit
    assert FeatureSpec.parse("layer2/sum/pc3").pcs == 3
    for bad, needle in [
        ("cls/mean", "source"),
        ("mu/max", "weighting"),
        ("mu/mean/pca", "post-processing"),
        ("layer1/precision", "needs source mu"),
        ("mu/mean/none/x", "SOURCE/WEIGHTING/POST"),
    ]:
        with pytest.raises(VatError, match=needle):
            FeatureSpec.parse(bad)


# -- sources and weightings on a real (tiny) model ---------------------------------------------
def test_sources_are_the_encoder_pass(tiny_ckpt, tiny_sentences):
    loaded = vat.load(tiny_ckpt, device="cpu")
    m = loaded.model
    src = make_batch(loaded.tokenizer.encode_batch(tiny_sentences[:6]))["src"]
    states, (mu, logvar, mask), sentence = encoder_states(m, src, [0, 1, 2])
    post = m.encode(src)
    assert sentence is None  # a model without a sentence latent
    torch.testing.assert_close(mu, post.mu)
    torch.testing.assert_close(logvar, post.logvar)
    torch.testing.assert_close(m.mu_head(states[2]), mu)  # the last layer is the heads' input
    lengths = torch.tensor([len(x) for x in loaded.tokenizer.encode_batch(tiny_sentences[:6])])
    got = pooled_features(m, loaded.tokenizer, tiny_sentences[:6], [("firstlast", "mean")])
    keep = (torch.arange(src.shape[1])[None] < lengths[:, None]).float()[..., None]
    want = (((states[1] + states[2]) / 2) * keep).sum(1) / lengths[:, None]
    np.testing.assert_allclose(got[("firstlast", "mean")], want.numpy(), atol=1e-5)
    with pytest.raises(VatError, match="layers 0..2"):
        FeatureSpec.parse("layer3").layer(2)


def test_sif_pooling_closed_form():
    x = torch.arange(12, dtype=torch.float32).view(1, 4, 3)  # one sentence of 3 subwords + </s>
    w = torch.tensor([[1.0, 0.5, 0.25, 9.0]])  # the </s> weight must not count
    got = weighted_pool(x, torch.tensor([3]), "sif", token_weights=w)
    want = (1.0 * x[0, 0] + 0.5 * x[0, 1] + 0.25 * x[0, 2]) / 3
    torch.testing.assert_close(got[0], want)


def test_stats_file_roundtrip_and_never_overwrites_a_foreign_file(tmp_path):
    fitted = FittedFeatures(
        FeatureSpec.parse("mu/mean/whiten2"),
        {"mean": np.ones(4, np.float32), "matrix": np.eye(4, 2, dtype=np.float32)},
        {"sentences": 7},
    )
    p = fitted.save(tmp_path / "f.safetensors")
    back = FittedFeatures.load(p)
    assert back.spec == fitted.spec and back.fit == {"sentences": 7}
    np.testing.assert_array_equal(back.arrays["matrix"], fitted.arrays["matrix"])
    mine = tmp_path / "mine.safetensors"
    mine.write_bytes(b"user data")
    with pytest.raises(VatError, match="not a vat feature file; not overwriting"):
        fitted.save(mine)
    assert mine.read_bytes() == b"user data"


# -- fitting data, and one spec everywhere ----------------------------------------------------
@pytest.fixture(scope="module")
def trained_files(tmp_path_factory, tiny_ckpt, tiny_sentences):
    """The tiny checkpoint with training files in its data hyperparameters and token counts
    in its `vat` entry (as `vat train` writes them), and an STS folder (STS12 + STS-B)."""
    root = tmp_path_factory.mktemp("features")
    lines = tiny_sentences + [s.lower() + " again" for s in tiny_sentences]
    path, train, counts = checkpoint_with_counts(tiny_ckpt, root, lines)
    data = root / "senteval"
    write_sts(data, "STS12", n=12)
    import random

    rng = random.Random(0)
    for split, n in (("train", 30), ("dev", 20), ("test", 20)):
        rows = [
            f"g\tx\t2012\t{i:04d}\t{rng.uniform(0, 5):.3f}\t"
            f"{rng.choice(lines)}\t{rng.choice(lines)}"
            for i in range(n)
        ]
        (data / "STS" / "STSBenchmark").mkdir(parents=True, exist_ok=True)
        (data / "STS" / "STSBenchmark" / f"sts-{split}.csv").write_text("\n".join(rows) + "\n")
    return path, train, lines, data, counts


def test_fitting_uses_the_training_sentences_not_the_evaluation_data(trained_files, capsys):
    from vat.cli.evaluate import main

    ckpt, train, lines, data, _ = trained_files
    spec = "mu/mean/whiten"
    stats = stats_path_for(ckpt, FeatureSpec.parse(spec))
    stats.unlink(missing_ok=True)
    out = ckpt.parent / "r.json"
    args = ["--ckpt", str(ckpt), "--tasks", "STS12", "--data-dir", str(data), *FAST]
    assert main([*args, "--features", spec, "--output", str(out)]) == 0
    fitted = FittedFeatures.load(stats)
    assert "files" not in fitted.fit and fitted.fit["sentences"] == len(lines)
    assert fitted.fit["from"] == "the checkpoint's fitting sample"  # nothing read from train
    model = vat.load(ckpt, device="cpu")
    train_mu = pooled_features(model.model, model.tokenizer, lines, [("mu", "mean")])
    np.testing.assert_allclose(fitted.arrays["mean"], train_mu[("mu", "mean")].mean(0), atol=1e-5)
    meta = json.loads(out.read_text())["_meta"]
    assert meta["features"] == spec
    assert meta["features_fit"]["from"] == "the checkpoint's fitting sample"

    # evaluation files as fitting data: refused unless named transductive
    task_file = next((data / "STS" / "STS12-en-test").glob("STS.input.*"))
    capsys.readouterr()
    assert main([*args, "--features", spec, "--fit-files", str(task_file)]) == 2
    assert "--fit-transductive" in capsys.readouterr().err
    before = stats.read_bytes()
    assert main([*args, "--features", spec, "--fit-transductive", "--output", str(out),
                 "--overwrite"]) == 0  # fmt: skip
    meta = json.loads(out.read_text())["_meta"]
    assert meta["features_fit"]["transductive"] is True
    assert meta["features_fit"]["from"].startswith("evaluation tasks")
    assert stats.read_bytes() == before  # a transductive fit is never stored as the default

    # a statistics file that was fitted transductively is refused without the flag
    trans = FittedFeatures(FeatureSpec.parse("mu/sum/pc1"), {}, {"transductive": True})
    trans.arrays = {"mean": np.zeros(32, np.float32), "components": np.eye(1, 32, dtype=np.float32)}
    trans.save(stats_path_for(ckpt, trans.spec))
    capsys.readouterr()
    assert main([*args, "--features", "mu/sum/pc1"]) == 2
    assert "fitted on evaluation data" in capsys.readouterr().err


def test_sif_without_counts_says_how_to_count(tiny_ckpt, tmp_path, tiny_sentences):
    loaded = load_model(tiny_ckpt)
    with pytest.raises(VatError, match="count_files"):
        features_for(loaded, "mu/sif", save=False)
    f = tmp_path / "t.txt"
    f.write_text("\n".join(tiny_sentences) + "\n")
    fitted = features_for(loaded, "mu/sif", FitOptions(count_files=[str(f)]), save=False).fitted
    counts = np.zeros(loaded.tokenizer.vocab_size)
    for ids in loaded.tokenizer.encode_batch(tiny_sentences):
        np.add.at(counts, ids, 1)
    np.testing.assert_allclose(fitted.arrays["sif_weights"], sif_weights(counts), rtol=1e-6)


def test_one_spec_gives_identical_vectors_everywhere(trained_files, tmp_path):
    from mteb.abstasks.task_metadata import TaskMetadata  # noqa: F401 (mteb is installed)
    from sentence_transformers import SentenceTransformer

    from vat.eval.encoders import vat_encoder
    from vat.integrations.mteb import VATMTEBEncoder
    from vat.integrations.sentence_transformers import to_sentence_transformer

    ckpt, _, lines, _, counts = trained_files
    spec = "firstlast/sif/whiten16"
    folder = export_folder(ckpt, tmp_path / "exported", features=spec)
    assert (folder / "features.safetensors").is_file()
    assert spec in (folder / "README.md").read_text()
    sentences = lines[:9] + ["", "x " * 60]  # empty, truncated
    assert not stats_path_for(ckpt, FeatureSpec.parse(spec)).exists()  # export writes none there
    ref = vat.load(ckpt, device="cpu").encode(sentences, features=spec)  # fitted anew, stored
    beside = FittedFeatures.load(stats_path_for(ckpt, FeatureSpec.parse(spec)))
    inside = FittedFeatures.load(folder / "features.safetensors")
    for k in ("sif_weights", "mean", "matrix"):
        np.testing.assert_array_equal(beside.arrays[k], inside.arrays[k])  # same sample, same fit
    assert ref.shape == (len(sentences), 16)
    loaded = load_model(ckpt)
    api = vat.load(folder, device="cpu").encode(sentences)  # the folder's own spec by default
    np.testing.assert_allclose(api, ref, atol=1e-5)
    np.testing.assert_allclose(FeatureEncoder(loaded, beside)(sentences), ref, atol=1e-5)
    st = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(st.encode(sentences, batch_size=4), ref, atol=1e-5)
    assert st.get_embedding_dimension() == 16
    np.testing.assert_allclose(
        to_sentence_transformer(vat.load(folder), device="cpu").encode(sentences), ref, atol=1e-5
    )
    st.save(str(tmp_path / "resaved"))
    again = SentenceTransformer(str(tmp_path / "resaved"), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(again.encode(sentences), ref, atol=1e-5)
    batches = [{"text": sentences[:5]}, {"text": sentences[5:]}]
    mteb_vecs = VATMTEBEncoder(str(folder), device="cpu").encode(
        batches, task_metadata=None, hf_split="test", hf_subset="default"
    )
    np.testing.assert_allclose(mteb_vecs, ref, atol=1e-5)
    np.testing.assert_allclose(vat_encoder(load_model(folder))(sentences), ref, atol=1e-5)


def test_compare_scores_every_spec_and_agrees_with_evaluate(trained_files, tmp_path, capsys):
    from vat.cli.evaluate import main as evaluate_main
    from vat.cli.features import main

    ckpt, _, _, data, _ = trained_files
    out = tmp_path / "cmp"
    assert main(["compare", "--ckpt", str(ckpt), "--output-dir", str(out),
                 "--data-dir", str(data)]) == 0  # fmt: skip
    rows = list(csv.DictReader((out / "compare.csv").open()))
    # sources mu, layer0-2, firstlast; mu has 5 weightings, the others 4; 4 post-processings
    assert len(rows) == (5 + 4 * 4) * 4
    assert (out / "compare.png").stat().st_size > 1000 and (out / "compare.md").is_file()
    # `vat evaluate`'s default for a checkpoint with counts: the spec its export gets
    base = next(r for r in rows if r["spec"] == "layer0/sif/none")
    res = tmp_path / "eval.json"
    assert evaluate_main(["--ckpt", str(ckpt), "--tasks", "STS12,STSBenchmark", "--data-dir",
                          str(data), "--output", str(res), *FAST]) == 0  # fmt: skip
    got = json.loads(res.read_text())
    assert got["_meta"]["features"] == "layer0/sif/none"
    assert float(base["STS12"]) == pytest.approx(
        100 * got["STS12"]["all"]["spearman"]["mean"], abs=0.01
    )
    assert float(base["STS-B test"]) == pytest.approx(
        100 * got["STSBenchmark-cosine"]["test"]["spearman"], abs=0.01
    )
    whiten = next(r for r in rows if r["spec"] == "mu/mean/whiten")
    assert int(whiten["fit sentences"]) > 0 and int(base["fit sentences"]) == 0
    capsys.readouterr()
    assert main(["compare", "--ckpt", str(ckpt), "--output-dir", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_compare_classification_columns_match_evaluate(trained_files, tmp_path):
    from eval_helpers import write_mini_senteval

    from vat.cli.evaluate import main as evaluate_main
    from vat.cli.features import main

    ckpt = trained_files[0]
    data = write_mini_senteval(tmp_path / "senteval", n=24)
    out = tmp_path / "cmp"
    assert main(["compare", "--ckpt", str(ckpt), "--output-dir", str(out), "--data-dir",
                 str(data), "--classification"]) == 0  # fmt: skip
    rows = list(csv.DictReader((out / "compare.csv").open()))
    with_cls = [r for r in rows if r.get("MR")]
    assert len(with_cls) == 4 and any(r["spec"] == "mu/mean/none" for r in with_cls)
    res = tmp_path / "eval.json"
    assert evaluate_main(["--ckpt", str(ckpt), "--tasks", "MR,TREC", "--data-dir", str(data),
                          "--output", str(res), "--pooling", "mean", *FAST]) == 0  # fmt: skip
    got = json.loads(res.read_text())
    base = next(r for r in rows if r["spec"] == "mu/mean/none")
    for t in ("MR", "TREC"):
        assert float(base[t]) == pytest.approx(got[t]["acc"], abs=0.01)


def test_datamodule_counts_the_training_tokens(tmp_path, tiny_sentences):
    from vat.data.datamodule import VATDataModule

    train = tmp_path / "train.txt"
    train.write_text("\n".join(tiny_sentences * 3) + "\n")
    dm = VATDataModule(
        train_files=[str(train)],
        val_fraction=0.2,
        vocab_size=300,
        max_len=48,
        batch_size=4,
        cache_dir=str(tmp_path / "cache"),
    )
    dm.prepare_data()
    dm.setup("fit")
    want = np.zeros(dm.tokenizer.vocab_size, dtype=np.int64)
    for ids in dm.splits["train"].ids:  # the training split only, without </s>
        np.add.at(want, ids, 1)
    assert dm.token_counts == want.tolist() and sum(dm.token_counts) > 0


def test_default_export_spec_and_fallback(trained_files, tiny_ckpt, tmp_path, capsys):
    from vat.feature_spec import DEFAULT_EXPORT_SPEC

    ckpt, _, lines, _, counts = trained_files
    folder = export_folder(ckpt, tmp_path / "default")
    assert load_model(folder).feature_spec == FeatureSpec.parse(DEFAULT_EXPORT_SPEC)
    card = (folder / "README.md").read_text()
    assert "vat gives exported folders this spec by default" in card and "RESULTS.md" not in card
    want = FeatureEncoder(
        load_model(ckpt),
        FittedFeatures(
            FeatureSpec.parse(DEFAULT_EXPORT_SPEC), {"sif_weights": sif_weights(counts)}
        ),
    )(lines[:5])
    np.testing.assert_allclose(vat.load(folder).encode(lines[:5]), want, atol=1e-5)
    # a checkpoint without token counts: mean of mu, with a warning naming the fix
    old = export_folder(tiny_ckpt, tmp_path / "old")
    assert load_model(old).feature_spec == FeatureSpec()
    assert "count_files" in capsys.readouterr().err


def test_compare_refuses_bad_outputs_and_counts_before_any_work(tmp_path, capsys):
    """--output-dir a file or a dangling link, --fit-sentences below 2, --batch-size 0: one
    line each, before the model loads (the model path here does not even exist)."""
    from vat.cli.features import main

    (tmp_path / "afile").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "compare.csv").write_text("an earlier table")
    cases = [
        (["--output-dir", str(tmp_path / "afile")], "is a file, expected a folder"),
        (["--output-dir", str(tmp_path / "link")], "no such folder"),
        (["--output-dir", str(tmp_path / "new"), "--fit-sentences", "1"], "--fit-sentences"),
        (["--output-dir", str(tmp_path / "new"), "--batch-size", "0"], "--batch-size"),
        (["--output-dir", str(tmp_path / "out")], "(compare.csv); pass --overwrite"),
    ]
    for extra, needle in cases:
        assert main(["compare", "--model", str(tmp_path / "no.ckpt"), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], (extra, err)
    assert (tmp_path / "afile").read_text() == "mine"
    assert (tmp_path / "out" / "compare.csv").read_text() == "an earlier table"
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "new").exists()


def _word_vector_files(root, lines: list[str], dim: int = 6):
    """Random vectors for every token of `lines` (word2vec text) and their counts."""
    from collections import Counter

    from vat.eval.word_vectors import tokenize

    counts = Counter(t for line in lines for t in tokenize(line))
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    rows = [f"{w} " + " ".join(f"{x:.6f}" for x in rng.normal(size=dim)) for w in sorted(counts)]
    (root / "vectors.txt").write_text(f"{len(rows)} {dim}\n" + "\n".join(rows) + "\n")
    (root / "counts.txt").write_text("".join(f"{w}\t{c}\n" for w, c in counts.items()))
    return root / "vectors.txt", root / "counts.txt"


def test_compare_takes_a_word_vector_baseline_as_a_row_scored_as_evaluate_scores_it(
    trained_files, tmp_path, capsys
):
    """`--word-vectors V --word-counts C` adds a row (never a spec) whose scores are what
    `vat evaluate --word-vectors V --word-counts C` gives; the specs are the same as without."""
    from vat.cli.evaluate import main as evaluate_main
    from vat.cli.features import main

    ckpt, _, lines, data, _ = trained_files
    vectors, counts = _word_vector_files(tmp_path / "w2v", lines)
    out = tmp_path / "cmp"
    args = ["compare", "--ckpt", str(ckpt), "--output-dir", str(out), "--data-dir", str(data)]
    assert main([*args, "--word-vectors", str(vectors), "--word-counts", str(counts)]) == 0
    printed = capsys.readouterr().out
    rows = list(csv.DictReader((out / "compare.csv").open()))
    (row,) = [r for r in rows if r["spec"] == "w2v/vectors.txt (sif a=0.001)"]
    assert row is rows[-1] and len(rows) == (5 + 4 * 4) * 4 + 1  # after every spec
    assert "| w2v/vectors.txt (sif a=0.001) |" in printed
    res = tmp_path / "eval.json"
    assert evaluate_main(["--word-vectors", str(vectors), "--word-counts", str(counts),
                          "--tasks", "STS12,STSBenchmark", "--data-dir", str(data),
                          "--output", str(res), *FAST]) == 0  # fmt: skip
    got = json.loads(res.read_text())
    assert float(row["STS12"]) == pytest.approx(
        100 * got["STS12"]["all"]["spearman"]["mean"], abs=0.01
    )
    assert float(row["STS-B test"]) == pytest.approx(
        100 * got["STSBenchmark-cosine"]["test"]["spearman"], abs=0.01
    )
    # a second vectors file without counts: paired in order, so the counts must be one each
    err_args = [*args, "--overwrite", "--word-vectors", str(vectors), "--word-vectors",
                str(vectors), "--word-counts", str(counts)]  # fmt: skip
    assert main(err_args) == 2
    assert "--word-counts pairs with --word-vectors in order" in capsys.readouterr().err
