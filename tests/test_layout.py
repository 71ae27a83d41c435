"""The package layout (issue 19): the house rules hold, old import paths and entry points keep
working or refuse loudly, and one resolver says what a model path means."""

from __future__ import annotations

import os
import runpy
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


def test_old_import_paths_are_the_same_objects():
    import vat.checkpoint
    import vat.hub
    import vat.losses
    import vat.module

    import vat
    from vat import geometry
    from vat.data import VATDataModule
    from vat.data.datamodule import VATDataModule as new_datamodule
    from vat.generate import VATGenerator
    from vat.generate.generator import VATGenerator as new_generator
    from vat.geometry.metrics import anisotropy
    from vat.share import export, hub, resolve
    from vat.train import losses, schedules, system

    assert vat.module.VATSystem is system.VATSystem
    assert vat.checkpoint.load_vat is resolve.load_vat
    assert vat.hub.export_checkpoint is export.export_checkpoint
    assert vat.hub.from_pretrained is hub.from_pretrained
    assert vat.losses.gaussian_kl is losses.gaussian_kl
    assert vat.losses.KLSchedule is schedules.KLSchedule
    assert VATDataModule is new_datamodule and VATGenerator is new_generator
    assert geometry.anisotropy is anisotropy and callable(geometry.geometry_report)
    assert vat.VAT.__module__ == "vat.model"


@pytest.mark.parametrize(
    ("module", "command"),
    [
        ("vat.generate", "vat generate"),
        ("vat.experiments.sweep", "vat sweep"),
        ("vat.integrations.mteb", "vat mteb"),
    ],
)
def test_old_python_m_entry_points_refuse_loudly(module, command, capsys, monkeypatch):
    """`python -m vat.generate reconstruct ...` used to decode; it must never exit 0 having
    done nothing: exit 2 and one line naming the command that replaced it."""
    monkeypatch.setattr(sys, "argv", [module, "reconstruct", "--ckpt", "x"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.count("\n") == 1 and err.startswith("error:") and f"`{command}" in err


# -- one resolver for model paths -----------------------------------------------------------
def test_a_run_folder_means_its_best_checkpoint_else_its_last(tiny_ckpt, tmp_path):
    import vat
    from vat.share.resolve import checkpoint_path, load_vat

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(VatError, match="run folder without checkpoints"):
        load_vat(run)
    shutil.copy(tiny_ckpt, run / "checkpoints" / "last.ckpt")
    assert checkpoint_path(run) == run / "checkpoints" / "last.ckpt"
    shutil.copy(tiny_ckpt, run / "checkpoints" / "best-step0000010.ckpt")
    assert checkpoint_path(run) == run / "checkpoints" / "best-step0000010.ckpt"
    model = vat.load(run, device="cpu")
    assert model.encode(["a b c"]).shape[0] == 1


def test_a_folder_that_is_no_model_is_a_one_line_error(tmp_path):
    from vat.share.resolve import load_vat

    (tmp_path / "notes").mkdir()
    with pytest.raises(VatError, match="neither an exported vat folder"):
        load_vat(tmp_path / "notes")
    with pytest.raises(VatError, match="does not exist"):
        load_vat(tmp_path / "missing.ckpt")
