"""A model's record of where it was trained is a label, not an instruction: a downloaded
folder naming `/some/secret.txt` as its training text never makes vat read that file (for
`vat explore`'s neighbours, or for fitting features). vat reads a recorded file only inside
the model's own folders (links and `..` resolved) or when it is byte for byte the file the
record describes (size and digest), and it says which file it reads and why."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import pytest
from helpers import copy_folder

import vat
from vat.cli import main as vat_main
from vat.cli.explore import corpus_lines
from vat.errors import OptionError
from vat.share.training_record import RECORDS_KEY

SECRET = "my bank password is hunter2"
TRAIN = [f"the dog number {i} runs in the park" for i in range(24)]


def _secret(tmp_path: Path) -> Path:
    """A private file of the user's, outside every model folder (mode 0600)."""
    path = tmp_path / "private" / "secret.txt"
    path.parent.mkdir()
    path.write_text("\n".join([SECRET] * 30) + "\n")
    path.chmod(0o600)
    return path


def _recording(folder: Path, train_files: list[str], records: list[dict] | None = None) -> Path:
    """The exported folder with its config.json's training record replaced, as anyone who
    hands out a model can write it."""
    config = json.loads((folder / "config.json").read_text())
    data = {"train_files": train_files}
    if records is not None:
        data[RECORDS_KEY] = records
    config.setdefault("training", {})["data"] = data
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _record(path: Path, **fields) -> dict:
    raw = path.read_bytes()
    return {
        "name": path.name,
        "bytes": len(raw),
        "digest": hashlib.blake2b(raw, digest_size=16).hexdigest(),
        **fields,
    }


def _neighbour_lines(folder: Path) -> tuple[list[str] | None, str | None]:
    """What `vat explore --model FOLDER` (no --corpus) would serve as its neighbours corpus."""
    loaded = vat.load(folder, device="cpu").loaded
    lines, _, note = corpus_lines(argparse.Namespace(corpus=None, corpus_limit=100), loaded)
    return lines, note


@pytest.mark.parametrize("how", ["absolute path", "climbing out", "link inside the folder"])
def test_a_folder_naming_a_private_file_never_reads_it(tiny_export, tmp_path, capsys, how):
    secret = _secret(tmp_path)
    folder = copy_folder(tiny_export, tmp_path)
    recorded = {
        "absolute path": str(secret),
        "climbing out": os.path.relpath(secret, folder),  # ../private/secret.txt
        "link inside the folder": "train.txt",
    }[how]
    if how == "link inside the folder":
        (folder / "train.txt").symlink_to(secret)
    _recording(folder, [recorded])

    lines, note = _neighbour_lines(folder)
    assert lines is None and "give --corpus FILE" in note
    assert "outside the model's own folder" in note and SECRET not in note

    with pytest.raises(OptionError) as e:  # fitting features from Python
        vat.load(folder, device="cpu").feature_encoder("mu/mean/pc1", save=False)
    assert e.value.name == "fit_files" and "outside the model's own folder" in str(e.value)
    assert "no size and digest" in str(e.value)

    capsys.readouterr()
    out = tmp_path / "out"  # and from the command line: one line naming the option
    assert vat_main(["export", str(folder), str(out), "--features", "mu/mean/pc1"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after "vat: fitting ..."
    assert err.startswith("error: --fit-files: ") and "outside the model's own folder" in err
    assert not out.exists() and SECRET not in err


def test_a_digest_the_author_could_not_know_does_not_open_the_file(tiny_export, tmp_path):
    """A record with sizes and digests opens an outside file only when they match it."""
    secret = _secret(tmp_path)
    folder = copy_folder(tiny_export, tmp_path)
    guess = {"name": "secret.txt", "bytes": secret.stat().st_size, "digest": "0" * 32}
    _recording(folder, [str(secret)], [guess])
    lines, note = _neighbour_lines(folder)
    assert lines is None and "match none of the files the model records" in note
    with pytest.raises(OptionError, match="match none of the files the model records"):
        vat.load(folder, device="cpu").feature_encoder("mu/mean/pc1", save=False)


def test_the_files_vat_may_read_are_read_and_said(tiny_export, tmp_path, capsys):
    """Inside the model's folder, or byte for byte the recorded file: read, and one line on
    stderr names the file and the reason."""
    folder = copy_folder(tiny_export, tmp_path)
    inside = folder / "train.txt"
    inside.write_text("\n".join(TRAIN) + "\n")
    _recording(folder, ["train.txt"])
    capsys.readouterr()
    lines, note = _neighbour_lines(folder)
    assert lines == TRAIN and note is None
    assert (
        f"vat: neighbours from the model's training file {inside} (inside the model's folder)"
        in capsys.readouterr().err
    )

    # the training machine: an absolute path outside the folder, its digest recorded
    elsewhere = tmp_path / "corpus" / "train.txt"
    elsewhere.parent.mkdir()
    elsewhere.write_text("\n".join(TRAIN) + "\n")
    inside.unlink()
    _recording(folder, [str(elsewhere)], [_record(elsewhere)])
    fitted = vat.load(folder, device="cpu").feature_encoder("mu/mean/pc1", save=False).fitted
    assert fitted.fit["files"] == [str(elsewhere)]
    assert (
        f"vat: fitting features on the model's training file {elsewhere} (its size and digest "
        "match the model's record)" in capsys.readouterr().err
    )
