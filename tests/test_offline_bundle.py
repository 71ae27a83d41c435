"""scripts/offline_bundle.sh: build a bundle for this machine's Python (needs the package
index once, for the download), install it into a fresh venv with no index, import what it
installed; a tampered or foreign bundle is a one-line error."""

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


# -- never delete or write through what the bundle did not write --------------------------
def _manifest(wheels=(), python=PY, data=()):
    return {"python": python, "wheels": list(wheels), "data": list(data), "packages": []}


def _wheel_entry(name, imports=("old",)):
    return {"file": name, "sha256": "0" * 64, "bytes": 1, "imports": list(imports)}


def test_a_rebuild_replaces_only_the_wheels_its_manifest_lists(tmp_path):
    out = tmp_path / "offline"
    (out / "wheels").mkdir(parents=True)
    ours, mine = "old-1.0-py3-none-any.whl", "mine-1.0-py3-none-any.whl"
    (out / "wheels" / ours).write_bytes(b"x")
    (out / "wheels" / mine).write_bytes(b"the user's own wheel")
    (out / "bundle.json").write_text(json.dumps(_manifest([_wheel_entry(ours)])))
    r = _run(["--python", PY, "--packages", "", "--no-data", str(out)])
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (out / "wheels").iterdir()) == [mine]  # before: deleted too
    assert (out / "wheels" / mine).read_bytes() == b"the user's own wheel"
    assert json.loads((out / "bundle.json").read_text())["wheels"] == []
    assert sorted(p.name for p in out.iterdir()) == ["bundle.json", "wheels"]  # no temp folder


@pytest.mark.parametrize("sub", ["wheels", "data"])
def test_a_symlinked_subfolder_is_refused_and_its_target_untouched(tmp_path, sub):
    out, theirs = tmp_path / "offline", tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "a-1.0-py3-none-any.whl").write_bytes(b"keep")
    out.mkdir()
    (out / "bundle.json").write_text(
        json.dumps(_manifest([_wheel_entry("a-1.0-py3-none-any.whl")]))
    )
    (out / sub).symlink_to(theirs)
    r = _run(["--python", PY, "--packages", "", "--no-data", str(out)])
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"DIR {out / sub} is a symbolic link to {theirs}" in r.stderr
    assert (theirs / "a-1.0-py3-none-any.whl").read_bytes() == b"keep"


