"""The tokenized cache under faults, cache-dir errors, config validation, progress bars."""

import errno
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from helpers import tiny_datamodule

import vat.data.corpus
import vat.data.token_cache
from vat.data.datamodule import VATDataModule
from vat.errors import VatError


@pytest.fixture
def train(tmp_path, tiny_sentences):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(tiny_sentences * 4) + "\n")
    return path


def _ids(dm):
    return {k: list(v.ids) for k, v in dm.splits.items()}


def _data_dir(tmp_path):
    (folder,) = (tmp_path / "cache").glob("data-*")
    return folder


def _built(tmp_path, train):
    dm = tiny_datamodule(tmp_path, train)
    dm.setup("fit")
    return _ids(dm), _data_dir(tmp_path)


def _damage_missing_done(folder):
    (folder / "done.json").unlink()


def _damage_flip_a_byte(folder):
    path = folder / "train" / "tokens.bin"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _damage_truncate_offsets(folder):
    path = folder / "val" / "offsets.bin"
    path.write_bytes(path.read_bytes()[:-8])


def _damage_garbage_done(folder):
    (folder / "done.json").write_text("{not json")


@pytest.mark.parametrize(
    "damage",
    [_damage_missing_done, _damage_flip_a_byte, _damage_truncate_offsets, _damage_garbage_done],
)
def test_a_damaged_cache_is_detected_and_rebuilt(tmp_path, train, damage):
    ids, folder = _built(tmp_path, train)
    damage(folder)
    dm = tiny_datamodule(tmp_path, train)
    with pytest.warns(UserWarning, match="tokenized cache .* is damaged"):
        dm.setup("fit")
    assert _ids(dm) == ids
    assert json.loads((folder / "done.json").read_text())["format"] == vat.data.token_cache.FORMAT
    vat.data.token_cache.verify(folder, 24)  # intact again


def test_a_damaged_cached_tokenizer_is_trained_again(tmp_path, train):
    ids, _ = _built(tmp_path, train)
    (tok,) = (tmp_path / "cache").glob("tokenizer-*.json")
    tok.write_text("garbage")
    dm = tiny_datamodule(tmp_path, train)
    with pytest.warns(UserWarning, match="cached tokenizer .* is damaged"):
        dm.setup("fit")
    assert _ids(dm) == ids


def test_a_full_disk_leaves_no_temp_folder_and_a_one_line_error(tmp_path, train, monkeypatch):
    def full(self, name, array):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(vat.data.token_cache.SplitWriter, "_write", full)
    dm = tiny_datamodule(tmp_path, train)
    for _ in range(2):  # a retry adds no second temp folder either
        with pytest.raises(VatError, match="data.cache_dir: no space left on the device"):
            dm.prepare_data()
    assert not list((tmp_path / "cache").glob(".data-*"))
    assert not list((tmp_path / "cache").glob("data-*"))


def test_stale_temp_folders_of_dead_processes_are_removed(tmp_path, train):
    cache = tmp_path / "cache"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()  # vat.io's one temp scheme: .NAME.tmp-PID@HOST-XXXXXXXX
    stale = cache / f".data-0123.tmp-{dead.pid}@{host}-a1b2c3d4"
    (stale / "train").mkdir(parents=True)
    (stale / "train" / "tokens.bin").write_bytes(b"x" * 1000)
    live = cache / f".data-4567.tmp-{os.getppid()}@{host}-e5f6a7b8"  # a running process
    live.mkdir()
    elsewhere = cache / f".data-89.tmp-{dead.pid}@another-host-c9d0e1f2"  # pid not checkable
    elsewhere.mkdir()
    tiny_datamodule(tmp_path, train).prepare_data()
    assert not stale.exists() and live.exists() and elsewhere.exists()


def test_an_unusable_cache_dir_is_a_one_line_error_naming_the_option(tmp_path, train):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(
        VatError, match=r"data.cache_dir: cannot use .*loop: Too many levels of symbolic links"
    ):
        tiny_datamodule(tmp_path, train, cache_dir=str(loop)).prepare_data()
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(VatError, match="data.cache_dir: cannot use .*afile/sub: Not a directory"):
        tiny_datamodule(tmp_path, train, cache_dir=str(afile / "sub")).prepare_data()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_cache_dir_is_a_one_line_error(tmp_path, train):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    with pytest.raises(VatError, match="data.cache_dir: .*ro is not a writable folder"):
        tiny_datamodule(tmp_path, train, cache_dir=str(ro)).prepare_data()


