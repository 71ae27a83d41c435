"""Atomic writes: a failure mid-write leaves the old file intact and no temp file behind."""

import json

import pytest
import torch

from vat.io import atomic_write, write_json_atomic
from vat.share.checkpoint import atomic_torch_save


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "results.json"
    write_json_atomic(path, {"old": 1})

    def half_then_crash(f):
        f.write('{"new": ')
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(path, half_then_crash)
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_atomic_torch_save_roundtrip_and_mode(tmp_path):
    path = tmp_path / "sub" / "x.ckpt"
    atomic_torch_save({"w": torch.arange(3)}, path)
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(3))
    assert path.stat().st_mode & 0o777 != 0o600  # not mkstemp's private mode
    atomic_torch_save({"w": torch.zeros(1)}, path)  # replaces the old file whole
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.zeros(1))


def test_full_disk_is_one_line_naming_the_path(tmp_path):
    import errno

    from vat.errors import VatError

    path = tmp_path / "out.json"
    write_json_atomic(path, {"old": 1})

    def full_disk(f):
        f.write("{")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(VatError) as e:
        atomic_write(path, full_disk)
    assert str(e.value).startswith(
        f"cannot write {path}: no space left on device"
    ) and "\n" not in str(e.value)
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_interrupt_mid_write_removes_the_temp(tmp_path):
    path = tmp_path / "out.json"
    write_json_atomic(path, {"old": 1})

    def interrupted(f):
        f.write("{")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, interrupted)
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"] and json.loads(
        path.read_text()
    ) == {"old": 1}


def test_temps_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    import os
    import subprocess
    import sys

    from vat.io import _HOST

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".out.json.tmp-{dead_pid}@{_HOST}-abcd1234"
    live = tmp_path / f".out.json.tmp-{os.getppid()}@{_HOST}-efgh5678"  # the parent: alive
    other_host = tmp_path / f".out.json.tmp-{dead_pid}@not-{_HOST}-ijkl9012"
    for p in (stale, live, other_host):
        p.write_text("half")
    write_json_atomic(tmp_path / "out.json", {"new": 1})
    assert not stale.exists() and live.exists() and other_host.exists()
