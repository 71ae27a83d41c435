# ruff: noqa: UP007 (typing.Union objects are what these tests are about)
"""`vat train` reads the numbers a user writes as written (vat/cli/whole_numbers.py):
`limit_val_batches: 8` is 8 batches whatever was imported first.

The parsing runs in a subprocess that imports exactly what a plain install imports
(tests/plain_site.py), with typing's union cache primed each way: float-first (what
lightning_fabric does on a plain install, where the bug showed) and int-first."""

from __future__ import annotations

import json
import subprocess
import typing
from pathlib import Path
from typing import Union

import pytest
import yaml
from conftest import ROOT
from plain_site import make_plain_site, plain_env, plain_python

from vat.cli.whole_numbers import int_before_float

CONFIGS = sorted(p.stem for p in (ROOT / "vat" / "configs").glob("*.yaml"))


def test_int_moves_before_float_and_nothing_else_changes():
    # flat unions only here: a nested Optional[Union[float, int]] would prime this worker's
    # typing cache for the tests that run after this one
    assert typing.get_args(int_before_float(Union[float, int, None])) == (int, float, type(None))
    assert typing.get_args(int_before_float(Union[str, float, bool, int])) == (
        str,
        int,
        float,
        bool,
    )
    assert typing.get_args(int_before_float(float | int)) == (int, float)
    for same in (Union[int, float, None], Union[float, str], float, int, list[float], None):
        assert int_before_float(same) is same


@pytest.fixture(scope="module")
def plain_site(tmp_path_factory) -> Path:
    return make_plain_site(tmp_path_factory.mktemp("plain_site"))


# Parses each shipped config (and some command-line values) in a fresh interpreter whose
# typing cache holds PRIME from the start (so Fabric and the Trainer get that order), and
# prints what the Trainer received.
PARSE = r"""
import json, sys, warnings
from typing import Optional, Union
class KeepPrimed:  # typing's union cache is an LRU of 128: touch PRIME at every import
    def find_spec(self, *args):
        PRIME
sys.meta_path.insert(0, KeepPrimed())
PRIME
import inspect, lightning.pytorch as pl
annotation = inspect.signature(pl.Trainer.__init__).parameters["limit_val_batches"].annotation
from vat.cli.train import _build_cli, _quiet_warnings
_quiet_warnings()
warnings.filterwarnings("ignore")
KEYS = ("limit_train_batches", "limit_val_batches", "val_check_interval", "gradient_clip_val",
        "max_steps", "log_every_n_steps", "accumulate_grad_batches")
out = {"annotation": [a.__name__ for a in annotation.__args__], "configs": {}, "options": {}}
def read(args):
    cfg = _build_cli([*args, "--trainer.accelerator", "cpu", "--run_dir", sys.argv[1]],
                     run=False).config.trainer
    return {k: [type(cfg[k]).__name__, cfg[k]] for k in KEYS if cfg.get(k) is not None}
for name in json.loads(sys.argv[2]):
    out["configs"][name] = read(["-c", f"configs/{name}.yaml"])
for text in ("8", "0.25", "1", "1.0"):
    out["options"][text] = read(["-c", "configs/demo.yaml", "--trainer.limit_val_batches", text,
                                 "--trainer.gradient_clip_val", text])
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "prime, first",
    [("Optional[Union[float, int]]", "float"), ("Optional[Union[int, float]]", "int")],
    ids=["float-first cache", "int-first cache"],
)
def test_shipped_configs_and_options_are_read_as_written(plain_site, tmp_path, prime, first):
    code = PARSE.replace("PRIME", prime)
    r = subprocess.run(
        [*plain_python(), "-c", code, str(tmp_path / "run"), json.dumps(CONFIGS)],
        cwd=ROOT,
        env=plain_env(plain_site),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # the priming took: Lightning's own annotation comes back in the primed order
    assert out["annotation"][0] == first
    for name in CONFIGS:
        written = yaml.safe_load((ROOT / "vat" / "configs" / f"{name}.yaml").read_text())["trainer"]
        for key, (kind, value) in out["configs"][name].items():
            if key in written and written[key] is not None:
                assert (kind, value) == (type(written[key]).__name__, written[key]), (name, key)
    assert out["configs"]["demo"]["limit_val_batches"] == ["int", 8]
    opts = out["options"]
    for key in ("limit_val_batches", "gradient_clip_val"):
        assert opts["8"][key] == ["int", 8]
        assert opts["1"][key] == ["int", 1]  # one batch, not the whole epoch
        assert opts["0.25"][key] == ["float", 0.25]
        assert opts["1.0"][key] == ["float", 1.0]  # the whole epoch


def test_a_whole_float_limit_is_that_many_batches_as_lightning_reads_it():
    """Lightning reads `limit_train_batches 3.0` as 3 batches (not 3 epochs): vat's check of
    the settings against the data counts it the same way."""
    from vat.cli.trainer_settings import EpochSize, check_against_data
    from vat.errors import VatError

    trainer = {"limit_train_batches": 3.0, "val_check_interval": 5}
    with pytest.raises(VatError, match=r"interval 5 is longer than an epoch \(3 training batches"):
        check_against_data(trainer, EpochSize(train=10, val=1))
    check_against_data({**trainer, "limit_train_batches": 0.5}, EpochSize(train=10, val=1))
