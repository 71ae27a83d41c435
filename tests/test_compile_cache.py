"""The compiled training step kept with the run (vat/train/compile_cache.py) and carried by
the GPU suite (bench/gpu_suite/carry.py).

One compiled tiny run and its resume, each a fresh process, are shared by the module; the
resume's inductor cache holds none of the compiled graphs a compile cache carries, so only the
run folder's cache can give them. Everything else reads the files they left, or the runs of
tests/compile_fixtures.py.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from compile_fixtures import COMPILED_RUN, ONE_LAYER
from conftest import ROOT
from helpers import (
    assert_steps_agree,
    fit_args,
    marker_pickle,
    plant_compile_cache,
    train_captured,
)

from vat.train.compile_cache import (
    CACHE_FILE,
    KEY_ENV,
    RECORD_FILE,
    CompileCache,
    artifacts,
    blob_of,
    digest,
    machine_record,
    merge,
    read_cache,
    signature,
    user_key,
    write_cache,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: from the checkout

from bench.gpu_suite import carry, reference  # noqa: E402
from bench.gpu_suite.call import Call  # noqa: E402
from bench.gpu_suite.plan import make_plan  # noqa: E402
from bench.gpu_suite.schema import write  # noqa: E402
from bench.gpu_suite.state import load_state, new_state  # noqa: E402
from vat.errors import VatError  # noqa: E402

pytest_plugins = ["compile_fixtures"]  # compiled_resume

CPU = torch.device("cpu")
SAVED_RE = re.compile(
    r"vat: compile cache: saved (\d+) artifacts .* at step (\d+)(?:; (\d+) of (\d+))?"
)


# What of an inductor cache folder (TORCHINDUCTOR_CACHE_DIR) a compile cache carries: the
# compiled graphs (inductor's, AOTAutograd's) and dynamo's profiles of dynamic sizes. The rest
# is the C++ kernels built from the graphs' code, which a CPU's compile cache does not carry
# (the module docstring of vat/train/compile_cache.py): a machine without them builds them.
GRAPH_CACHES = ("fxgraph", "aotautograd", "dynamo")


def _machine_inductor_dir() -> Path:
    """The first launch's inductor cache folder: these tests' own, kept across sessions as
    torch's default one is (/tmp/torchinductor_USER), so that inductor builds the tiny run's
    C++ kernels (minutes on 2 busy cores) once per machine and torch, not once per session.
    What that launch saves does not depend on it: torch records a graph read from its caches
    as it records one it compiled."""
    name = f"vat-tests-inductor-{getpass.getuser()}-torch-{torch.__version__}"
    return Path(tempfile.gettempdir()) / name.replace("+", "-")


def _kernels_only(src: Path, dest: Path) -> Path:
    """A copy of the inductor cache folder SRC without GRAPH_CACHES: a machine that has never
    compiled these graphs, as far as a compile cache goes, but need not build their C++ again
    (a kernel's file is named by its code and build command, not its folder)."""

    def copy(s: str, d: str) -> str:
        try:
            return shutil.copy2(s, d)
        except FileNotFoundError:  # a temporary file another launch has renamed meanwhile
            return d

    try:
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*GRAPH_CACHES, "locks"),
                        copy_function=copy)  # fmt: skip
    except shutil.Error:  # a folder gone meanwhile: what it held is built again, not missed
        pass
    assert not [p for p in dest.rglob("*") if p.name in GRAPH_CACHES]
    return dest


STEP_WITHOUT_CHANCE = ["--model.arch.dropout", "0", "--model.loss.sample_latent", "false"]
"""No dropout and no sampled latent: a step whose compiled loss and gradients can be held to
eager's (test_inductor_s_step_has_eager_s_loss_and_gradients), and 28 C++ kernels instead of
41 to build."""


