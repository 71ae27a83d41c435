"""vat.integrations with the real packages: sentence-transformers and MTEB (no downloads)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import export_folder

import vat
import vat.errors


@pytest.fixture(scope="module", autouse=True)
def _integrations_extra():
    """sentence-transformers and mteb, imported when a test here runs rather than when every
    worker collects the module (mteb alone takes 2-3 s to import)."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("mteb")


@pytest.fixture(scope="module")
def exported(tiny_ckpt, tmp_path_factory):
    return export_folder(tiny_ckpt, tmp_path_factory.mktemp("integrations") / "model")


def test_sentence_transformer_loads_an_exported_folder(exported, tiny_sentences, tmp_path):
    from sentence_transformers import SentenceTransformer

    from vat.integrations.sentence_transformers import VATSentenceEncoder, to_sentence_transformer

    sentences = (
        tiny_sentences + [s.upper() for s in tiny_sentences] + ["", "x " * 60]
    )  # empty, truncated
    expected = vat.load(exported, device="cpu").encode(sentences)
    st = SentenceTransformer(str(exported), trust_remote_code=True, device="cpu")
    assert isinstance(st[0], VATSentenceEncoder)
    got = st.encode(sentences, batch_size=7)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert st.get_embedding_dimension() == 32
    sim = st.similarity(got[:3], got[:3]).numpy()  # cosine, from config_sentence_transformers.json
    unit = expected[:3] / np.linalg.norm(expected[:3], axis=1, keepdims=True)
    np.testing.assert_allclose(sim, unit @ unit.T, atol=1e-5)

    # sentence-transformers >= 6 imports a non-ST module class only with trust_remote_code=True
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(exported), device="cpu")

    # built directly (no trust_remote_code); its save() is a folder both libraries load
    built = to_sentence_transformer(vat.load(exported, device="cpu"), device="cpu")
    np.testing.assert_allclose(built.encode(sentences), expected, rtol=0, atol=1e-5)
    built.save(str(tmp_path / "saved"))
    again = SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(again.encode(sentences), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        vat.load(tmp_path / "saved").encode(sentences), expected, rtol=0, atol=1e-5
    )
    with pytest.raises(vat.errors.OptionError, match="load it once with vat.load"):
        to_sentence_transformer(exported)  # a path: the model is read once, by vat.load
    # every pooling, precision (which needs the token log-variances) included
    for pooling in ("sum", "start", "precision"):
        want = vat.load(exported, device="cpu").encode(sentences, pooling=pooling)
        st_pooled = to_sentence_transformer(
            vat.load(exported, device="cpu"), pooling=pooling, device="cpu"
        )
        np.testing.assert_allclose(st_pooled.encode(sentences), want, rtol=0, atol=1e-5)


def test_mteb_encoder_protocol(exported, tiny_sentences):
    import mteb
    from mteb.models import EncoderProtocol
    from torch.utils.data import DataLoader

    from vat.integrations.mteb import VATMTEBEncoder

    enc = VATMTEBEncoder(str(exported), device="cpu")
    assert isinstance(enc, EncoderProtocol)
    task = mteb.get_task("STSBenchmark")  # metadata only: nothing is downloaded
    loader = DataLoader(
        [{"text": s} for s in tiny_sentences],
        batch_size=5,
        collate_fn=lambda rows: {"text": [r["text"] for r in rows]},
    )
    emb = enc.encode(loader, task_metadata=task.metadata, hf_split="test", hf_subset="default")
    np.testing.assert_array_equal(emb, vat.load(exported).encode(tiny_sentences))
    sim = np.asarray(enc.similarity(emb, emb[:2]))
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    np.testing.assert_allclose(sim, unit @ unit[:2].T, atol=1e-5)
    assert enc.mteb_model_meta.embed_dim == 32


