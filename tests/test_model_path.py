"""A loaded model's path through the feature code: checked once where it enters, and a spec's
statistics found, fitted or stored by one entry (vat.features.choice.features_for)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from vat.errors import OptionError
from vat.eval.encoders import vat_encoder
from vat.feature_spec import FeatureSpec
from vat.features.choice import features_for, stats_path_for
from vat.features.fitting import FitOptions
from vat.share.loaded import check_loaded
from vat.share.resolve import load_model


def _calls_of(function, run) -> int:
    """How many times `function` (its code object) runs during run()."""
    count = 0

    def profile(frame, event, arg) -> None:
        nonlocal count
        if event == "call" and frame.f_code is function.__code__:
            count += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("features", [None, "mu/mean/pc1"])
def test_a_loaded_model_is_checked_once_per_entry(tiny_ckpt, tmp_path, tiny_sentences, features):
    """`vat evaluate --model M [--features SPEC]` composes two public entries, each of which
    checks the model once as it takes it; nothing below them checks it again."""
    ckpt = tmp_path / "m.ckpt"
    ckpt.write_bytes(tiny_ckpt.read_bytes())
    loaded = load_model(ckpt)
    # without --features, evaluate fits nothing: its model's own vectors
    fit = FitOptions(fit_sentences=tiny_sentences) if features else None
    chosen, vectors = [], []

    def choose() -> None:
        chosen.append(features_for(loaded, features, fit, save=False))

    def encode() -> None:
        vectors.append(vat_encoder(loaded, features=chosen[0])(tiny_sentences[:5]))

    assert _calls_of(check_loaded, choose) == 1
    assert _calls_of(check_loaded, encode) == 1
    assert vectors[0].shape == (5, loaded.config.d_model) and np.isfinite(vectors[0]).all()
    assert chosen[0].spec == (FeatureSpec.parse(features) if features else chosen[0].spec)
    for entry in (vat_encoder, features_for):
        with pytest.raises(OptionError, match=f"^model: {entry.__name__} takes a loaded model"):
            entry(str(ckpt))


def test_vat_encoder_takes_fitted_features_never_a_spec_to_fit(tiny_ckpt, tiny_sentences):
    """The encoder never fits: a spec's statistics are chosen (found or fitted) by the caller,
    with `features_for`, and the encoder says how to."""
    loaded = load_model(tiny_ckpt)
    with pytest.raises(OptionError, match=r"^features: vat_encoder takes fitted features.*"
                       r"features_for\(loaded, spec\)"):  # fmt: skip
        vat_encoder(loaded, features="mu/mean/pc1")
    chosen = features_for(loaded, "mu/mean/none")
    encode = vat_encoder(loaded, features=chosen)
    assert encode.features == "mu/mean/none" and encode.why == "as named"
    np.testing.assert_array_equal(
        encode(tiny_sentences[:4]), vat_encoder(loaded, "mean")(tiny_sentences[:4])
    )


def test_a_spec_is_fitted_stored_then_found(tiny_ckpt, tmp_path, tiny_sentences, capsys):
    """features_for's steps: a fit that is not saved writes nothing; a saved one writes the
    statistics beside the checkpoint and says so; the next call without data finds them (the
    same arrays, nothing fitted); naming data fits anew."""
    ckpt = tmp_path / "m.ckpt"
    ckpt.write_bytes(tiny_ckpt.read_bytes())
    loaded = load_model(ckpt)
    spec = FeatureSpec.parse("mu/mean/pc1")
    fit = FitOptions(fit_sentences=tiny_sentences, info={"note": "mine"})
    fitted = features_for(loaded, spec, fit, save=False).fitted
    assert fitted.fit["sentences"] == len(tiny_sentences) and fitted.fit["note"] == "mine"
    # the first principal component of the pooled training vectors, unit length
    assert np.isclose(np.linalg.norm(fitted.arrays["components"][0]), 1.0, atol=1e-5)
    assert not stats_path_for(ckpt, spec).exists()  # not saved: nothing written
    stored = features_for(loaded, spec, fit).fitted
    out = stats_path_for(ckpt, spec)
    assert out.is_file() and f"wrote {out}" in capsys.readouterr().err
    np.testing.assert_allclose(stored.arrays["mean"], fitted.arrays["mean"], atol=1e-6)
    out.write_bytes(out.read_bytes())  # the file, not the object in hand, is what is found
    found = features_for(loaded, spec)
    assert found.why == "as named" and found.spec == spec
    np.testing.assert_array_equal(found.fitted.arrays["components"], stored.arrays["components"])
    assert found.fitted is not stored and "wrote" not in capsys.readouterr().err  # nothing fitted
    # naming data always fits anew, here on other sentences: other arrays
    other = FitOptions(fit_sentences=tiny_sentences[: len(tiny_sentences) // 2])
    fresh = features_for(loaded, spec, other, save=False).fitted
    assert fresh.fit["sentences"] == len(tiny_sentences) // 2
    assert not np.allclose(fresh.arrays["mean"], stored.arrays["mean"])


def test_fit_options_are_checked_when_made():
    with pytest.raises(OptionError, match="^n_fit: must be at least 2"):
        FitOptions(n_fit=1)
    with pytest.raises(OptionError, match="^fit_sentences: expected a list of sentences"):
        FitOptions(fit_sentences="one string")
    assert not FitOptions().names_data and FitOptions(count_files="a.txt").names_data
    assert FitOptions(fit_files="a.txt").fit_files == ["a.txt"]  # one path is one file