def _launch(run: Path, data_cache: Path, inductor: Path, *extra: str):
    """`vat train` of the tiny config (1+1 layers, STEP_WITHOUT_CHANCE), compiled, in a fresh
    process and the inductor cache folder INDUCTOR: its `compile cache` lines, then its
    `model.compile` one.

    This interpreter, not the plain install's (helpers.vat_python): inductor names a C++
    kernel by its code and its build command, which holds torch's include folder as the
    process found it, so only a launch of this interpreter builds the kernels that this
    process's compile of the same step finds."""
    args = fit_args(run, data_cache, "--model.compile", "true", "--data.num_workers", "0",
                    *STEP_WITHOUT_CHANCE, *extra)  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONWARNINGS": "ignore",
        "TORCHINDUCTOR_CACHE_DIR": str(inductor),
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }
    r = subprocess.run([sys.executable, "-m", "vat", "train", *args, *ONE_LAYER], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=1500)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    said = ("vat: compile cache: ", "vat: model.compile: ")
    return [ln for ln in r.stderr.splitlines() if ln.startswith(said)]


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """A fresh compiled run of 2 steps at two padded lengths (one graph, its length dynamic
    from the first step; it saves the cache), then its resume to 3 steps in an inductor cache
    without any compiled graph (it loads them); the first launch's files kept apart."""
    root = tmp_path_factory.mktemp("compile_cache")
    run, machine = root / "run", _machine_inductor_dir()
    first = _launch(run, root / "data", machine, "--trainer.max_steps", "2")
    kept = root / "after_first"
    kept.mkdir()
    for name in (CACHE_FILE, RECORD_FILE):
        shutil.copy(run / name, kept / name)
    fresh = _kernels_only(machine, root / "inductor")
    more = ["--trainer.max_steps", "3", "--ckpt_path", "last"]
    second = _launch(run, root / "data", fresh, *more)
    return SimpleNamespace(
        root=root, run=run, first=first, second=second, kept=kept, inductor=machine
    )


@pytest.mark.slow
def test_a_compiled_run_saves_its_step_and_its_resume_reads_it(launches):
    run = launches.run
    assert launches.first[0] == (
        f"vat: compile cache: none in {run} yet; this launch saves its compiled step there"
    )
    saved = SAVED_RE.match(launches.first[1])
    assert saved and int(saved[1]) >= 2 and saved[2] == "1"  # after the first step
    record = json.loads((launches.kept / RECORD_FILE).read_text())
    assert {k: record[k] for k in machine_record(CPU)} == machine_record(CPU)
    assert record["bytes"] == (launches.kept / CACHE_FILE).stat().st_size
    assert sum(record["artifacts"].values()) >= 2  # the step's forward and backward, at least

    loaded = re.match(
        r"vat: compile cache: loaded (\d+) artifacts \(.*\) from (.*); ", launches.second[0]
    )
    assert (
        loaded
        and int(loaded[1]) == sum(record["artifacts"].values())
        and loaded[2] == str(run / CACHE_FILE)
    )
    # torch's own counters in the resumed process: its graphs came from the cache
    saved = SAVED_RE.match(launches.second[1])
    assert saved and int(saved[3]) >= 2 and saved[3] == saved[4], launches.second
    assert record["signature"] == signature(record, user_key())
    # two padded lengths, one graph: the first step's serves the second length (objective.py)
    assert re.fullmatch(r"vat: model.compile: 2 batch shapes, 2 padded lengths \(\d+-\d+\), "
                        r"1 compiled graphs", launches.first[-1]), launches.first  # fmt: skip


