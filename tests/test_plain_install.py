"""The plain install (`pip install torch -e .`, no extras) trains every shipped CPU config.

The README's first command once failed on every fresh machine while the suite, run beside the
test extras, passed (tests/test_whole_numbers.py has the cause). `.ci/run` builds the plain
install in a venv of its own, runs the README's first command there, and names its
interpreter in $VAT_PLAIN_PYTHON for this test; without it (a developer's machine) the test
runs in tests/plain_site.py's view of the test environment, which imports the same packages.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, _require
from plain_site import make_plain_site, plain_env, plain_python

CPU_CONFIGS = ("demo", "corpus_cpu")
"""The shipped configs a CPU trains. Not vat.yaml (its data comes from the Hub) nor the GPU
configs (accelerator gpu, bf16, compiled steps); tests/test_whole_numbers.py parses those."""

# Two steps with the config's own validation (its limit_val_batches, callbacks and all) at
# step 2; corpus_cpu trains on the demo corpus (its own 510k lines take minutes to prepare).
TRAIN = {
    "demo": [],
    "corpus_cpu": ["--data.train_files", "[data/demo_en.txt.gz]", "--trainer.max_time", "null"],
}


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> tuple[list[str], dict[str, str]]:
    """(the plain interpreter's command, its environment)."""
    given = os.environ.get("VAT_PLAIN_PYTHON")
    if given:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        return [given], env
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but $VAT_PLAIN_PYTHON is not set: .ci/run builds the plain venv")
    site = make_plain_site(tmp_path_factory.mktemp("plain_site"))
    return plain_python(), plain_env(site)


def test_the_plain_environment_has_no_extras(plain):
    command, env = plain
    probe = "import importlib.util as u; print([m for m in ('transformers', 'matplotlib', "
    probe += "'sentence_transformers', 'gradio', 'pytest') if u.find_spec(m)])"
    r = subprocess.run([*command, "-c", probe], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", CPU_CONFIGS)
def test_the_plain_install_trains_every_shipped_cpu_config(name, plain, tmp_path):
    if name == "corpus_cpu":  # its validation file and probe sentences, as the config names them
        _require(ROOT.parent / "shared" / "data" / "corpus")
    command, env = plain
    run = tmp_path / "run"
    argv = [*command, "-m", "vat", "train", "-c", name, "--run_dir", str(run),
            "--data.cache_dir", str(tmp_path / "cache"), "--trainer.max_steps", "2",
            "--trainer.val_check_interval", "2", "--no-progress", *TRAIN[name]]  # fmt: skip
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=480)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert "vat: final validation: NLL given z " in r.stdout, r.stdout[-2000:]
    assert sys.executable not in command or "-S" in command  # never the full test environment
