"""scripts/offline_bundle.sh (issue 22): build a bundle for this machine's Python (needs the
package index once, for the download), install it into a fresh venv with no index, import
what it installed; a tampered or foreign bundle is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SH = ROOT / "scripts" / "offline_bundle.sh"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
PACKAGE = "docstring-parser==0.18.0"  # small, pure Python, not in a fresh venv


def _run(args, python=sys.executable, env=None):
    env = {**os.environ, "PYTHON": str(python), **(env or {})}
    return subprocess.run([str(SH), *args], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("bundle") / "offline"
    r = _run(["--python", PY, "--packages", PACKAGE, "--data-dir", str(data_dir), str(out)])
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow
def test_bundle_builds_and_installs_into_a_fresh_venv_with_no_index(bundle, tmp_path, data_dir):
    m = json.loads((bundle / "bundle.json").read_text())
    assert m["python"] == PY and m["packages"] == [PACKAGE]
    assert [w["file"] for w in m["wheels"]] == ["docstring_parser-0.18.0-py3-none-any.whl"]
    assert m["wheels"][0]["imports"] == ["docstring_parser"]
    # the data the suite reads, byte for byte, and the whole bundle under 60 MiB
    paths = {f["path"] for f in m["data"]}
    assert "corpus/wmt_newstest_deen/newstest2019.de-en.en" in paths
    assert any(p.startswith("senteval/STS/STSBenchmark/") for p in paths)
    for f in m["data"]:
        assert (bundle / "data" / f["path"]).read_bytes() == (data_dir / f["path"]).read_bytes()
    assert m["total_bytes"] <= 60 * 2**20

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    assert subprocess.run([py, "-c", "import docstring_parser"], capture_output=True).returncode
    no_index = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_CONFIG_FILE": os.devnull}
    r = _run(["--install", str(bundle)], python=py, env=no_index)
    assert r.returncode == 0, r.stderr
    assert "installed 1 wheels" in r.stdout
    assert f"export VAT_DATA_DIR={(bundle / 'data').resolve()}" in r.stdout
    ok = subprocess.run(
        [py, "-c", "import docstring_parser; print(docstring_parser.parse('x').short_description)"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and ok.stdout.strip() == "x"


@pytest.mark.slow
def test_a_missing_or_altered_wheel_or_another_python_is_one_line(bundle, tmp_path):
    wheel = next((bundle / "wheels").glob("*.whl"))
    data = wheel.read_bytes()
    try:
        wheel.write_bytes(data[:-1])
        r = _run(["--install", str(bundle)])
        assert r.returncode == 2 and r.stderr.count("\n") == 1
        assert r.stderr.startswith(f"error: {wheel} differs from the one")
        wheel.unlink()
        r = _run(["--install", str(bundle)])
        assert r.returncode == 2 and f"{wheel} is missing" in r.stderr
    finally:
        wheel.write_bytes(data)
    m = json.loads((bundle / "bundle.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "bundle.json").write_text(json.dumps({**m, "python": "3.99", "wheels": []}))
    r = _run(["--install", str(other)])
    assert r.returncode == 2
    assert r.stderr == (
        f"error: --install {other}: its wheels are for Python 3.99, this is Python {PY} "
        f"(build one with --python {PY})\n"
    )
    r = _run(["--install", str(tmp_path / "none")])
    assert r.returncode == 2 and "no bundle.json (not an offline bundle)" in r.stderr
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    r = _run(["--no-data", "--packages", "", str(tmp_path / "mine")])
    assert r.returncode == 2 and "is not an offline bundle; choose a new folder" in r.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
