"""The GPU suite continues the reference instead of restarting it: the checkpoint that travels
in parts (bench/gpu_suite/carry.py), the start a launch picks, the shipped model it may
continue and the BLEU it must beat to replace it. The whole path runs in tests/test_gpu_suite.py
from the files the smoke run returned: a call on another machine resuming the reference
exactly (test_smoke_suite_continues_on_another_machine), and falling back to its exported
weights when the parts are damaged (test_one_launch_stopped_for_time_is_evaluated_and_exported)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest
import torch
from helpers import marker_pickle, plant_compile_cache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: from the checkout

from bench.gpu_suite import carry, reference
from bench.gpu_suite.plan import gpu_plan, smoke_plan
from bench.gpu_suite.records import CACHE_PACK, CacheRecord, CompileCachePack
from bench.gpu_suite.report import render_markdown
from bench.gpu_suite.runs import Outcome
from bench.gpu_suite.schema import write
from bench.gpu_suite.state import Budget, Suite, load_state, new_state
from vat.errors import VatError
from vat.train.compile_cache import (
    CACHE_FILE,
    MATCHED,
    RECORD_FILE,
    CompileCache,
)

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
    assert got["registry_command"] == f"python scripts/add_pretrained.py {folder} --name {name}"
    assert got["compare"] == f"vat ships no {name} yet: add it"
    _entry(registry, name, {"measurements": [_row("85.90", 1997)]})
    got = reference.registry_lines(name, folder, "reference.tar", 86.0, 1997)
    add = "python scripts/add_pretrained.py"
    assert got["registry_command"] == f"{add} {folder} --name {name} --overwrite"
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


# -- what an earlier call returned, read on a fresh node -------------------------------------
def _carried(tmp_path: Path, data_dir: Path, cache: bool = False) -> Suite:
    """A fresh node's call (smoke) whose OUT_DIR holds what an earlier call returned: the
    reference's checkpoint at step 3 in parts and, with `cache`, its compile cache packed as
    that call packs it (carry.pack_compile_cache), their manifests in the report."""
    suite = Suite(tmp_path / "out", smoke_plan(), data_dir, Budget(5), None)
    suite.write_config()
    ckpt = tmp_path / "earlier" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save({"vat": {}, "state_dict": {}, "global_step": 3}, ckpt)  # read_checkpoint's keys
    ref = suite.state.reference
    ref.checkpoint_parts = carry.split(ckpt, suite.out, 3)
    if cache:  # one whose code, run, leaves a marker: what a planted pack could do instead
        plant_compile_cache(
            ckpt.parent.parent, [("inductor", "fabc", marker_pickle(tmp_path / "marker"))]
        )
        ref.compile_cache, why = carry.pack_compile_cache(ckpt.parent.parent, suite.out)
        assert why is None and ref.compile_cache is not None
    return suite


def _fake_train(monkeypatch, outcomes: list[Outcome]) -> list[list[str]]:
    """`vat train` replaced by `outcomes`, one per launch; the commands it was given."""
    cmds: list[list[str]] = []

    def train(call, stage, runs, end):
        (r,) = runs
        cmds.append(r.cmd)
        return {r.name: outcomes.pop(0)}

    monkeypatch.setattr(reference, "train", train)
    monkeypatch.setattr(reference, "prepare_data", lambda *a, **k: None)
    return cmds


def _bomb_pack(
    folder: Path, members: list[tarfile.TarInfo], data: dict[str, bytes]
) -> CompileCachePack:
    """`members` as a gzipped pack at folder/CACHE_PACK, and the manifest that vouches for it
    (size, SHA-256, this machine's record): a pack whose report was made to match it."""
    path = folder / CACHE_PACK
    with tarfile.open(path, "w:gz") as tf:
        for m in members:
            tf.addfile(m, io.BytesIO(data[m.name]) if m.isfile() else None)
    here = carry.this_machine(smoke=True)
    return CompileCachePack(file=CACHE_PACK, bytes=path.stat().st_size,
                            sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                            record=CacheRecord(**{k: here[k] for k in MATCHED}))  # fmt: skip


def _member(name: str, size: int = 0, **pax: str) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.size, m.pax_headers = size, pax
    return m


@pytest.mark.parametrize("case", ["declared", "pax header", "members"])
def test_a_compile_cache_pack_over_its_caps_writes_nothing(tmp_path, data_dir, monkeypatch, case):
    """Before, a trusted pack was unpacked whatever it held: 3 MiB of gzip wrote 3 GiB into
    the run folder, and tarfile read a long header whole into memory. Now its headers are
    read first, through a counter that stops at the cap, and a pack over the caps (here 1 MiB
    of content, 2 members: 8 MiB of zeros in 8 KiB of gzip; an 8-MiB pax header; a third
    member) is said and leaves the run folder without a cache, memory within the
    cap."""
    monkeypatch.setattr(carry, "CACHE_UNPACKED_BYTES", 2**20, raising=False)
    suite = _carried(tmp_path, data_dir)
    suite.trust_compile_cache = True
    big = 8 * 2**20
    record = json.dumps(carry.this_machine(smoke=True)).encode()
    data = {CACHE_FILE: b"", RECORD_FILE: record}
    members = [_member(CACHE_FILE), _member(RECORD_FILE, len(record))]
    if case == "declared":
        data[CACHE_FILE] = bytes(big)
        members[0].size = big
    elif case == "pax header":
        members[0] = _member(CACHE_FILE, comment="x" * big)
    else:
        members.append(_member("third"))
        data["third"] = b""
    suite.state.reference.compile_cache = _bomb_pack(suite.out, members, data)
    run_dir = suite.work / "reference"
    tracemalloc.start()
    try:
        start = reference.choose_start(suite, run_dir)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert start.how == "resumed"  # the checkpoint resumes; only its cache stays behind
    assert not (run_dir / CACHE_FILE).exists() and not (run_dir / RECORD_FILE).exists()
    assert peak < 4 * 2**20, peak
    said = suite.state.stages["reference"].notes[-1]
    assert "compiled afresh" in said and "\n" not in said


@pytest.mark.parametrize("case", ["gzip", "over the bytes cap", "over the members cap", "link"])
def test_a_reference_tar_over_its_caps_writes_nothing(tmp_path, data_dir, monkeypatch, case):
    """Before, reference.tar was opened with tarfile.open, which decompresses gzip silently:
    a 2 MiB file wrote 2 GiB. Now it is read as the plain tar the suite writes, its headers
    first, within caps (here 1 MiB and 4 members) and through a counter that stops at the
    cap: nothing is unpacked from one over them, said in a note."""
    monkeypatch.setattr(reference, "TAR_BYTES", 2**20, raising=False)
    monkeypatch.setattr(reference, "TAR_MEMBERS", 4, raising=False)
    suite = Suite(tmp_path / "out", smoke_plan(), data_dir, Budget(5), None)
    suite.write_config()
    config = json.dumps({"training": {"tokens_seen": 5}}).encode()
    files = {"m/config.json": config, "m/model.safetensors": bytes(8 * 2**20)}
    link = None
    if case == "over the bytes cap":  # a plain tar is as large as what it holds
        files["m/model.safetensors"] = os.urandom(2**20)
    elif case == "over the members cap":
        files = {"m/config.json": config, **{f"m/{i}.txt": b"x" for i in range(4)}}
    elif case == "link":  # after a file: before, the file was written, then the link refused
        files = {"m/config.json": config}
        link = _member("m/tokenizer.json")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../../secret"
    with tarfile.open(suite.out / "reference.tar", "w:gz" if case == "gzip" else "w") as tf:
        for name, data in files.items():
            tf.addfile(_member(name, len(data)), io.BytesIO(data))
        if link is not None:
            tf.addfile(link)
    assert reference.newest_weights(suite) is None
    start = suite.work / "start"
    assert not start.exists() or not any(p.is_file() for p in start.rglob("*"))
    said = suite.state.stages["reference"].notes[-1]
    assert "reference.tar holds no readable exported folder" in said and "\n" not in said


@pytest.mark.parametrize("trust", [False, True])
def test_the_carried_compile_cache_is_unpacked_only_when_trusted(
    tmp_path, data_dir, monkeypatch, capsys, trust
):
    """The compile cache is code that torch runs. Before, the one an earlier call returned was
    unpacked into the run folder whenever its record named this machine. Now only with
    --trust-compile-cache, which the suite then passes to the `vat train` that resumes the
    reference (a fresh node's key did not sign it); without, one line says it was not used
    and how to opt in, and the launch compiles afresh."""
    suite = _carried(tmp_path, data_dir, cache=True)
    suite.trust_compile_cache = trust
    packed = (tmp_path / "earlier" / CACHE_FILE).read_bytes()
    cmds = _fake_train(monkeypatch, [Outcome("trained", 8, 1.0, True)])
    assert reference.ensure_trained(suite, time.monotonic() + 60) is None
    run_dir = suite.work / "reference"
    (cmd,) = cmds
    # what the launch's vat train does with the run folder (the training is faked here): the
    # seeded pack's code runs only when the user said to trust it
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    launch = CompileCache(run_dir, trust="--trust-compile-cache" in cmd)
    launch._here = carry.this_machine(smoke=True)
    launch.load()
    assert (tmp_path / "marker").exists() == trust
    if trust:
        assert (run_dir / CACHE_FILE).read_bytes() == packed and (run_dir / RECORD_FILE).exists()
        assert "--trust-compile-cache" in cmd
        return
    assert not (run_dir / CACHE_FILE).exists() and not (run_dir / RECORD_FILE).exists()
    assert "--trust-compile-cache" not in cmd
    said = [ln for ln in capsys.readouterr().err.splitlines() if "compile cache" in ln]
    assert len(said) == 1 and "code" in said[0] and "--trust-compile-cache" in said[0], said


def test_trust_compile_cache_says_what_it_trusts(tmp_path, data_dir, monkeypatch):
    """The suite's option: its --help says what it trusts, and the call gets it."""
    from bench.gpu_suite import __main__ as entry
    from bench.gpu_suite.__main__ import _parser

    text = " ".join(_parser().format_help().split())
    assert "--trust-compile-cache" in text and "code that torch runs" in text
    assert "only for files your own earlier call returned" in text
    assert _parser().parse_args(["--trust-compile-cache", "out"]).trust_compile_cache
    assert not _parser().parse_args(["out"]).trust_compile_cache
    sh = (ROOT / "bench" / "gpu_suite.sh").read_text()
    assert "--trust-compile-cache" in sh
    given = []

    def suite(*args):
        given.append(args[-1])
        raise VatError("stop here")

    monkeypatch.setattr(entry, "Suite", suite)
    argv = ["--smoke", "--data-dir", str(data_dir), str(tmp_path / "out")]
    assert entry.main(["--trust-compile-cache", *argv]) == 2 and entry.main(argv) == 2
    assert given == [True, False]


def test_another_models_checkpoint_is_said_not_resumed(tmp_path, data_dir, monkeypatch):
    """Parts of another model's checkpoint (sound, but vat train refuses to resume them into
    this reference's config). Before, the report said "resumed exactly from step 3" for the
    launch vat refused, and then that it did not resume. Now that launch says it did not
    resume, and why; the launch that follows says where it started."""
    suite = _carried(tmp_path, data_dir)
    refused = ("exit 2: error: --model.arch.d_model: a resume cannot change it (64 in "
               "last.ckpt, 16 now); start a fresh run to change it")  # fmt: skip
    _fake_train(monkeypatch, [Outcome("failed", 3, 4.0, True, refused),
                              Outcome("trained", 8, 9.0, True)])  # fmt: skip
    assert reference.ensure_trained(suite, time.monotonic() + 60) is None
    first, second = suite.state.reference.launches
    assert first.start == (
        "did not resume the checkpoint an earlier call returned, joined from 1 part (step "
        f"3): {refused}"
    )
    assert first.how is None and (second.how, second.start) == ("scratch", "from nothing")
    md, state = render_markdown(suite.state), json.dumps(write(suite.state))
    assert "resumed exactly" not in md and "resumed exactly" not in state
    assert first.start in md