def test_mteb_sts_spearman_equals_vat_harness(exported, senteval_dir):
    """MTEB's STSBenchmark, with its data built from the local SentEval files, against vat's
    own STS-B cosine protocol on the same test pairs and the same model.

    Both rank the cosines of identical features (vat.load(...).encode), so the only
    difference is float32 round-off in the cosine (vat: per pair with numpy, as SentEval;
    mteb: scikit-learn and torch). Round-off only reorders pairs whose cosines agree to
    ~1e-7; swapping two neighbouring ranks moves Spearman by at most 24 / (n^2 - 1) =
    1.3e-5 for n = 1,379 pairs, so 1e-4 allows a handful of such swaps (we see ~3e-6)."""
    import mteb
    from datasets import Dataset, DatasetDict
    from mteb.tasks.sts.eng.sts_benchmark_sts import STSBenchmarkSTS

    from vat.eval.encoders import vat_encoder
    from vat.eval.engine import EvalSettings, evaluate
    from vat.eval.tasks.registry import load_stsb
    from vat.integrations.mteb import VATMTEBEncoder
    from vat.share.resolve import load_model

    test = load_stsb(senteval_dir).splits["test"]

    class LocalSTSBenchmark(STSBenchmarkSTS):
        """MTEB's STSBenchmark task with `load_data` reading local files instead of the Hub."""

        def load_data(self, num_proc=None, **kwargs) -> None:
            rows = {
                "sentence1": list(test.a),
                "sentence2": list(test.b),
                "score": [float(y) for y in test.y],
            }
            self.dataset = {"default": DatasetDict({"test": Dataset.from_dict(rows)})}
            self.data_loaded = True

    result = mteb.evaluate(
        VATMTEBEncoder(str(exported), device="cpu"),
        LocalSTSBenchmark(),
        cache=None,
        show_progress_bar=False,
        co2_tracker=False,
    )
    (scores,) = result.task_results[0].scores["test"]
    ours, _ = evaluate(
        vat_encoder(load_model(exported)),
        ["STSBenchmark"],
        senteval_dir,
        EvalSettings(progress=False),
    )
    expected = ours["STSBenchmark-cosine"]["test"]
    assert scores["cosine_spearman"] == pytest.approx(expected["spearman"], abs=1e-4)
    assert scores["spearman"] == pytest.approx(
        expected["spearman"], abs=1e-4
    )  # via the encoder's similarity
    assert scores["cosine_pearson"] == pytest.approx(expected["pearson"], abs=1e-5)
    assert abs(expected["spearman"]) > 0.05  # a real correlation, not the 0 of a constant encoder


def test_mteb_command_offline_is_one_line(exported, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    from vat.cli.mteb import main
    from vat.integrations.mteb import english_sts_tasks

    names = [t.metadata.name for t in english_sts_tasks()]
    assert {"STS12", "STS13", "STS14", "STS15", "STSBenchmark", "SICK-R", "BIOSSES"} <= set(names)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rc = main(
        ["--model", str(exported), "--tasks", "STSBenchmark", "--output-dir", str(tmp_path / "res")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        rc == 2
        and err[-1].startswith("error: cannot fetch MTEB task data")
        and "stsbenchmark" in err[-1]
    )


def test_mteb_get_model_and_meta_of_a_registered_folder(exported, tiny_sentences):
    import mteb

    from vat.integrations.mteb import VATMTEBEncoder, register_model

    ours = vat.load(exported, device="cpu")
    meta = register_model(ours)
    assert meta.name == f"vat/{exported.name}" and meta.embed_dim == 32
    for name in (meta.name, str(exported)):
        got = mteb.get_model_meta(name)
        assert got.name == meta.name and got.max_tokens == 48
    # n_parameters = the model's unique parameters (the tied embedding once)
    assert meta.n_parameters == sum(p.numel() for p in ours.model.parameters())
    model = mteb.get_model(str(exported), device="cpu")
    assert isinstance(model, VATMTEBEncoder) and model.mteb_model_meta.name == meta.name
    np.testing.assert_array_equal(model.model.encode(tiny_sentences), ours.encode(tiny_sentences))


def test_mteb_command_checks_task_names_before_loading(tmp_path, capsys):
    from vat.cli.mteb import main

    # the model does not exist: a task-name error proves the tasks were checked first
    rc = main(["--model", str(tmp_path / "no-model"), "--tasks", "STS12,NoSuchTask"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: --tasks: ") and "NoSuchTask" in err
    assert err.count("\n") == 1
