"""vat.geometry.plots: geometry figures as PNGs (geometry CLI --plot-dir) and TensorBoard
images (callback)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import CheckpointSystem, geometry_args
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_geometry_callbacks import fit

from vat.callbacks import GeometryMetrics
from vat.cli.geometry import _main
from vat.errors import run_cli
from vat.geometry.plots import (
    active_units_figure,
    figure_to_array,
    geometry_figures,
    kl_per_dimension_figure,
    save_geometry_plots,
    spectrum_figure,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_figures_show_the_numbers():
    lam = np.array([4.0, 1.0, 0.5, 0.0])
    fig = spectrum_figure(lam)
    ax, share_ax = fig.axes
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [1, 2, 3, 4]
    assert line.get_ydata()[:3].tolist() == [4.0, 1.0, 0.5]  # descending, a zero floored (log axis)
    assert 0 < line.get_ydata()[3] < 0.5
    assert share_ax.get_lines()[0].get_ydata().tolist() == pytest.approx(
        [4 / 5.5, 5 / 5.5, 1.0, 1.0]
    )

    kl = kl_per_dimension_figure([0.1, 0.5, 0.0])
    assert [p.get_height() for p in kl.axes[0].patches] == pytest.approx([0.5, 0.1, 0.0])
    assert "total 0.6 nats" in kl.axes[0].get_title()

    au = active_units_figure([0.5, 0.001, 0.02, 0.0])
    assert au.axes[0].get_title() == "active units: 2 of 4"  # Var > 0.01 (Burda et al. 2016)

    assert set(geometry_figures(lam)) == {"spectrum"}  # a BERT-like encoder has no posterior
    with pytest.raises(ValueError, match="kl_per_dim"):
        kl_per_dimension_figure([np.nan])


def test_save_writes_non_trivial_pngs(tmp_path):
    rng = np.random.default_rng(0)
    paths = save_geometry_plots(tmp_path / "plots", rng.random(16), rng.random(16), rng.random(16))
    assert sorted(p.name for p in paths) == ["active_units.png", "kl_per_dim.png", "spectrum.png"]
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    pixels = figure_to_array(spectrum_figure(rng.random(16)))
    assert pixels.shape == (400, 600, 3) and pixels.dtype == np.uint8
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 10  # drawn, not a blank canvas


def test_geometry_cli_plots(tmp_path, tiny_ckpt, probe_file, capsys):
    def geometry(output: str, plots) -> int:
        extra = ["--min-count", "2", "--plot-dir", str(plots)]
        return run_cli(_main, geometry_args(tiny_ckpt, probe_file, tmp_path / output, *extra))

    plots = tmp_path / "plots"
    rc = geometry("g.json", plots)
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert sorted(p.name for p in plots.iterdir()) == [
        "active_units.png",
        "kl_per_dim.png",
        "spectrum.png",
    ]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in plots.iterdir())
    assert "spectrum.png" in out.out

    (tmp_path / "file").write_text("x")
    rc = geometry("g2.json", tmp_path / "file")
    assert rc == 2 and "--plot-dir" in capsys.readouterr().err


def test_callback_logs_images(tmp_path, tiny_ckpt, tiny_sentences, probe_file):
    _, log_dir = fit(
        CheckpointSystem(tiny_ckpt, tiny_sentences),
        tmp_path,
        [GeometryMetrics(probe_file=str(probe_file), min_count=2)],
        epochs=1,
    )
    ea = EventAccumulator(str(log_dir), size_guidance={"images": 0}).Reload()
    expected = {
        "geometry/plots/spectrum",
        "geometry/plots/kl_per_dim",
        "geometry/plots/active_units",
    }
    assert expected <= set(ea.Tags()["images"])
    image = ea.Images("geometry/plots/spectrum")[-1]
    assert (image.width, image.height) == (600, 400)
    assert (
        image.encoded_image_string.startswith(PNG_MAGIC) and len(image.encoded_image_string) > 5000
    )