def test_a_complete_cache_is_read_from_a_read_only_folder(tmp_path, train, monkeypatch):
    """Only writing needs a writable cache dir: a prebuilt cache is used as it is."""
    ids, _ = _built(tmp_path, train)

    def no_write(self, write):
        assert not write, "a complete cache must not need a writable folder"

    monkeypatch.setattr(VATDataModule, "_check_cache_dir", no_write)
    dm = tiny_datamodule(tmp_path, train)
    dm.setup("fit")
    assert _ids(dm) == ids


BAD_OPTIONS = [
    ("num_workers", -1, "data.num_workers must be an integer >= 0, got -1"),
    ("batch_size", 0, "data.batch_size must be an integer >= 1"),
    ("max_tokens", 8, r"data.max_tokens must be null or an integer >= data.max_len \(24\)"),
    ("max_len", 1, "data.max_len must be an integer >= 2"),
    ("val_fraction", 1.0, r"data.val_fraction must be a number in \[0, 1\)"),
    ("val_fraction", -0.1, "data.val_fraction must be"),
    ("pool_batches", 0, "data.pool_batches must be an integer >= 1"),
    ("num_proc", 0, "data.num_proc must be an integer >= 1"),
    ("vocab_size", 3, "data.vocab_size must be an integer >= 5"),
    ("tokenizer_train_lines", 0, "data.tokenizer_train_lines must be"),
    ("max_train_lines", 0, "data.max_train_lines must be an integer >= 1 or null"),
    ("overlength", "cut", "data.overlength must be 'truncate' or 'filter'"),
    ("on_bad_bytes", "ignore", "data.on_bad_bytes must be 'skip' or 'error'"),
    ("train_files", "a.txt", "data.train_files must be a list"),
    ("cache_dir", "", "data.cache_dir must be a folder path"),
    ("progress", "yes", "data.progress must be true or false"),
    ("batch_size", 2.5, "data.batch_size must be an integer"),
    ("seed", None, "data.seed must be an integer"),
]


@pytest.mark.parametrize(
    ("name", "value", "message"), BAD_OPTIONS, ids=[f"{n}={v!r}" for n, v, _ in BAD_OPTIONS]
)
def test_every_data_option_is_validated_at_construction(tmp_path, name, value, message):
    with pytest.raises(VatError, match=message):
        VATDataModule(**{"train_files": ["x.txt"], "max_len": 24, name: value})


def test_preparing_streams_in_chunks_with_the_same_result(tmp_path, train, monkeypatch):
    """Tiny read chunks (many chunk boundaries, held-out lines in many chunks) and a process
    pool give the same cache as one chunk in one process."""
    whole = _built(tmp_path, train)[0]
    monkeypatch.setattr(vat.data.corpus, "CHUNK_BYTES", 64)
    dm = tiny_datamodule(tmp_path, train, cache_dir=str(tmp_path / "c2"), num_proc=2)
    dm.setup("fit")
    assert _ids(dm) == whole
    n = len(train.read_text().splitlines())
    assert len(whole["val"]) == round(0.2 * n) and len(whole["train"]) == n - len(whole["val"])


def test_progress_bars_on_rank_zero_only_and_silenced(tmp_path, train, capfd, monkeypatch):
    tiny_datamodule(tmp_path, train, progress=True).prepare_data()
    assert "vat: tokenizing train + val" in capfd.readouterr().err
    tiny_datamodule(tmp_path, train, progress=False, cache_dir=str(tmp_path / "c2")).prepare_data()
    assert "vat: tokenizing" not in capfd.readouterr().err
    from lightning.pytorch.utilities import rank_zero_only

    monkeypatch.setattr(rank_zero_only, "rank", 1)
    tiny_datamodule(tmp_path, train, progress=True, cache_dir=str(tmp_path / "c3")).prepare_data()
    assert "vat: tokenizing" not in capfd.readouterr().err


def test_token_array_is_memory_mapped_and_compact(tmp_path, train):
    dm = tiny_datamodule(tmp_path, train)
    dm.setup("fit")
    ds = dm.splits["train"]
    tokens, offsets = ds._open()
    assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint16
    assert len(tokens) == offsets[-1] == sum(len(x) for x in ds.ids)
