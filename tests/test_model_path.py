"""A loaded model's path through the feature code: checked once where it enters, and a spec's
statistics resolved in steps a caller composes (vat.features.choice, vat.features.fitting)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from vat.errors import OptionError
from vat.eval.encoders import vat_encoder
from vat.feature_spec import FeatureSpec
from vat.features.choice import (
    chosen_features,
    fit_for,
    resolve_features,
    stats_path_for,
    store_features,
    stored_features,
)
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
    fit = FitOptions(fit_sentences=tiny_sentences)
    chosen, vectors = [], []

    def choose() -> None:
        chosen.append(chosen_features(loaded, features, fit, save=False))

    def encode() -> None:
        vectors.append(vat_encoder(loaded, features=chosen[0])(tiny_sentences[:5]))

    assert _calls_of(check_loaded, choose) == 1
    assert _calls_of(check_loaded, encode) == 1
    assert vectors[0].shape == (5, loaded.config.d_model) and np.isfinite(vectors[0]).all()
    assert chosen[0].spec == (FeatureSpec.parse(features) if features else chosen[0].spec)
    for entry in (vat_encoder, chosen_features):
        with pytest.raises(OptionError, match=f"^model: {entry.__name__} takes a loaded model"):
            entry(str(ckpt))


def test_vat_encoder_takes_fitted_features_never_a_spec_to_fit(tiny_ckpt, tiny_sentences):
    """The encoder never fits: a spec's statistics are chosen (found or fitted) by the caller,
    with `chosen_features`, and the encoder says how to."""
    loaded = load_model(tiny_ckpt)
    with pytest.raises(OptionError, match=r"^features: vat_encoder takes fitted features.*"
                       r"chosen_features\(loaded, spec\)"):  # fmt: skip
        vat_encoder(loaded, features="mu/mean/pc1")
    chosen = chosen_features(loaded, "mu/mean/none")
    encode = vat_encoder(loaded, features=chosen)
    assert encode.features == "mu/mean/none" and encode.why == "as named"
    np.testing.assert_array_equal(
        encode(tiny_sentences[:4]), vat_encoder(loaded, "mean")(tiny_sentences[:4])
    )


def test_the_steps_of_a_resolution_compose_as_resolve_features_does(
    tiny_ckpt, tmp_path, tiny_sentences, capsys
):
    ckpt = tmp_path / "m.ckpt"
    ckpt.write_bytes(tiny_ckpt.read_bytes())
    loaded = load_model(ckpt)
    spec = FeatureSpec.parse("mu/mean/pc1")
    fit = FitOptions(fit_sentences=tiny_sentences, info={"note": "mine"})
    assert stored_features(loaded, spec) is None  # nothing stored yet
    fitted = fit_for(loaded, spec, fit)
    assert fitted.fit["sentences"] == len(tiny_sentences) and fitted.fit["note"] == "mine"
    # the first principal component of the pooled training vectors, unit length
    assert np.isclose(np.linalg.norm(fitted.arrays["components"][0]), 1.0, atol=1e-5)
    assert not stats_path_for(ckpt, spec).exists()  # a fit alone writes nothing
    out = store_features(loaded, fitted, quiet=True)
    assert out == stats_path_for(ckpt, spec) and out.is_file()
    found = stored_features(loaded, spec)
    assert found is not None and found.spec == spec
    np.testing.assert_array_equal(found.arrays["components"], fitted.arrays["components"])
    # resolve_features composes the same steps: it finds what store_features wrote
    again = resolve_features(loaded, spec)
    np.testing.assert_array_equal(again.arrays["mean"], fitted.arrays["mean"])
    # and fitting anew from the same sentences gives the same arrays
    fresh = resolve_features(loaded, spec, fit, save=False)
    np.testing.assert_allclose(fresh.arrays["mean"], fitted.arrays["mean"], atol=1e-6)


def test_fit_options_are_checked_when_made():
    with pytest.raises(OptionError, match="^n_fit: must be at least 2"):
        FitOptions(n_fit=1)
    with pytest.raises(OptionError, match="^fit_sentences: expected a list of sentences"):
        FitOptions(fit_sentences="one string")
    assert not FitOptions().names_data and FitOptions(count_files="a.txt").names_data
    assert FitOptions(fit_files="a.txt").fit_files == ["a.txt"]  # one path is one file
