"""The GPU suite continues the reference instead of restarting it: the checkpoint that travels
in parts (bench/gpu_suite/carry.py), the start a launch picks, the shipped model it may
continue and the BLEU it must beat to replace it. The whole path (a call on another machine
resuming the reference exactly, and falling back to its exported weights when the parts are
damaged) runs at the end of tests/test_gpu_suite.py's smoke test, which returns the files such
a call starts from."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: from the checkout

from bench.gpu_suite import carry, reference
from bench.gpu_suite.plan import gpu_plan
from bench.gpu_suite.schema import write
from bench.gpu_suite.state import Budget, Suite, load_state, new_state
from vat.errors import VatError

ROOT = Path(__file__).resolve().parents[1]


def test_a_checkpoint_travels_in_parts_and_a_bad_part_is_named(tmp_path, monkeypatch):
    """A file larger than a part splits into parts of at most PART_BYTES (here 100,000: the
    d128 checkpoint's 34 MiB makes three of 16 MiB), which join back to the same bytes; a
    missing, cut or altered part, or sound parts in the wrong order, is one line naming it,
    and nothing is written."""
    monkeypatch.setattr(carry, "PART_BYTES", 100_000)
    ckpt = tmp_path / "last.ckpt"
    ckpt.write_bytes(os.urandom(250_001))
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{carry.PART_PREFIX}4").write_bytes(b"an earlier, longer checkpoint's")
    manifest = carry.split(ckpt, out, step=12)
    assert [p.bytes for p in manifest.parts] == [100_000, 100_000, 50_001]
    assert [p.name for p in carry.part_files(out)] == [p.name for p in manifest.parts]
    assert (manifest.file, manifest.step, manifest.bytes) == ("last.ckpt", 12, 250_001)
    dest = tmp_path / "node" / "run" / "checkpoints" / "last.ckpt"
    assert carry.join(out, manifest, dest) is None
    assert dest.read_bytes() == ckpt.read_bytes()
    dest.unlink()

    part2 = out / f"{carry.PART_PREFIX}2"
    good = part2.read_bytes()
    damaged = {
        "missing": (b"", "reference.ckpt.part2 is missing (the call that wrote it returned 3"),
        "cut": (good[:-1], "reference.ckpt.part2 has 99,999 bytes, its manifest 100,000"),
        "altered": (bytes([good[0] ^ 1]) + good[1:], "reference.ckpt.part2 fails its SHA-256"),
    }
    for case, (data, said) in damaged.items():
        if case == "missing":
            part2.unlink()
        else:
            part2.write_bytes(data)
        assert carry.join(out, manifest, dest).startswith(said), case
        assert not dest.exists()
        part2.write_bytes(good)
    first, second, third = manifest.parts
    swapped = dataclasses.replace(manifest, parts=[second, first, third])
    assert "do not make up the checkpoint" in carry.join(out, swapped, dest)
    assert not dest.exists()
    carry.remove_parts(out)
    assert carry.part_files(out) == []


def test_a_manifest_naming_anything_but_a_part_is_refused_in_one_line(tmp_path):
    """The manifest in a returned report names files the next call reads from OUT_DIR: a
    hand-edited name that is a path is refused before any stage runs."""
    state = write(new_state(smoke=True))
    digest = "0" * 64
    part = {"name": "reference.ckpt.part1", "bytes": 3, "sha256": digest}
    state["reference"]["checkpoint_parts"] = {
        "file": "last.ckpt", "step": 4, "bytes": 3, "sha256": digest, "parts": [part]
    }  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(state))
    assert write(load_state(out, smoke=True)) == state
    for field, value, needle in (
        ("name", "../../gpu_report.json", "parts[0].name' must be reference.ckpt.partN"),
        ("sha256", "x", "parts[0].sha256' must be 64 hex digits"),
    ):
        bad = json.loads(json.dumps(state))
        bad["reference"]["checkpoint_parts"]["parts"][0][field] = value
        (out / "gpu_report.json").write_text(json.dumps(bad))
        with pytest.raises(VatError) as e:
            load_state(out, smoke=True)
        assert needle in str(e.value) and "\n" not in str(e.value)


def _entry(registry: Path, name: str, config: dict) -> None:
    """A registry entry as `vat pretrained` lists it: shipped.json and config.json (what the
    suite reads of a shipped model before `vat train --init-from` loads it)."""
    folder = registry / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    body = (folder / "config.json").read_bytes()
    sums = {"config.json": hashlib.sha256(body).hexdigest()}
    shipped = {"format": 1, "name": name, "dtype": "float16", "sha256": sums}
    shipped["bytes"] = {"config.json": len(body)}
    (folder / "shipped.json").write_text(json.dumps(shipped))


def _row(bleu: str, lines: int) -> dict:
    rows = [[reference.BLEU_ROW.format(n=lines), bleu], ["active units", "30"]]
    return {"title": "Measured by vat's GPU suite", "text": "t", "rows": rows}


def test_the_replace_line_only_when_bleu_beats_the_shipped_models(tmp_path, monkeypatch):
    """No shipped model of the name: the line that adds it. One that records newstest2019
    BLEU on as many lines: the `--overwrite` line only when this BLEU is higher; else it
    stays, or the two cannot be compared (said)."""
    registry = tmp_path / "registry"
    monkeypatch.setenv("VAT_SHIPPED_DIR", str(registry))
    folder, name = Path("/x/wmt-tatoeba-en-d128"), "wmt-tatoeba-en-d128"
    got = reference.registry_lines(name, folder, "reference.tar", 86.0, 1997)
    assert got["registry_command"] == f"vat pretrained add {folder} --name {name}"
    assert got["compare"] == f"vat ships no {name} yet: add it"
    _entry(registry, name, {"measurements": [_row("85.90", 1997)]})
    got = reference.registry_lines(name, folder, "reference.tar", 86.0, 1997)
    assert got["registry_command"] == f"vat pretrained add {folder} --name {name} --overwrite"
    assert got["registry_command_from_tar"].endswith(f"--name {name} --overwrite")
    assert got["shipped_bleu"] == 85.9 and "86.00 > the shipped" in got["compare"]
    got = reference.registry_lines(name, folder, "reference.tar", 85.904, 1997)
    assert got["registry_command"] is None and got["registry_command_from_tar"] is None
    assert got["compare"].endswith("85.90: the shipped model stays")
    got = reference.registry_lines(name, folder, "reference.tar", 99.0, 24)
    assert got["registry_command"] is None
    assert "over 1997 newstest2019 lines, this one over 24" in got["compare"]
    # measured again since (the shipped float16 weights): the higher BLEU is the bar
    shutil.rmtree(registry / name)
    _entry(registry, name, {"measurements": [_row("85.90", 1997), _row("86.07", 1997)]})
    got = reference.registry_lines(name, folder, "reference.tar", 86.0, 1997)
    assert got["registry_command"] is None and got["shipped_bleu"] == 86.07
    assert reference.registry_lines(name, folder, "r.tar", 86.1, 1997)["registry_command"]
    shutil.rmtree(registry / name)
    _entry(registry, name, {"measurements": [_row("n/a", 1997)]})
    got = reference.registry_lines(name, folder, "reference.tar", 99.0, 1997)
    assert got["registry_command"] is None and "records no newstest2019 BLEU" in got["compare"]


def _gpu_suite(tmp_path: Path, data_dir: Path) -> Suite:
    suite = Suite(tmp_path / "out", gpu_plan(), data_dir, Budget(1), None)
    suite.write_config()
    return suite


def test_a_shipped_model_is_continued_only_in_the_configs_shape(tmp_path, data_dir, monkeypatch):
    """The shipped model of the reference's name is a start only when it has the config's
    shape (else `vat train --init-from` would refuse it: said instead); and of the returned
    folder and the shipped model, the one with more tokens behind it is continued."""
    registry = tmp_path / "registry"
    monkeypatch.setenv("VAT_SHIPPED_DIR", str(registry))
    suite = _gpu_suite(tmp_path, data_dir)
    name = reference.suggested_name(suite.plan)
    assert reference.shipped_candidate(suite) is None  # vat ships none of that name
    demo = json.loads((ROOT / "vat" / "shipped" / "demo-wordnet-d64" / "config.json").read_text())
    _entry(registry, name, demo)
    assert reference.shipped_candidate(suite) is None
    assert (
        suite.state.stages["reference"]
        .notes[-1]
        .endswith(
            f"the shipped {name} is not this config's shape (d_model: 64 there, 128 here): not "
            "continued from it"
        )
    )
    shape = {"d_model": 128, "n_heads": 8, "d_ff": 512, "vocab_size": 8192, "max_len": 256,
             "n_encoder_layers": 4, "n_decoder_layers": 4}  # fmt: skip
    fits = {**demo, "model_config": {**demo["model_config"], **shape},
            "training": {"tokens_seen": 5_000, "tokens_total": 9_000}}  # fmt: skip
    shutil.rmtree(registry / name)
    _entry(registry, name, fits)
    assert reference.shipped_candidate(suite) == (name, 9_000)
    shorter = {**fits, "model_config": {**fits["model_config"], "max_len": 128}}
    assert reference.shape_difference(suite.reference_config, shorter) == (
        "max_len: 128 there, 256 here"
    )
    # a returned reference.tar with fewer tokens behind it than the shipped model: the
    # shipped one; with more: the returned one
    for tokens, picked in ((8_000, name), (10_000, str(suite.work / "start" / name))):
        folder = tmp_path / "export" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"training": {"tokens_seen": tokens}}))
        with tarfile.open(suite.out / "reference.tar", "w") as tf:
            tf.add(folder, arcname=name)
        start = reference.newest_weights(suite)
        assert (start.how, start.init_from, start.step) == ("init_from", picked, 0)
        assert start.text.endswith("tokens behind it) (optimizer fresh)")


def test_a_call_returns_its_own_files_within_the_limits(tmp_path, data_dir):
    """A call that trains the reference adds its checkpoint (three parts for d128) to an
    OUT_DIR that may hold the frontier's artefacts from an earlier call, which returned
    them: those move to work/returned/, largest first, until OUT_DIR is within 8 files and
    64 MiB; this call's files stay."""
    suite = _gpu_suite(tmp_path, data_dir)
    out = suite.out
    mib = 2**20
    earlier = {"best_sts.tar": 12, "best_bleu.tar": 11, "frontier.png": 0.1, "gpu_report.md": 0.01}
    for name, size in earlier.items():
        with open(out / name, "wb") as f:
            f.truncate(int(size * mib))  # sparse: the size is what counts here
        os.utime(out / name, (1_000_000, 1_000_000))
    since = 1_000_100.0
    parts = {"reference.ckpt.part1": 16, "reference.ckpt.part2": 16, "reference.ckpt.part3": 2}
    now = {"gpu_report.json": 0.01, "reference.tar": 12, "logs.tar.gz": 0.5, **parts}
    for name, size in now.items():
        with open(out / name, "wb") as f:
            f.truncate(int(size * mib))
    assert suite.make_room(since) == ["best_sts.tar", "best_bleu.tar"]
    kept = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
    assert set(kept) == {*now, "frontier.png", "gpu_report.md"}
    assert len(kept) <= 8 and sum(kept.values()) <= 64 * mib
    assert (suite.work / "returned" / "best_sts.tar").stat().st_size == 12 * mib
    assert suite.make_room(since) == []  # within the limits: nothing moves
