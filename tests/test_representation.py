"""Alignment and uniformity (vat.score.representation) against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vat.score.representation import alignment, uniformity


def test_alignment_closed_forms():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 5))
    assert alignment(x, 3 * x) == pytest.approx(0.0, abs=1e-12)  # features are normalised
    assert alignment(x, -x) == pytest.approx(4.0)  # antipodal: ||2u||^2 = 4
    e = np.eye(4)
    assert alignment(e[:2], e[2:]) == pytest.approx(2.0)  # orthogonal unit vectors
    assert alignment(e[:2], e[2:], alpha=1) == pytest.approx(math.sqrt(2))
    with pytest.raises(ValueError, match="same shape"):
        alignment(e[:2], e[:3])
    with pytest.raises(ValueError, match="NaN"):
        alignment(np.full((2, 2), np.nan), e[:2, :2])


def test_uniformity_closed_forms():
    assert uniformity(np.ones((5, 3))) == pytest.approx(0.0, abs=1e-12)  # one point
    assert uniformity(np.array([[1.0, 0], [-1.0, 0]])) == pytest.approx(-8.0)  # t ||2u||^2
    # an orthonormal basis: every squared distance is 2, so log exp(-2 * 2) = -4
    assert uniformity(np.eye(6)) == pytest.approx(-4.0)
    with pytest.raises(ValueError, match="at least 2"):
        uniformity(np.ones((1, 3)))
