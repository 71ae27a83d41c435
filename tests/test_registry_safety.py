"""The shipped-model registry keeps to vat's rules on files: scripts/add_pretrained.py copies
only what an exported folder consists of, replaces only what it wrote and cleans up after a killed
add; a damaged shipped.json is one line naming it and does not break paths, Hub ids or typo
suggestions; shipped.json names only files inside its entry, whose sizes loading checks
without reading them; `vat pretrained show` checks what loading checks; and model names that
are no path (a Path spelling a shipped name, a name too long for the filesystem) say so.

Every test works on a registry in tmp_path ($VAT_SHIPPED_DIR or --registry), never on the
package's vat/shipped/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
from helpers import add_main, add_pretrained_script, copy_folder, one_line_error

import vat
from vat.cli import main as vat_main
from vat.errors import CheckpointError, OptionError, VatError
from vat.io import temp_prefix
from vat.share.pretrained import (
    PACKAGE_SHIPPED_DIR,
    SHIPPED_DIR_ENV,
    shipped_model,
    shipped_models,
)

DEMO = "demo-wordnet-d64"


@pytest.fixture
def empty_registry(tmp_path, monkeypatch):
    reg = tmp_path / "registry"
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(reg))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return reg


def _add(folder: Path, name: str, *extra: str) -> list[str]:
    # the random tiny model's greedy decoding is nearly tied: float16 changes a line of the
    # check sentences, beyond the tolerance of a shipped model (tests/test_shipped.py)
    return [str(folder), "--name", name, "--allow-outside-tolerance", *extra]


# -- what add copies ---------------------------------------------------------------------------
def test_add_copies_only_the_files_of_an_export(tiny_export, tmp_path, empty_registry, capsys):
    folder = copy_folder(tiny_export, tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("a file elsewhere on this machine")
    (folder / "notes.txt").write_text("my notes")
    (folder / "link.json").symlink_to(outside)
    (folder / "sub").mkdir()
    (folder / "sub" / "x.txt").write_text("x")
    os.mkfifo(folder / "pipe")
    # a link under an export file's name is not followed out: refused, nothing written
    st_file = folder / "config_sentence_transformers.json"
    st_file.rename(tmp_path / "st.json")
    st_file.symlink_to(tmp_path / "st.json")
    err = one_line_error(capsys, _add(folder, "tiny"), main=add_main)
    assert f"{st_file} is a symbolic link" in err and not empty_registry.exists()
    st_file.unlink()
    (tmp_path / "st.json").rename(st_file)
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # the test settings silence UserWarning
        assert add_main(_add(folder, "tiny")) == 0
    err = capsys.readouterr().err
    entry = empty_registry / "tiny"
    names = {p.name for p in entry.iterdir()}
    for left in ("notes.txt", "link.json", "sub", "pipe"):
        assert left not in names, left
    assert "config_sentence_transformers.json" in names
    assert all(p.is_file() and not p.is_symlink() for p in entry.iterdir())
    [warning] = [ln for ln in err.splitlines() if "left out" in ln]
    assert warning.startswith("warning: left out of tiny, as no part of an exported folder: ")
    for left in ("notes.txt", "link.json", "sub", "pipe"):
        assert left in warning, (left, warning)
    assert shipped_model("tiny").verify() is None
    vat.load("tiny", device="cpu")  # the entry is whole without the left-out files


# -- --overwrite replaces only what vat wrote ----------------------------------------------------
def test_overwrite_refuses_an_entry_holding_a_file_vat_did_not_write(
    tiny_export, empty_registry, capsys
):
    assert add_main(_add(tiny_export, "tiny")) == 0
    capsys.readouterr()
    (empty_registry / "tiny" / "my-notes.txt").write_text("keep")
    err = one_line_error(capsys, _add(tiny_export, "tiny", "--overwrite"), main=add_main)
    assert "my-notes.txt" in err and str(empty_registry / "tiny") in err
    assert (empty_registry / "tiny" / "my-notes.txt").read_text() == "keep"
    (empty_registry / "tiny" / "my-notes.txt").unlink()
    (empty_registry / "tiny" / "sub").mkdir()  # a folder is no file vat writes either
    err = one_line_error(capsys, _add(tiny_export, "tiny", "--overwrite"), main=add_main)
    assert "sub" in err and (empty_registry / "tiny" / "sub").is_dir()
    (empty_registry / "tiny" / "sub").rmdir()
    assert add_main(_add(tiny_export, "tiny", "--overwrite")) == 0


# -- a killed add ---------------------------------------------------------------------------------
def test_the_next_add_removes_the_temp_folder_of_a_killed_add(tiny_export, empty_registry, capsys):
    empty_registry.mkdir()
    # an add killed mid-write: its temp folder, named after its process, which has ended
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    prefix = temp_prefix(empty_registry / "x").replace(str(os.getpid()), ended.stdout.strip())
    dead = empty_registry / f"{prefix}abcd1234"
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"half")
    # a temp of a process that is alive (this one's parent) stays
    alive = empty_registry / f".y.tmp-{os.getppid()}@{dead.name.split('@')[1]}"
    alive.mkdir()
    assert vat_main(["pretrained"]) == 0  # listing ignores both
    assert "no models ship" in capsys.readouterr().out
    assert add_main(_add(tiny_export, "tiny")) == 0
    capsys.readouterr()
    assert not dead.exists() and alive.is_dir()
    assert sorted(p.name for p in empty_registry.iterdir()) == sorted([alive.name, "tiny"])


def test_two_adds_of_one_name_at_once_write_it_once(tiny_export, empty_registry):
    add_pretrained = add_pretrained_script().add_pretrained

    model = vat.load(tiny_export, device="cpu")
    results: list[object] = []
    start = threading.Barrier(2)

    def add() -> None:
        start.wait()
        try:
            results.append(add_pretrained(model, "tiny", check_sentences=["a test"]))
        except VatError as e:
            results.append(e)

    threads = [threading.Thread(target=add) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    errors = [r for r in results if isinstance(r, VatError)]
    assert len(results) == 2 and len(errors) == 1, results
    assert "already ships a model named tiny" in str(errors[0])
    assert [p.name for p in empty_registry.iterdir()] == ["tiny"]


# -- a damaged shipped.json -----------------------------------------------------------------------
CORRUPT = {
    "not JSON": "{",
    "not an object": "[1, 2]",
    "sha256 a list": json.dumps({"name": DEMO, "sha256": [1, 2]}),
    "sha256 of a number": json.dumps({"name": DEMO, "sha256": {"config.json": 5}}),
    "nested garbage": "[" * 100_000,
    "dtype an object": json.dumps({"name": DEMO, "dtype": {"a": 1}, "sha256": {}}),
}


@pytest.mark.parametrize("text", CORRUPT.values(), ids=CORRUPT.keys())
def test_a_damaged_shipped_json_is_one_line_and_breaks_nothing_else(
    text, registry_copy, tiny_export, tmp_path, monkeypatch, capsys
):
    damaged = registry_copy / DEMO / "shipped.json"
    damaged.write_text(text)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_export, tmp_path / "mymodel")
    # the listing: the intact models, and one line naming the damaged file
    assert vat_main(["pretrained"]) == 2
    cap = capsys.readouterr()
    assert "wmt-tatoeba-en-d128" in cap.out and DEMO not in cap.out
    assert cap.err.count("\n") == 1 and str(damaged) in cap.err, cap.err
    # loading it by name: one line naming the file
    err = one_line_error(capsys, ["generate", "reconstruct", "--model", DEMO, "x"])
    assert str(damaged) in err
    with pytest.raises(CheckpointError, match="shipped.json"):
        vat.load(DEMO, device="cpu")
    # paths, and the typos of paths and of the other names, do not read the damaged entry
    assert vat.load("mymodel", device="cpu").loaded.source.kind == "folder"
    with pytest.raises(OptionError, match=r"did you mean mymodel\?"):
        vat.load("mymodle")
    with pytest.raises(OptionError, match=r"did you mean the shipped model wmt-tatoeba-en-d128"):
        vat.load("wmt-tatoeba-en-d12")
    err = one_line_error(capsys, ["generate", "reconstruct", "--model", "demo-wordnet-d46", "x"])
    assert "does not exist" in err and "Traceback" not in err
    # --overwrite repairs it
    assert add_main(_add(tiny_export, DEMO, "--overwrite")) == 0
    capsys.readouterr()
    assert vat.load(DEMO, device="cpu").loaded.source.kind == "shipped"


# -- shipped.json names files inside its entry --------------------------------------------------
@pytest.mark.parametrize("where", ["absolute", "dot-dot", "link out", "folder"])
def test_shipped_json_names_only_files_inside_its_entry(where, registry_copy, tmp_path, capsys):
    entry = registry_copy / DEMO
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"secret")
    info = json.loads((entry / "shipped.json").read_text())
    name = {
        "absolute": str(outside),
        "dot-dot": "../../outside.bin",
        "link out": "notes.bin",
        "folder": "sub/x.bin",
    }[where]
    if where == "link out":
        (entry / name).symlink_to(outside)
    if where == "folder":
        (entry / "sub").mkdir()
        (entry / "sub" / "x.bin").write_bytes(b"x")
    info["sha256"][name] = "0" * 64
    info["bytes"][name] = 6
    (entry / "shipped.json").write_text(json.dumps(info))
    err = one_line_error(capsys, ["generate", "reconstruct", "--model", DEMO, "x"])
    if where == "link out":  # a plain name, but a link: named before anything is read
        assert f"{entry / name} is a symbolic link" in err
    else:
        assert f"{entry / 'shipped.json'} lists {name!r}, which is not a file name inside" in err


@pytest.mark.parametrize("target", ["an entry elsewhere", "nothing"])
def test_an_entry_that_is_a_symbolic_link_is_named_as_one(target, registry_copy, tmp_path, capsys):
    """An entry is a folder of the registry's own: a link in its place is not followed, and
    naming it says so in one line (before: a link to an entry elsewhere loaded that entry, a
    dangling one was "does not exist")."""
    entry = registry_copy / DEMO
    elsewhere = tmp_path / "elsewhere" / DEMO
    elsewhere.parent.mkdir()
    if target == "an entry elsewhere":
        shutil.move(entry, elsewhere)
    else:
        shutil.rmtree(entry)
    entry.symlink_to(elsewhere)
    expected = f"{entry} is a symbolic link, which the registry does not follow"
    for argv in (
        ["generate", "reconstruct", "--model", DEMO, "x"],
        ["generate", "reconstruct", "--model", f"vat:{DEMO}", "x"],
        ["pretrained", "show", DEMO],
    ):
        err = one_line_error(capsys, argv)
        assert expected in err and "does not exist" not in err, err
    with pytest.raises(CheckpointError, match=expected):
        vat.load(DEMO, device="cpu")
    # the listing: the intact model, and the link named in one line (a dangling one is no
    # folder: left out, as a file in the registry is)
    assert vat_main(["pretrained"]) == (2 if target == "an entry elsewhere" else 0)
    cap = capsys.readouterr()
    assert "wmt-tatoeba-en-d128" in cap.out and DEMO not in cap.out
    if target == "an entry elsewhere":
        assert cap.err.count("\n") == 1 and expected in cap.err, cap.err


def test_sizes_are_checked_without_reading_the_files(registry_copy, capsys):
    entry = registry_copy / DEMO
    info = json.loads((entry / "shipped.json").read_text())
    assert info["bytes"]["model.safetensors"] == (entry / "model.safetensors").stat().st_size
    with open(entry / "model.safetensors", "r+b") as f:
        f.truncate(64 * 2**30)  # 64 GiB, sparse: hashing it would take minutes
    start = time.monotonic()
    err = one_line_error(capsys, ["pretrained", "show", DEMO])
    assert time.monotonic() - start < 5
    assert "model.safetensors" in err and str(64 * 2**30) in err


def test_every_package_entry_records_its_sizes():
    for entry in shipped_models(PACKAGE_SHIPPED_DIR):
        sizes = entry.info["bytes"]
        assert sizes.keys() == entry.files.keys()
        assert all((entry.folder / f).stat().st_size == n for f, n in sizes.items())


# -- show checks what loading checks ---------------------------------------------------------------
def test_show_checks_what_loading_checks(registry_copy, capsys):
    path = registry_copy / DEMO / "config.json"
    path.write_bytes(path.read_bytes() + b" ")
    err = one_line_error(capsys, ["pretrained", "show", DEMO])
    assert "config.json is" in err and "where shipped.json records" in err


# -- names that are no path ------------------------------------------------------------------
def test_a_path_spelling_a_shipped_name_loads_it(tmp_path, monkeypatch, tiny_export):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(SHIPPED_DIR_ENV, raising=False)
    assert vat.load(Path(DEMO), device="cpu").loaded.source.kind == "shipped"
    # a Path that exists is that path (a Path cannot be written ./NAME)
    shutil.copytree(tiny_export, tmp_path / DEMO)
    assert vat.load(Path(DEMO), device="cpu").loaded.source.kind == "folder"


@pytest.mark.parametrize(
    "text",
    ["x" * 5000, "a" * 300, "/tmp/" + "b" * 300, "vat:" + "x" * 5000],
    ids=["5000 characters", "a 300-character part", "a long part under a folder", "vat:long"],
)
def test_a_model_name_too_long_for_a_path_is_one_line(text, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError, match="^model: ") as e:
        vat.load(text)
    assert len(str(e.value)) < 400
    err = one_line_error(capsys, ["generate", "reconstruct", "--model", text, "x"])
    assert err.startswith("error: --model: ") and len(err) < 400


@pytest.mark.parametrize("kind", ["named pipe", "link out", "too large"])
def test_a_shipped_json_that_is_no_small_regular_file_is_one_line(kind, registry_copy, capsys):
    """Read with a limit, never through a link, and a pipe is named rather than waited on."""
    record = registry_copy / DEMO / "shipped.json"
    kept = registry_copy.parent / "kept.json"
    record.rename(kept)
    if kind == "named pipe":
        os.mkfifo(record)
    elif kind == "link out":
        record.symlink_to(kept)
    else:
        with open(record, "wb") as f:
            f.truncate(8 << 30)  # 8 GiB, sparse
    err = one_line_error(capsys, ["generate", "reconstruct", "--model", DEMO, "x"])
    assert str(record) in err
    assert vat_main(["pretrained"]) == 2
    assert str(record) in capsys.readouterr().err
