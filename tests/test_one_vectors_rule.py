"""One rule for which sentence vectors a model gives, for every loader.

vat.features.choice.default_features: an exported folder's own spec; for a training run or
checkpoint the spec its export gets (DEFAULT_EXPORT_SPEC, layer0/sif/none: SIF weights from
the token counts the checkpoint records, nothing fitted on sentences); the mean of mu, said
so, where no counts are recorded. Before: `vat.load(run).encode` gave the mean of mu and the
export of that run layer0/sif/none, and nothing said which vectors a table had scored.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from eval_helpers import write_sts
from helpers import checkpoint_with_counts, export_folder

import vat
from vat.feature_spec import DEFAULT_EXPORT_SPEC, FeatureSpec
from vat.features import sentence_features
from vat.features.choice import stats_path_for
from vat.features.postprocess import sif_weights
from vat.share.resolve import load_model

FAST = ["--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_ckpt, tiny_sentences):
    """A checkpoint with training token counts (as `vat train` writes it), its export with
    the default spec, and a tiny SentEval folder (STS12)."""
    root = tmp_path_factory.mktemp("rule")
    ckpt, _, counts = checkpoint_with_counts(tiny_ckpt, root, tiny_sentences)
    folder = export_folder(ckpt, root / "exported")
    write_sts(root / "senteval", "STS12", n=12)
    return ckpt, folder, counts, root / "senteval"


def _layer0_sif(loaded, sentences: list[str], counts: np.ndarray) -> np.ndarray:
    """The closed form of layer0/sif/none: (1/n) sum_t a / (a + p(w_t)) e_t over a sentence's
    n subwords, e_t the scaled embedding plus position (the encoder's input)."""
    w = sif_weights(counts.astype(np.float64), 1e-3)
    out = []
    for ids in loaded.tokenizer.encode_batch(sentences, max_tokens=loaded.config.max_len - 1):
        with torch.no_grad():
            e = loaded.model._embed(torch.tensor([ids]))[0].double().numpy()  # (n, d)
        out.append((w[ids][:, None] * e).sum(0) / max(len(ids), 1))
    return np.stack(out)


def test_a_run_and_its_export_give_the_same_vectors_by_every_loader(run, tiny_sentences):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from vat.eval.encoders import vat_encoder
    from vat.integrations.mteb import VATMTEBEncoder
    from vat.integrations.sentence_transformers import to_sentence_transformer

    ckpt, folder, counts, _ = run
    sentences = tiny_sentences[:9]
    model = vat.load(ckpt, device="cpu")
    ref = model.encode(sentences)
    exported = vat.load(folder, device="cpu")
    # before: the run's mean of mu against its export's layer0/sif/none, nowhere near
    np.testing.assert_allclose(exported.encode(sentences), ref, atol=1e-5)
    want = _layer0_sif(model.loaded, sentences, counts)
    np.testing.assert_allclose(ref, want, atol=1e-5)  # the closed form, from the counts alone
    chosen = model.default_features
    assert str(chosen.spec) == DEFAULT_EXPORT_SPEC and not chosen.fallback
    assert not stats_path_for(ckpt, chosen.spec).exists()  # nothing fitted, nothing written
    assert str(exported.default_features.spec) == DEFAULT_EXPORT_SPEC
    got = {
        "AutoModel(export)": AutoModel.from_pretrained(folder, trust_remote_code=True).encode(
            sentences
        ),
        "SentenceTransformer(export)": SentenceTransformer(
            str(folder), trust_remote_code=True, device="cpu"
        ).encode(sentences),
        "to_sentence_transformer(run)": to_sentence_transformer(model).encode(sentences),
        "vat evaluate's encoder (run)": vat_encoder(load_model(ckpt))(sentences),
        "vat evaluate's encoder (export)": vat_encoder(load_model(folder))(sentences),
        "vat mteb's encoder (run)": VATMTEBEncoder(str(ckpt), model=model).encode(
            [{"text": sentences}], task_metadata=None, hf_split="test", hf_subset="default"
        ),
    }
    for name, vectors in got.items():
        np.testing.assert_allclose(vectors, ref, atol=1e-5, err_msg=name)


def test_vat_evaluate_scores_a_run_as_its_export_and_names_the_spec(run, tmp_path, capsys):
    from vat.cli.evaluate import main

    ckpt, folder, _, data = run
    scores, metas = [], []
    for model in (ckpt, folder):
        out = tmp_path / f"{Path(model).stem}.json"
        code = main(["--model", str(model), "--tasks", "STS12", "--data-dir", str(data),
                     "--output", str(out), *FAST])  # fmt: skip
        stdout = capsys.readouterr().out
        assert code == 0
        # the table's title names the vectors it scored, and why those
        title = stdout.splitlines()[0]
        assert title.startswith(f"vat:{model}: features {DEFAULT_EXPORT_SPEC} ("), title
        res = json.loads(out.read_text())
        scores.append(res["STS12"]["all"]["spearman"]["mean"])
        metas.append(res["_meta"])
    assert scores[0] == pytest.approx(scores[1], abs=1e-6)
    assert [m["features"] for m in metas] == [DEFAULT_EXPORT_SPEC] * 2
    assert "token counts" in metas[0]["features_why"]
    assert metas[1]["features_why"] == "the folder's own spec"


def test_without_counts_the_mean_of_mu_and_it_is_said(tiny_ckpt, tiny_sentences, tmp_path, capsys):
    """A checkpoint that records no token counts cannot have layer0/sif/none without text to
    count: its vectors are the mean of mu, and stderr, the table and the JSON say so."""
    from vat.cli.evaluate import main

    model = vat.load(tiny_ckpt, device="cpu")
    capsys.readouterr()
    vectors = model.encode(tiny_sentences)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: tiny.ckpt: sentence vectors are the mean")
    assert "token counts" in err[0] and DEFAULT_EXPORT_SPEC in err[0]
    model.encode(tiny_sentences)
    assert capsys.readouterr().err == ""  # said once per loaded model
    mean_mu = sentence_features(model.model, model.tokenizer, tiny_sentences, "mean")
    np.testing.assert_allclose(vectors, mean_mu, atol=1e-6)
    assert model.default_features.fallback and str(model.default_features.spec) == "mu/mean/none"

    data = tmp_path / "senteval"
    write_sts(data, "STS12", n=12)
    out = tmp_path / "r.json"
    assert main(["--model", str(tiny_ckpt), "--tasks", "STS12", "--data-dir", str(data),
                 "--output", str(out), *FAST]) == 0  # fmt: skip
    title = capsys.readouterr().out.splitlines()[0]
    assert "features mu/mean/none (the mean of mu, not layer0/sif/none:" in title
    meta = json.loads(out.read_text())["_meta"]
    assert meta["features"] == "mu/mean/none" and "token counts" in meta["features_why"]


def test_explicit_pooling_and_features_are_kept(run, tiny_sentences, tmp_path, capsys):
    from transformers import AutoModel

    from vat.cli.evaluate import main

    ckpt, folder, _, data = run
    model = vat.load(ckpt, device="cpu")
    for pooling in ("mean", "sum"):
        mu = sentence_features(model.model, model.tokenizer, tiny_sentences, pooling)
        np.testing.assert_allclose(model.encode(tiny_sentences, pooling=pooling), mu, atol=1e-6)
        auto = AutoModel.from_pretrained(folder).encode(tiny_sentences, pooling=pooling)
        np.testing.assert_allclose(auto, mu, atol=1e-6)  # explicit: mu, not the folder's spec
    np.testing.assert_allclose(
        model.encode(tiny_sentences, features="mu/mean/none"),
        sentence_features(model.model, model.tokenizer, tiny_sentences, "mean"),
        atol=1e-6,
    )
    out = tmp_path / "mean.json"
    assert main(["--model", str(ckpt), "--tasks", "STS12", "--data-dir", str(data),
                 "--pooling", "mean", "--output", str(out), *FAST]) == 0  # fmt: skip
    assert "features mu/mean/none (mean pooling of mu" in capsys.readouterr().out
    meta = json.loads(out.read_text())["_meta"]
    assert meta["features"] == "mu/mean/none" and meta["pooling"] == "mean"


def test_sentence_vat_config_says_one_thing_and_old_files_still_load(run, tmp_path, tiny_sentences):
    """A new export's sentence_vat_config.json names the spec alone; files written before,
    with a `pooling` beside or instead of the spec, still load to the same vectors in vat and
    in sentence-transformers."""
    import shutil

    from sentence_transformers import SentenceTransformer

    _, folder, _, _ = run
    config = folder / "sentence_vat_config.json"
    assert json.loads(config.read_text()) == {"features": DEFAULT_EXPORT_SPEC}
    ref = vat.load(folder, device="cpu").encode(tiny_sentences)
    old = Path(shutil.copytree(folder, tmp_path / "old"))
    (old / "sentence_vat_config.json").write_text(
        json.dumps({"pooling": "mean", "features": DEFAULT_EXPORT_SPEC})
    )
    st = SentenceTransformer(str(old), trust_remote_code=True, device="cpu")
    for vectors in (vat.load(old, device="cpu").encode(tiny_sentences), st.encode(tiny_sentences)):
        np.testing.assert_allclose(vectors, ref, atol=1e-5)
    # an older module saved with sum pooling and no spec: the spec mu/sum/none
    (old / "sentence_vat_config.json").write_text(json.dumps({"pooling": "sum"}))
    (old / "features.safetensors").unlink()
    loaded = load_model(old)
    assert loaded.feature_spec == FeatureSpec.parse("mu/sum/none")
    summed = sentence_features(loaded.model, loaded.tokenizer, tiny_sentences, "sum")
    st = SentenceTransformer(str(old), trust_remote_code=True, device="cpu")
    for vectors in (vat.load(old, device="cpu").encode(tiny_sentences), st.encode(tiny_sentences)):
        np.testing.assert_allclose(vectors, summed, atol=1e-5)


def test_results_and_metadata_name_the_spec(run):
    """`--compare` labels runs by the spec their file names (an older file by its pooling);
    MTEB's model metadata carries the spec as an experiment setting."""
    from vat.eval.plots import run_label
    from vat.integrations.mteb import VATMTEBEncoder

    new = {"_meta": {"encoder": "vat:runs/demo", "pooling": None, "features": "layer0/sif/none"}}
    assert run_label(new, "x") == "demo (layer0/sif/none)"
    assert run_label({"_meta": {"encoder": "vat:a/last.ckpt", "pooling": "mean"}}, "x") == (
        "last.ckpt (mean)"
    )
    ckpt, _, _, _ = run
    encoder = VATMTEBEncoder(str(ckpt), model=vat.load(ckpt, device="cpu"))
    assert encoder.spec == DEFAULT_EXPORT_SPEC and "token counts" in encoder.why
    assert encoder.mteb_model_meta.experiment_kwargs == {"features": DEFAULT_EXPORT_SPEC}
