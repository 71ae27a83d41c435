"""vat.load: one object to encode sentences and to generate, from a .ckpt or an exported folder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import export_folder

import vat
from vat.errors import VatError
from vat.features import sentence_features
from vat.generate.generator import DecodeOptions, VATGenerator
from vat.share.resolve import load_model


@pytest.fixture(scope="module")
def exported(tiny_ckpt, tmp_path_factory):
    return export_folder(tiny_ckpt, tmp_path_factory.mktemp("api") / "model")


def test_encode_is_the_pooled_token_means(tiny_ckpt, exported, tiny_sentences):
    loaded = load_model(tiny_ckpt)
    for path in (tiny_ckpt, exported):
        model = vat.load(path, device="cpu")
        for pooling in ("mean", "sum", "start"):
            expected = sentence_features(
                loaded.model, loaded.tokenizer, tiny_sentences, pooling=pooling
            )
            got = model.encode(tiny_sentences, pooling=pooling, batch_size=128)  # the same batches
            assert got.shape == (len(tiny_sentences), 32) and got.dtype == np.float32
            assert (got == expected).all()
            # other batches pad differently: float32 round-off only (features are ~20 in size)
            np.testing.assert_allclose(
                model.encode(tiny_sentences, pooling=pooling, batch_size=5),
                expected,
                rtol=1e-5,
                atol=1e-6,
            )
    unit = model.encode(tiny_sentences, normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        unit * np.linalg.norm(expected := model.encode(tiny_sentences), axis=1)[:, None],
        expected,
        rtol=1e-5,
        atol=1e-6,
    )
    assert model.encode([]).shape == (0, 32)


def test_encode_bad_input(exported):
    model = vat.load(exported)
    with pytest.raises(VatError, match="sentences: expected a string or a list of strings"):
        model.encode(["one sentence", 3])
    with pytest.raises(VatError, match="pooling"):
        model.encode(["a"], pooling="max")
    with pytest.raises(VatError, match="batch_size"):
        model.encode(["a"], batch_size=0)


def test_generation_is_vat_generate(tiny_ckpt, exported, tiny_sentences):
    model = vat.load(exported, device="cpu")
    gen = VATGenerator.from_loaded(load_model(tiny_ckpt))
    s = tiny_sentences[:3]
    beam = DecodeOptions(strategy="beam", beam_size=2, max_len=6)
    # the Python names are the CLI's (--beam, --num-samples); beam > 1 is beam search as there
    assert model.reconstruct(s, beam=2, max_len=6) == gen.reconstruct(s, beam)
    short = DecodeOptions(max_len=6)
    expected = gen.sample(s, 2, 0.5, short, 3)
    assert model.sample(s, num_samples=2, tau=0.5, seed=3, max_len=6) == expected
    # one name per option: the old keyword names are refused, not translated
    with pytest.raises(VatError, match="unknown decoding option"):
        model.sample(s, n=2, tau=0.5, seed=3, max_len=6)
    with pytest.raises(VatError, match=r"^beam_size: .*use beam"):
        model.reconstruct(s, strategy="beam", beam_size=2, max_len=6)
    with pytest.raises(TypeError):
        model.encode(s, normalize=True)
    # errors name the Python argument (the command line names its flag, test_model_option.py)
    with pytest.raises(VatError, match=r"^num_samples: must be at least 1, got 0$"):
        model.sample(s, num_samples=0)
    with pytest.raises(VatError, match=r"^beam: must be at least 1, got 0$"):
        model.reconstruct(s, beam=0)
    assert model.resample_token(s, [0], num_samples=2, seed=1, max_len=6) == gen.resample_token(
        s, [0], 2, 1.0, short, 1
    )
    assert model.interpolate(s[0], s[1], [0, 0.5, 1], max_len=6) == gen.interpolate(
        s[0], s[1], [0, 0.5, 1], options=short
    )
    prior = model.prior(num_samples=3, seed=2, max_len=6)
    assert prior == gen.prior(3, None, short, 2)
    assert all(
        1 <= length <= 7 for length, _ in prior
    )  # lengths from the histogram (counts up to 7)
    with pytest.raises(VatError, match="unknown decoding option"):
        model.reconstruct(s, beams=3)


def test_load_errors_are_one_line(tmp_path):
    with pytest.raises(Exception, match="does not exist") as e:
        vat.load(tmp_path / "nope.ckpt")
    assert "\n" not in str(e.value)


def test_save_and_push_from_a_loaded_model(tiny_ckpt, tmp_path, tiny_sentences):
    import torch
    from safetensors.torch import load
    from test_hub import FOLDER_FILES, RecordingHfApi

    model = vat.load(tiny_ckpt, device="cpu")
    out = model.save_pretrained(tmp_path / "m")
    assert sorted(p.name for p in out.iterdir()) == FOLDER_FILES
    assert (vat.load(out).encode(tiny_sentences) == model.encode(tiny_sentences)).all()
    api = RecordingHfApi()
    model.push_to_hub("me/tiny", api=api)
    assert [c[0] for c in api.calls] == ["create_repo", "upload_folder"]
    assert sorted(api.uploaded) == FOLDER_FILES
    # the same tensors (not the same bytes: safetensors writes its metadata map in hash order)
    uploaded, saved = (
        load(api.uploaded["model.safetensors"]),
        load((out / "model.safetensors").read_bytes()),
    )
    assert uploaded.keys() == saved.keys() and all(
        torch.equal(uploaded[k], saved[k]) for k in saved
    )


# -- one rule for sentences, devices vat can run on, bounded tokenising ----------------------
def test_one_rule_for_sentences_a_string_is_one_sentence(tiny_ckpt, tiny_sentences):
    """A single string is ONE sentence everywhere (its result alone), and any iterable of
    strings is a batch: tuples, generators (read once), numpy strings and arrays of them."""
    model = vat.load(tiny_ckpt, device="cpu")
    s = tiny_sentences[:3]
    expected = model.encode(list(s))
    for same in (tuple(s), (x for x in s), np.array(s), [np.str_(x) for x in s]):
        np.testing.assert_array_equal(model.encode(same), expected)
    alone = model.encode([s[0]])[0]
    np.testing.assert_array_equal(model.encode(s[0]), alone)  # (d,)
    np.testing.assert_array_equal(model.encode(np.str_(s[0])), alone)
    assert model.encode(s[0], convert_to_numpy=False).shape == (32,)
    # reconstruct("A man plays") gave one reconstruction per character (11)
    one = model.reconstruct(s[0], max_len=6)
    assert isinstance(one, str) and one == model.reconstruct([s[0]], max_len=6)[0]
    assert model.reconstruct((x for x in s), max_len=6) == model.reconstruct(s, max_len=6)
    samples = model.sample(s[0], num_samples=2, seed=1, max_len=6)
    assert samples == model.sample([s[0]], num_samples=2, seed=1, max_len=6)[0]
    assert len(samples) == 2 and all(isinstance(x, str) for x in samples)
    assert (
        model.resample_token(s[0], 0, num_samples=2, seed=1, max_len=6)
        == (model.resample_token([s[0]], [0], num_samples=2, seed=1, max_len=6)[0])
    )
    assert model.interpolate(np.str_(s[0]), s[1], 0.5, max_len=6) == model.interpolate(
        s[0], s[1], [0.5], max_len=6
    )
    quick = {"samples": 1, "diversity_samples": 0, "prior_samples": 0, "representation": False}
    one, listed = model.score(s[0], **quick), model.score([s[0]], **quick)
    assert one.data == listed.data and one.likelihood == listed.likelihood
    assert one.reconstruction == listed.reconstruction
    # numpy integers are whole numbers
    assert model.prior(np.int64(2), length=np.int64(3), seed=np.int64(1), max_len=6) == (
        model.prior(2, length=3, seed=1, max_len=6)
    )


def test_a_refused_device_leaves_the_model_where_it_was(tiny_ckpt, tiny_sentences):
    from vat.errors import OptionError

    model = vat.load(tiny_ckpt, device="cpu")
    before = model.encode(tiny_sentences[:2])
    for bad in ("meta", "xyz", "cuda:7" if torch.cuda.device_count() < 8 else "meta"):
        with pytest.raises(OptionError, match=r"^device: ") as e:
            model.encode(tiny_sentences[:2], device=bad)
        assert "\n" not in str(e.value) and "--" not in str(e.value)
        assert model.device.type == "cpu"  # the model stayed (encode(device="meta") moved it)
        np.testing.assert_array_equal(model.encode(tiny_sentences[:2]), before)


def test_cuda_devices_must_exist(monkeypatch):
    """cuda:N is refused unless N < the number of GPUs, whatever this machine has (torch's
    count is set here: the rule, not the hardware, is under test)."""
    from vat.errors import OptionError
    from vat.runtime import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    assert resolve_device(torch.device("cuda:0")) == "cuda:0"
    with pytest.raises(OptionError, match=r"^device: cuda:7 does not exist: .* 2 CUDA"):
        resolve_device("cuda:7")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(OptionError, match="not available on this machine"):
        resolve_device("cuda")
    assert resolve_device(None) == resolve_device("auto") == "cpu"


def test_a_10_mb_sentence_encodes_in_bounded_memory(tiny_ckpt):
    """Text is cut to the characters its first max_len - 1 subwords can cover before it is
    tokenised: a 10 MB line gave a Python list of 2 million ids (and 2 GB in the tokenizer)."""
    import time
    import tracemalloc

    model = vat.load(tiny_ckpt, device="cpu")
    line = "the cat sat on the mat " * 450_000  # 10.35 MB
    tracemalloc.start()
    start = time.perf_counter()
    got = model.encode([line, "the cat sat on the mat"])
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 5 and peak < 5_000_000, (seconds, peak)
    # the same features as the first max_len - 1 subwords of the line give
    keep = model.model.config.max_len - 1
    head = model.tokenizer.decode(model.tokenizer.encode(line[:10_000])[:keep])
    np.testing.assert_allclose(got[0], model.encode(head), rtol=1e-5, atol=1e-6)