@pytest.mark.slow
def test_inductor_s_step_has_eager_s_loss_and_gradients(launches, tiny_sentences):
    """inductor, what training compiles with, against eager on the first launch's model: the
    same loss, KL and gradients, on a batch whose length is not a multiple of 8. In the first
    launch's inductor folder: the step's graph is that launch's, so its C++ kernels are there
    and none is built again."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    from vat.tokenizer import make_batch
    from vat.train.objective import COMPILE_BACKEND
    from vat.train.system import VATSystem

    assert COMPILE_BACKEND == "inductor"

    ckpt = launches.run / "checkpoints" / "last.ckpt"
    eager, compiled = (
        VATSystem.load_from_checkpoint(ckpt, weights_only=True, compile=c) for c in (False, True)
    )
    batch = make_batch(eager.tokenizer.encode_batch(tiny_sentences[:5]))
    assert batch["src"].shape[1] % 8 != 0
    torch._dynamo.reset()  # earlier tests' graphs (aot_eager's) would serve this code
    with temporary_cache_dir(str(launches.inductor)):
        a, b = eager._shared_step(batch, "train"), compiled._shared_step(batch, "train")
        assert_steps_agree(eager, a, compiled, b)
    assert compiled._compiled.graphs == 1


def _copy(src: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in (CACHE_FILE, RECORD_FILE):
        shutil.copy(src / name, dest / name)
    return dest


def _load(folder: Path) -> str:
    cache = CompileCache(folder)
    cache._here = machine_record(CPU)  # what setup() finds out from the trainer
    return cache.load()


@pytest.mark.slow
def test_a_cache_for_another_torch_or_device_is_refused_in_one_line(
    launches, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    path = f"{tmp_path / 'x' / CACHE_FILE}"
    here = machine_record(CPU)
    cases = {
        "torch": ("2.12.0", f"saved with torch 2.12.0, this machine has torch {here['torch']}"),
        "device": ("NVIDIA H200", f"it was saved on NVIDIA H200, this is {here['device']}"),
    }
    for key, (value, said) in cases.items():
        folder = _copy(launches.kept, tmp_path / "x")
        record = json.loads((folder / RECORD_FILE).read_text())
        (folder / RECORD_FILE).write_text(json.dumps({**record, key: value}))
        assert _load(folder).startswith(f"{path} not used: ")
        assert _load(folder).endswith(f"{said}; this launch saves its own")
        shutil.rmtree(folder)
    folder = _copy(launches.kept, tmp_path / "x")
    (folder / CACHE_FILE).write_bytes((folder / CACHE_FILE).read_bytes()[:-1])
    assert "its size differs from its record" in _load(folder)  # found before reading it
    (folder / RECORD_FILE).unlink()
    assert _load(folder).endswith(
        f"not used: its record {RECORD_FILE} is missing; this launch saves its own"
    )
    shutil.rmtree(folder)
    folder = _copy(launches.kept, tmp_path / "x")
    line = _load(folder)
    assert line.startswith("loaded ") and "\n" not in line


@pytest.mark.slow
def test_the_cache_is_never_read_or_written_through_a_link(launches, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "run"
    folder.mkdir()
    for name in (CACHE_FILE, RECORD_FILE):
        (elsewhere / name).write_bytes(b"someone else's file")
        (folder / name).symlink_to(elsewhere / name)
    assert read_cache(folder, machine_record(CPU)) == (
        None,
        None,
        "it is a symbolic link (vat neither reads nor writes through links)",
    )
    blob = (launches.kept / CACHE_FILE).read_bytes()
    write_cache(folder, blob, {**machine_record(CPU), "artifacts": {}, "step": 1})
    for name in (CACHE_FILE, RECORD_FILE):
        assert not (folder / name).is_symlink()  # the link replaced, its target untouched
        assert (elsewhere / name).read_bytes() == b"someone else's file"
    assert read_cache(folder, machine_record(CPU))[0] == blob


@pytest.mark.slow
def test_merge_keeps_what_torch_s_second_save_would_drop(launches):
    """torch appends a block per kind at each save and loads only the last block of each
    kind: two blocks of one kind load as the second alone; merged, as both."""
    from torch.compiler._cache import _deserialize_single_cache, _serialize_single_cache
    from torch.utils._appending_byte_serializer import AppendingByteSerializer

    blob = (launches.kept / CACHE_FILE).read_bytes()
    kinds = dict(AppendingByteSerializer.to_list(blob, deserialize_fn=_deserialize_single_cache))
    kind, artifacts = max(kinds.items(), key=lambda kv: len(kv[1]))
    assert len(artifacts) >= 2
    two = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    two.extend([(kind, artifacts[:1]), (kind, artifacts[1:])])
    torch_s = torch.compiler._cache.CacheArtifactManager.deserialize(two.to_bytes())
    assert len(torch_s[kind]) == len(artifacts) - 1
    merged, counts = merge(two.to_bytes())
    assert counts == {kind: len(artifacts)}
    assert merge(blob, blob)[1] == merge(blob)[1] == {k: len(v) for k, v in kinds.items()}


def test_no_cache_when_compile_or_the_cache_is_off(tmp_path, compiled_resume, fast_compile, caplog):
    """model.compile off: no callback, no line, no file; on with --compile-cache false: the
    same. (After compiled_resume, of the same options: dynamo serves the compiled launch
    the graph it compiled, aot_eager's, so this test compiles nothing of its own.)"""
    for name, extra in (
        ("eager", []),
        ("off", ["--model.compile", "true", "--compile-cache", "false"]),
    ):
        run = tmp_path / name
        args = fit_args(run, compiled_resume.data, "--trainer.max_steps", "1", *COMPILED_RUN)
        caplog.clear()
        with caplog.at_level("INFO"):
            code, err = train_captured([*args, *extra])
        assert code == 0, err
        assert not [ln for ln in err if "compile cache" in ln], err
        assert not (run / CACHE_FILE).exists() and not (run / RECORD_FILE).exists()
        compiled = [r for r in caplog.records if r.getMessage().startswith("vat: model.compile:")]
        assert bool(compiled) == (name == "off")  # the second ran its step compiled


# -- the GPU suite carries it -----------------------------------------------------------------


def _call(out: Path) -> Call:
    out.mkdir(parents=True, exist_ok=True)
    return Call(out, make_plan("short", smoke=True), out, None, new_state(smoke=True))


@pytest.mark.slow
def test_the_suite_returns_the_cache_as_one_file_and_restores_it_with_the_parts(
    launches, tmp_path, monkeypatch
):
    """The reference's run folder (here the resumed tiny run) into OUT_DIR: its checkpoint
    in parts, its cache and record as one more file; on the next machine the parts are
    joined and the cache unpacked into the run folder (checked by size, SHA-256 and record),
    where the launch loads it."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    run, first = launches.run, _call(tmp_path / "out")
    start = reference.Start("scratch", "from nothing")
    reference._carry_checkpoint(first, run, start)
    ref = first.state.reference
    manifest = ref.compile_cache
    assert manifest.file == carry.CACHE_PACK and write(manifest.record) == machine_record(CPU)
    parts = [p.name for p in ref.checkpoint_parts.parts]
    assert [p.name for p in carry.part_files(first.out)] == [*parts, carry.CACHE_PACK]
    assert (first.out / carry.CACHE_PACK).stat().st_size == manifest.bytes <= 16 * 2**20
    first.save()
    assert load_state(first.out, smoke=True) == first.state  # the report's types know it

    nxt = _call(tmp_path / "node" / "out")
    nxt.trust_compile_cache = True  # the cache is code: a fresh node unpacks it only so
    for f in carry.part_files(first.out) + [first.out / "gpu_report.json"]:
        shutil.copy(f, nxt.out / f.name)
    nxt.state = load_state(nxt.out, smoke=True)
    node_run = tmp_path / "node" / "run"
    got = reference.choose_start(nxt, node_run)
    assert got.how == "resumed" and got.carried and got.trust_cache
    said = nxt.state.stages["reference"].notes[-1]
    assert "its compile cache came back (" in said and "the launch reads its compiled step" in said
    for name in (CACHE_FILE, RECORD_FILE):
        assert (node_run / name).read_bytes() == (run / name).read_bytes()
    assert _load(node_run).startswith("loaded ")  # (this machine's key signed it)

    # damaged on the way, or for another machine: said, and nothing unpacked
    pack = nxt.out / carry.CACHE_PACK
    data = bytearray(pack.read_bytes())
    data[len(data) // 2] ^= 1
    pack.write_bytes(bytes(data))
    dest = tmp_path / "node" / "run2"
    assert (
        "fails its size or SHA-256 check"
        in carry.restore_compile_cache(nxt.out, manifest, dest, machine_record(CPU), True)[1]
    )
    shutil.copy(first.out / carry.CACHE_PACK, pack)
    other = {**machine_record(CPU), "device": "NVIDIA H200"}
    device = machine_record(CPU)["device"]
    assert carry.restore_compile_cache(nxt.out, manifest, dest, other, True) == (
        False,
        f"its compile cache is not for this machine (it was saved on {device}, this is "
        "NVIDIA H200): compiled afresh",
    )
    assert not dest.exists()

    # over what a returned file may hold: left behind, said; a call without parts returns none
    monkeypatch.setattr(carry, "CACHE_PACK_BYTES", 1000)
    got, why = carry.pack_compile_cache(run, first.out)
    assert got is None and why.startswith("its compile cache (") and "not carried" in why
    assert not (first.out / carry.CACHE_PACK).exists()
    carry.remove_parts(nxt.out)
    assert carry.part_files(nxt.out) == []


def test_a_report_naming_another_file_as_the_cache_is_refused(tmp_path):
    state = write(new_state(smoke=True))
    state["reference"]["compile_cache"] = {
        "file": "../../x", "bytes": 3, "sha256": "0" * 64, "record": machine_record(CPU)
    }  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_report.json").write_text(json.dumps(state))
    with pytest.raises(VatError) as e:
        load_state(out, smoke=True)
    assert f"compile_cache.file' must be one of {carry.CACHE_PACK}" in str(e.value)


def test_a_record_names_what_the_cache_is_valid_for():
    here = machine_record(CPU)
    assert here["torch"] == torch.__version__ and here["cuda"] == torch.version.cuda
    assert here["device"].startswith("CPU ") and here["triton"] is None


def test_a_cache_file_of_another_size_than_its_record_is_not_read(tmp_path):
    # the size is compared before the file is read: an 8 GiB file (sparse here) beside a
    # record of three bytes would otherwise be read whole into memory first
    blob, _ = blob_of([("inductor", "fabc", b"code")])
    write_cache(tmp_path, blob, {**machine_record(CPU), "artifacts": {}, "step": 1})
    assert read_cache(tmp_path, machine_record(CPU))[0] == blob
    with open(tmp_path / CACHE_FILE, "r+b") as f:
        f.truncate(8 << 30)
    assert read_cache(tmp_path, machine_record(CPU)) == (
        None,
        None,
        "its size differs from its record (damaged, or not this record's)",
    )


# -- a cache is code: only the user's own is loaded -------------------------------------------
def _inductor_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")]


@pytest.mark.parametrize("kind", ["inductor", "pgo", "aot_autograd"])
@pytest.mark.parametrize("signed_by", ["nobody", "another key"])
def test_a_planted_cache_runs_nothing_and_writes_nothing(kind, signed_by, tmp_path, monkeypatch):
    """inductor's artifacts are unpickled as they load, pgo's written into the machine's
    cache and unpickled at the first compile, the others written there for torch to run: a
    cache the user's key did not sign is none of these. Trusted, the same inductor cache
    runs its pickle at once: the signature is what stood between."""
    inductor = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
    marker = tmp_path / "marker"
    key = None if signed_by == "nobody" else b"k" * 32
    found = [(kind, "vat-train:0:" if kind == "pgo" else "fabc", marker_pickle(marker))]
    folder = plant_compile_cache(tmp_path / "run", found, key)
    line = _load(folder)
    assert line.startswith(f"{folder / CACHE_FILE} not used: it is not signed with your key")
    assert "--trust-compile-cache" in line and line.endswith("this launch saves its own")
    assert not marker.exists() and _inductor_files(inductor) == []
    if kind == "inductor":
        cache = CompileCache(folder, trust=True)
        cache._here = machine_record(CPU)
        assert cache.load().endswith("not used: torch could not load it (AttributeError: "
                                     "'_io.TextIOWrapper' object has no attribute "
                                     "'_triton_bundle'); this launch saves its own")  # fmt: skip
        assert marker.exists()


def test_a_planted_cache_runs_nothing_through_vat_train(compiled_resume):
    """A run folder with a planted cache and a matching record, resumed with `vat train
    --ckpt_path last --model.compile true` (compiled_resume): nothing runs, one line says
    why."""
    run, err = compiled_resume.run, compiled_resume.err
    assert not compiled_resume.marker.exists()
    said = [ln for ln in err if ln.startswith("vat: compile cache: ")]
    assert said[0].startswith(f"vat: compile cache: {run / CACHE_FILE} not used: it is not signed")
    # and no dynamo job is named: dynamo keeps no profile of sizes (files code_state_JOB)
    # that a planted record's job id, or another run's, could steer a compile with
    files = [p.name for p in compiled_resume.inductor.rglob("*")]
    assert compiled_resume.pgo_key_after is None
    assert not any("code_state" in name for name in files), files


def test_trust_is_taken_from_the_command_line_only(tmp_path):
    """--trust-compile-cache is taken out of the arguments before LightningCLI: never in a
    config file vat writes, and refused as an unknown key in one it reads."""
    from vat.cli.train import _trust_option

    assert _trust_option(["fit", "--trust-compile-cache", "-c", "x"]) == (["fit", "-c", "x"], True)
    assert _trust_option(["fit", "--trust_compile_cache"]) == (["fit"], True)
    assert _trust_option(["fit"]) == (["fit"], False)
    config = tmp_path / "c.yaml"
    config.write_text("trust_compile_cache: true\n")
    code, err = train_captured(fit_args(tmp_path / "run", None, "-c", str(config)))
    assert code == 2 and "trust_compile_cache" in err[-1], err


def test_the_user_key_is_made_once_for_the_user_alone(tmp_path, monkeypatch):
    path = tmp_path / "home" / "vat" / "compile_cache.key"
    monkeypatch.setenv(KEY_ENV, str(path))
    with pytest.raises(VatError, match="there is no signing key at"):
        user_key()
    key = user_key(create=True)
    assert len(key) == 32 and user_key(create=True) == key == path.read_bytes()
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert os.listdir(path.parent) == ["compile_cache.key"]  # no temp left
    blob, _ = blob_of([("inductor", "fabc", b"code")])
    write_cache(tmp_path / "run", blob, {**machine_record(CPU), "artifacts": {}, "step": 1})
    assert read_cache(tmp_path / "run", machine_record(CPU))[0] == blob
    # a record changed after it was signed is not the user's
    record = json.loads((tmp_path / "run" / RECORD_FILE).read_text())
    (tmp_path / "run" / RECORD_FILE).write_text(json.dumps({**record, "step": 2}))
    assert read_cache(tmp_path / "run", machine_record(CPU))[2] == (
        f"it is not signed with your key ({path})"
    )
    (tmp_path / "run" / RECORD_FILE).write_text(json.dumps(record))
    # a key others can read could sign a cache for this user: not used, and said
    path.chmod(0o644)
    why = read_cache(tmp_path / "run", machine_record(CPU))[2]
    assert why.startswith(f"it is not signed with your key (the signing key {path} is not 32")
    assert "(mode 644); remove it and vat makes a new one)" in why
    with pytest.raises(VatError, match="mode 644"):  # and no save signs with it
        write_cache(tmp_path / "run", blob, {**machine_record(CPU), "artifacts": {}, "step": 1})


# -- torch's format, read with every length checked -------------------------------------------
def test_the_blob_format_is_torch_s():
    """What blob_of writes, torch's own reader reads as the same artifacts, and back."""
    from torch.compiler._cache import CacheArtifactManager, _deserialize_single_cache
    from torch.utils._appending_byte_serializer import AppendingByteSerializer

    found = [("inductor", "k1", b"a"), ("pgo", "vat-train:0:", b"bb"), ("inductor", "k3", b"")]
    blob, counts = blob_of(found)
    assert counts == {"inductor": 2, "pgo": 1}
    CacheArtifactManager._ensure_cache_artifacts_registered()
    torch_s = AppendingByteSerializer.to_list(blob, deserialize_fn=_deserialize_single_cache)
    assert [(k, a.key, a.content) for k, arts in torch_s for a in arts] == sorted(found)
    assert artifacts(blob) == sorted(found)
    # later wins on a key, the first place kept
    assert artifacts(merge(blob, blob_of([("inductor", "k1", b"new")])[0])[0]) == [
        ("inductor", "k1", b"new"), ("inductor", "k3", b""), ("pgo", "vat-train:0:", b"bb")
    ]  # fmt: skip


def _framed(body: bytes) -> bytes:
    import zlib

    return zlib.crc32(body).to_bytes(4, "big") + body


def test_a_blob_s_lengths_and_keys_are_checked_before_torch_reads_it(tmp_path):
    """A 32-byte blob claiming 2**63 artifacts (torch's reader loops, allocating, until
    memory runs out), a field past the end, a damaged checksum, keys that are paths."""
    version, pgo = (1).to_bytes(8, "big"), (4).to_bytes(8, "big") + b"cGdv"
    bomb = _framed(version + pgo + (2**63).to_bytes(8, "big"))
    started = time.perf_counter()
    with pytest.raises(ValueError, match="a field of 8 bytes at byte 32 runs past its end"):
        artifacts(bomb)
    with pytest.raises(ValueError, match="runs past its end"):
        merge(bomb)  # the save-time merge reads the same way
    assert time.perf_counter() - started < 1
    with pytest.raises(ValueError, match="checksum"):
        artifacts(b"\0" + bomb[1:])
    for key in ("/etc/x", "../x", "..", "a/b", ""):
        with pytest.raises(ValueError, match="is not a plain file name"):
            artifacts(blob_of([("aot_autograd", key, b"x")])[0])
    # through the loader, trusted or not: one line, nothing written
    folder = plant_compile_cache(tmp_path / "run", [("inductor", "fabc", b"x")])
    (folder / CACHE_FILE).write_bytes(bomb)
    record = json.loads((folder / RECORD_FILE).read_text())
    record.update(bytes=len(bomb), sha256=digest(bomb))
    (folder / RECORD_FILE).write_text(json.dumps(record))
    cache = CompileCache(folder, trust=True)
    cache._here = machine_record(CPU)
    assert cache.load().endswith(
        "not used: it is not a cache torch wrote (a field of 8 bytes at byte 32 runs past its "
        "end); this launch saves its own"
    )


def test_a_cache_torch_cannot_load_is_one_line(tmp_path, capfd, monkeypatch):
    """An artifact kind torch does not know: torch logs a 10-line traceback and returns
    nothing; vat says one line."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    folder = plant_compile_cache(tmp_path / "run", [("bogus", "fabc", b"x")])
    cache = CompileCache(folder, trust=True)
    cache._here = machine_record(CPU)
    assert cache.load().endswith("not used: torch could not load it (ValueError: torch could "
                                 "not read it); this launch saves its own")  # fmt: skip
    err = capfd.readouterr().err
    assert "Traceback" not in err and "un-pickle" not in err, err


@pytest.mark.parametrize(("depth", "why"), [(30_000, "cannot be read (RecursionError)"),
                                             (100_000, "is over 64 KiB")])  # fmt: skip
def test_a_record_nested_too_deep_or_too_large_is_one_line(tmp_path, depth, why):
    folder = plant_compile_cache(tmp_path / "run", [("inductor", "fabc", b"x")])
    (folder / RECORD_FILE).write_text("[" * depth + "]" * depth)
    assert _load(folder) == (
        f"{folder / CACHE_FILE} not used: its record {RECORD_FILE} {why}; this launch saves its own"
    )