def test_a_symlink_loop_or_a_bad_python_is_one_line(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for args, needle in (
        (["--packages", "", "--no-data", str(loop)], f"DIR {loop} is a symbolic link loop"),
        (["--install", str(loop)], f"--install {loop} is a symbolic link loop"),
        (["--python", "abc", "--no-data", str(tmp_path / "new")], "expected a Python version"),
        (["--python", "3.12; rm", str(tmp_path / "new")], "expected a Python version"),
    ):
        r = _run(args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    assert not (tmp_path / "new").exists()


BAD_MANIFESTS = {
    "a list": ([], "is a JSON list, not a bundle manifest"),
    "not JSON": ("{", "is not valid JSON"),
    "nested too deeply": ("[" * 100_000, "is not valid JSON"),
    "no python": ({"wheels": [], "data": []}, "'python' must be"),
    "wheels a string": (_manifest(wheels="x"), "'wheels' must be a list of objects"),
    "no data": ({"python": PY, "wheels": []}, "'data' must be a list of objects"),
    "a wheel outside": (_manifest([_wheel_entry("../x.whl")]), "'wheels[0].file' must be"),
    "a code import": (
        _manifest([_wheel_entry("x.whl", ["os; os.system('touch hacked')"])]),
        "'wheels[0].imports' must be a list of module names",
    ),
    "a data path outside": (
        _manifest(data=[{"path": "../../etc/passwd", "bytes": 1}]),
        "'data[0].path' must be a path inside",
    ),
    "a size that is text": (
        _manifest(data=[{"path": "a.txt", "bytes": "1"}]),
        "'data[0].bytes' must be a size",
    ),
    "larger than any manifest": (" " * (5 << 20) + "{}", "is over 4 MiB, not a bundle manifest"),
}


@pytest.mark.parametrize("case", BAD_MANIFESTS)
def test_a_malformed_manifest_is_one_line_before_anything_runs(tmp_path, case):
    content, needle = BAD_MANIFESTS[case]
    out = tmp_path / "offline"
    out.mkdir()
    text = content if isinstance(content, str) else json.dumps(content)
    (out / "bundle.json").write_text(text)
    r = _run(["--install", str(out)])
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {out / 'bundle.json'}") and needle in r.stderr, r.stderr
    assert not (tmp_path / "hacked").exists() and not Path("hacked").exists()


def _fake_data(root: Path) -> Path:
    """One small file per pattern the suite reads (bench/gpu_suite/plan.py's data_patterns),
    so that a build copies data in milliseconds."""
    for rel in (
        "corpus/wmt_newstest_en/newstest_en.2008.txt.gz",
        "corpus/wmt_newstest_en/newstest_en.2010.txt.gz",
        "corpus/tatoeba_en.txt.gz",
        "corpus/multi30k_en.txt.gz",
        "corpus/wmt_newstest_deen/newstest2018.de-en.en",
        "corpus/wmt_newstest_deen/newstest2019.de-en.en",
        "senteval/STS/STS12-en-test/a.txt",
        "senteval/STS/STSBenchmark/b.csv",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"new {rel}\n")
    return root


def test_a_rebuild_never_overwrites_a_data_file_it_did_not_write(tmp_path):
    data = _fake_data(tmp_path / "shared")
    out, mine = tmp_path / "offline", tmp_path / "mine.txt"
    r = _run(["--python", PY, "--packages", "", "--data-dir", str(data), str(out)])
    assert r.returncode == 0, r.stderr
    # a link named as the build's temporary copy was once named: never written through
    mine.write_text("the user's")
    corpus = out / "data" / "corpus"
    (corpus / ".tatoeba_en.txt.gz.tmp").symlink_to(mine)
    r = _run(["--python", PY, "--packages", "", "--data-dir", str(data), str(out)])
    assert r.returncode == 0, r.stderr
    assert mine.read_text() == "the user's"  # before: the new data written into it
    assert (corpus / "tatoeba_en.txt.gz").read_text() == "new corpus/tatoeba_en.txt.gz\n"
    # a file at a data path that the manifest does not list is the user's: refused, untouched
    m = json.loads((out / "bundle.json").read_text())
    m["data"] = [f for f in m["data"] if f["path"] != "corpus/tatoeba_en.txt.gz"]
    ours = "old-1.0-py3-none-any.whl"
    (out / "wheels" / ours).write_bytes(b"ours")
    m["wheels"] = [_wheel_entry(ours)]
    (out / "bundle.json").write_text(json.dumps(m))
    (corpus / "tatoeba_en.txt.gz").write_text("the user's data")
    r = _run(["--python", PY, "--packages", "", "--data-dir", str(data), str(out)])
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(
        f"error: {corpus / 'tatoeba_en.txt.gz'} is not one of this bundle's data files"
    )
    assert (corpus / "tatoeba_en.txt.gz").read_text() == "the user's data"  # before: replaced
    assert (out / "wheels" / ours).read_bytes() == b"ours"  # refused before anything changed
    assert json.loads((out / "bundle.json").read_text()) == m


def test_a_package_that_is_a_pip_option_or_a_failed_download_leaves_nothing(tmp_path):
    out = tmp_path / "new"
    no_index = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_CONFIG_FILE": os.devnull}
    no_index["PIP_RETRIES"] = "0"
    for packages, needle in (
        ("-r /etc/passwd", "error: --packages: '-r' is not a package (NAME==VER)"),
        ("dill --index-url=http://x", "'--index-url=http://x' is not a package"),
        ("no-such-package-vat==0.0.1", "pip could not download a wheel for Python"),
    ):
        r = _run(["--python", PY, "--packages", packages, "--no-data", str(out)], env=no_index)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert needle in r.stderr and "root:" not in r.stderr  # before: /etc/passwd's line
        assert not out.exists()  # before: an empty folder was left


def test_a_python_that_is_not_an_interpreter_is_one_line(tmp_path):
    for python in ("abc", os.devnull, "false"):
        r = _run(["--install", str(tmp_path)], python=python)
        assert r.returncode == 2, r  # before: exit 127 and bash's own message
        assert r.stderr == (
            f"error: PYTHON={python} is not a Python 3.10+ interpreter here (set PYTHON to one, "
            "e.g. python3)\n"
        )


@pytest.mark.parametrize("sub", ["wheels", "data"])
def test_a_bundle_subfolder_that_is_a_link_loop_is_one_line_at_install(tmp_path, sub):
    out = tmp_path / "offline"
    out.mkdir()
    wheel = "a-1.0-py3-none-any.whl"
    (out / "bundle.json").write_text(
        json.dumps(_manifest([_wheel_entry(wheel)], data=[{"path": "a.txt", "bytes": 1}]))
    )
    (out / sub).symlink_to(out / sub)
    r = _run(["--install", str(out)])
    assert r.returncode == 2 and r.stderr == (  # before: "... is missing", as if deleted
        f"error: --install {out}: {sub}/ is a symbolic link loop or a dangling link; rebuild "
        "the bundle\n"
    )
