"""The package layout: the house rules hold, no compatibility layer remains, and one resolver
says what a model path means."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, shared_data_dir

from vat.errors import VatError

HOUSE_CHECK = shared_data_dir().parent / "tools" / "house_check.py"


def test_house_rules_hold():
    """No import circles (function-level imports counted), no library-to-CLI imports, no
    private names imported across modules, and at most 12 modules at vat/'s root."""
    if not HOUSE_CHECK.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{HOUSE_CHECK} is missing (CI must see ../shared)")
        pytest.skip(f"{HOUSE_CHECK} not found")
    r = subprocess.run(
        [sys.executable, str(HOUSE_CHECK), str(ROOT / "vat")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout
    root_modules = int(r.stdout.strip().splitlines()[-1].split()[0])
    assert root_modules <= 12


@pytest.mark.parametrize(
    "old",
    ["vat.module", "vat.checkpoint", "vat.hub", "vat.losses", "vat.generate.__main__"],
)
def test_no_compatibility_layer_remains(old):
    """A project with no release keeps no old import paths or entry-point stubs: each concept
    has one home (vat.train.system, vat.share.*, vat.train.losses, `vat ...`). The root's
    train.py and evaluate.py are recipes that show the steps, not stubs that call a command."""
    import importlib.util

    assert importlib.util.find_spec(old) is None
    train, evaluate = (ROOT / "train.py").read_text(), (ROOT / "evaluate.py").read_text()
    assert "fit(trainer, system, data" in train and "vat.cli.train import main" not in train
    assert "evaluate(encoder, tasks" in evaluate and "vat.cli.evaluate import main" not in evaluate


def test_one_place_per_concept():
    import vat
    from vat import geometry
    from vat.data import VATDataModule
    from vat.data.datamodule import VATDataModule as new_datamodule
    from vat.generate import VATGenerator
    from vat.generate.generator import VATGenerator as new_generator
    from vat.geometry.metrics import anisotropy

    assert VATDataModule is new_datamodule and VATGenerator is new_generator
    assert geometry.anisotropy is anisotropy and callable(geometry.geometry_report)
    assert vat.VAT.__module__ == "vat.model"


# -- one resolver for model paths -----------------------------------------------------------
def test_a_run_folder_means_its_best_checkpoint_else_its_last(tiny_ckpt, tmp_path):
    import vat
    from vat.share.resolve import load_model, resolve_model

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(VatError, match="run folder without checkpoints"):
        load_model(run)
    shutil.copy(tiny_ckpt, run / "checkpoints" / "last.ckpt")
    assert resolve_model(run).path == run / "checkpoints" / "last.ckpt"
    shutil.copy(tiny_ckpt, run / "checkpoints" / "best-step0000010.ckpt")
    source = resolve_model(run)
    assert source.path == run / "checkpoints" / "best-step0000010.ckpt"
    assert (source.kind, source.run_dir, source.name) == ("checkpoint", str(run), "run")
    model = vat.load(run, device="cpu")
    assert model.encode(["a b c"]).shape[0] == 1


def test_a_folder_that_is_no_model_is_a_one_line_error(tmp_path):
    from vat.share.resolve import load_model

    (tmp_path / "notes").mkdir()
    with pytest.raises(VatError, match="neither an exported vat folder"):
        load_model(tmp_path / "notes")
    with pytest.raises(VatError, match="does not exist"):
        load_model(tmp_path / "missing.ckpt")
