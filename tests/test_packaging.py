"""The installed package: a wheel in a fresh virtualenv runs `vat` from outside the checkout.

Builds the wheel without network (`--no-build-isolation` uses the installed setuptools),
installs it with `--no-deps` into a venv that sees the system site-packages (torch etc.),
then runs the console script from a folder that holds no vat source, so the packaged
configs must come from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_vat_command_and_configs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_NO_INDEX"] = "1"  # everything needed is local
    # Build from a copy: an in-tree build leaves build/ and *.egg-info in the checkout, and a
    # stale build/lib would put deleted modules into later wheels.
    src = tmp_path / "src"
    shutil.copytree(ROOT / "vat", src / "vat", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(src),
        ],
        check=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    (wheel,) = wheels.glob("variational_auto_transformer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "vat/configs/demo.yaml" in names and "vat/configs/sweeps/sweep.yaml" in names
    # the shipped models are package data, and the wheel stays small (docs/sharing.md)
    shipped = ROOT / "vat" / "shipped"
    for folder in (p for p in shipped.iterdir() if p.is_dir() and p.name[0] != "."):
        for f in folder.iterdir():
            assert f"vat/shipped/{folder.name}/{f.name}" in names
    assert "vat/shipped/demo-wordnet-d64/shipped.json" in names
    # 6.65 MiB with the demo and wmt-tatoeba-en-d128 (docs/sharing.md); room to spare
    assert wheel.stat().st_size < 12 * 2**20, wheel.stat().st_size
    # The distribution is not PyPI's unrelated "vat"; the import package still is `vat`.
    (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    assert "\nName: variational-auto-transformer\n" in zipfile.ZipFile(wheel).read(meta).decode()

    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300
    )
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
        check=True,
        env=env,
        timeout=600,
    )

    outside = tmp_path / "elsewhere"
    outside.mkdir()

    def vat(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(bin_dir / "vat"), *args],
            cwd=outside,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    r = vat("config", "demo")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout) == yaml.safe_load(
        (ROOT / "vat" / "configs" / "demo.yaml").read_text()
    )
    r = vat("config", "--path", "demo")
    assert r.returncode == 0 and str(venv) in r.stdout  # from the wheel, not this checkout
    r = vat("--help")
    assert r.returncode == 0 and all(
        c in r.stdout for c in ("train", "evaluate", "generate", "export")
    )
    r = vat("config")
    assert r.returncode == 0 and "sweeps/sweep" in r.stdout
    # a shipped model, by name, with no network and no training
    env["HF_HUB_OFFLINE"] = "1"
    r = vat("pretrained")
    assert r.returncode == 0 and "demo-wordnet-d64" in r.stdout, r.stderr
    r = vat("generate", "reconstruct", "--model", "demo-wordnet-d64", "He held out his hand.")
    assert r.returncode == 0 and r.stdout == "He held out his hand.\n", r.stderr
    r = vat("nosuchcommand")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown command" in r.stderr

    # What a user does with the installed package, from a folder without vat's source: train
    # a tiny model, export it, and use the folder through every door.
    shutil.copy(ROOT / "tests" / "assets" / "sentences.txt", outside / "sentences.txt")
    shutil.copy(ROOT / "tests" / "assets" / "tiny.yaml", outside / "tiny.yaml")
    r = vat(
        "train", "-c", "tiny.yaml", "--run_dir", "run", "--data.cache_dir", "cache",
        "--data.train_files", '["sentences.txt"]', "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # export and generate in one interpreter of the venv (vat.cli.main is what the console
    # script calls; a process each would add their start-up, not a door)
    script = (
        "import contextlib, io, numpy as np, vat\n"
        "from pathlib import Path\n"
        "from sentence_transformers import SentenceTransformer\n"
        "from vat.cli import main\n"
        f"assert vat.__file__.startswith({str(venv)!r}), vat.__file__\n"
        "assert main(['export', 'run/checkpoints/last.ckpt', 'model']) == 0\n"
        "assert Path('model/model.safetensors').is_file()\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main(['generate', 'reconstruct', '--ckpt', 'model', 'a small test sentence'])\n"
        "assert code == 0 and out.getvalue().count('\\n') == 1, out.getvalue()\n"
        "s = ['a small test sentence', 'another one here']\n"
        "x = vat.load('model').encode(s)\n"
        "y = SentenceTransformer('model', trust_remote_code=True, device='cpu').encode(s)\n"
        "assert x.shape == y.shape and np.abs(x - y).max() < 1e-5, np.abs(x - y).max()\n"
        "print('ok', x.shape)\n"
    )
    r = subprocess.run(
        [str(bin_dir / "python"), "-c", script],
        cwd=outside, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0 and r.stdout.endswith("ok (2, 32)\n"), r.stderr[-2000:]
