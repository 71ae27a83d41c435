"""Nothing vat did not write is ever deleted or written through: `vat train --overwrite` moves
only what a run recorded writing, a fresh run refuses folders holding another run's
checkpoints, and the run lock never follows a symbolic link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import TINY, fit_args, train_main

from vat.errors import VatError
from vat.share.checkpoint import read_checkpoint


def _step(path) -> int:
    return int(read_checkpoint(path)["global_step"])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def r1(tmp_path, cache, capsys):
    """A finished 4-step run in tmp_path/r1."""
    run = tmp_path / "r1"
    code, err = train_main(fit_args(run, cache, "--trainer.max_steps", "4"), capsys)
    assert code == 0, err
    assert _step(run / "checkpoints" / "last.ckpt") == 4
    return run


def test_overwrite_never_removes_the_users_own_files(tmp_path, cache, capsys):
    own = tmp_path / "mine"
    own.mkdir()
    (own / "config.yaml").write_text("my: config\n")
    (own / "tokenizer.json").write_text("{}")
    for extra in ((), ("--overwrite",)):
        code, err = train_main(fit_args(own, cache, *extra), capsys)
        assert code == 2 and len(err) == 1, err
        assert "no vat run recorded writing" in err[0] and "config.yaml" in err[0]
        assert (own / "config.yaml").read_text() == "my: config\n"
        assert (own / "tokenizer.json").read_text() == "{}"


def test_overwrite_replaces_what_the_run_wrote_and_keeps_what_was_there(tmp_path, cache, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "thesis.tex").write_text("draft")
    code, err = train_main(fit_args(run, cache), capsys)
    assert code == 0, err
    (run / "notes.txt").write_text("later")
    code, err = train_main(fit_args(run, cache, "--trainer.max_steps", "1", "--overwrite"), capsys)
    assert code == 0, err
    assert _step(run / "checkpoints" / "last.ckpt") == 1
    assert (run / "thesis.tex").read_text() == "draft"
    assert (run / "notes.txt").read_text() == "later"


def test_overwrite_keeps_the_commands_own_config(tmp_path, cache, capsys):
    run = tmp_path / "run"
    code, err = train_main(fit_args(run, cache), capsys)
    assert code == 0, err
    own = run / "config.yaml"  # the run's config.yaml, edited by hand and given to -c
    own.write_text(Path(TINY).read_text())
    text = own.read_text()
    args = ["fit", "-c", str(own), "--run_dir", str(run), "--overwrite"]
    code, err = train_main(args, capsys)
    assert code == 2 and len(err) == 1 and "own config" in err[0], err
    assert own.read_text() == text and (run / "checkpoints" / "last.ckpt").is_file()


def test_a_fresh_run_refuses_another_runs_checkpoint_folder(r1, tmp_path, cache, capsys):
    before = (r1 / "checkpoints" / "last.ckpt").read_bytes()
    rd = tmp_path / "rd"
    args = fit_args(rd, cache, "--checkpoint.dirpath", str(r1 / "checkpoints"))
    for extra in ((), ("--overwrite",)):
        code, err = train_main([*args, "--trainer.max_steps", "2", *extra], capsys)
        assert code == 2 and len(err) == 1, err
        assert err[0].startswith(
            f"error: --checkpoint.dirpath {r1 / 'checkpoints'} is the checkpoints folder of "
            f"the run in {r1}"
        )
        assert (r1 / "checkpoints" / "last.ckpt").read_bytes() == before


def test_a_run_with_its_own_checkpoint_folder_can_be_overwritten(tmp_path, cache, capsys):
    run, ckpts = tmp_path / "run", tmp_path / "elsewhere"
    args = fit_args(run, cache, "--checkpoint.dirpath", str(ckpts))
    code, err = train_main(args, capsys)
    assert code == 0, err
    code, err = train_main([*args, "--trainer.max_steps", "1"], capsys)
    assert code == 2 and "already holds a run" in err[-1]
    code, err = train_main([*args, "--trainer.max_steps", "1", "--overwrite"], capsys)
    assert code == 0, err
    assert _step(ckpts / "last.ckpt") == 1


def test_the_lock_never_follows_a_symlink(tmp_path, cache, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(victim, run / ".lock")
    code, err = train_main(fit_args(run, cache), capsys)
    assert code == 2 and len(err) == 1 and "symbolic link" in err[0], err
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("kind", ["run folder", "thesis folder"])
def test_export_overwrite_replaces_only_an_earlier_export(tiny_ckpt, tmp_path, kind, capsys):
    from vat.cli.export import main as export

    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    if kind == "run folder":
        files = {"checkpoints/last.ckpt": b"weights", "events.out.tfevents.1.h": b"ev"}
    else:
        files = {"thesis.tex": b"\\chapter{One}"}
    for name, data in files.items():
        (out / name).write_bytes(data)
    assert export([str(tiny_ckpt), str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not an earlier vat export" in err[0], err
    assert {n: (out / n).read_bytes() for n in files} == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp folder left


def test_export_overwrite_replaces_an_earlier_export(tiny_ckpt, tmp_path, capsys):
    from vat.cli.export import main as export

    out = tmp_path / "out"
    assert export([str(tiny_ckpt), str(out)]) == 0
    before = (out / "model.safetensors").stat().st_ino
    assert export([str(tiny_ckpt), str(out), "--overwrite"]) == 0
    assert (out / "model.safetensors").stat().st_ino != before  # written anew
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_resume_never_writes_through_symlinks_in_the_run(r1, tmp_path, cache, capsys):
    """tokenizer.json and last.ckpt replaced by links to files elsewhere: the resume reads
    through them but writes new files in their place (a rename), never into the targets."""
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    (r1 / "tokenizer.json").unlink()
    os.symlink(victim, r1 / "tokenizer.json")
    elsewhere = tmp_path / "elsewhere.ckpt"
    os.replace(r1 / "checkpoints" / "last.ckpt", elsewhere)
    before = elsewhere.read_bytes()
    os.symlink(elsewhere, r1 / "checkpoints" / "last.ckpt")
    args = fit_args(r1, cache, "--ckpt_path", "last", "--trainer.max_steps", "5")
    code, err = train_main(args, capsys)
    assert code == 0, err
    assert victim.read_text() == "precious" and elsewhere.read_bytes() == before
    assert not (r1 / "checkpoints" / "last.ckpt").is_symlink()
    assert _step(r1 / "checkpoints" / "last.ckpt") == 5


def test_the_cache_never_writes_through_symlinks(tmp_path, tiny_sentences):
    """A damaged cached tokenizer and a damaged token cache that are symlinks to files
    elsewhere: the link targets stay as they were, never written through or removed."""
    import shutil

    from vat.data.datamodule import VATDataModule

    train = tmp_path / "train.txt"
    train.write_text("\n".join(tiny_sentences * 4) + "\n")
    cache = tmp_path / "cache"
    kw = dict(vocab_size=300, max_len=24, batch_size=4, val_fraction=0.0, progress=False)
    VATDataModule(train_files=[str(train)], cache_dir=str(cache), **kw).setup("fit")
    (tok,) = cache.glob("tokenizer-*.json")
    (data,) = cache.glob("data-*")
    victim_tok = tmp_path / "victim.json"
    victim_tok.write_text("not a tokenizer")
    tok.unlink()
    os.symlink(victim_tok, tok)
    victim_data = tmp_path / "victim-data"
    shutil.copytree(data, victim_data)
    (victim_data / "done.json").write_text("garbage")
    shutil.rmtree(data)
    os.symlink(victim_data, data)
    before = {p.name: p.read_bytes() for p in victim_data.rglob("*") if p.is_file()}

    # the damaged cache that is a link is vat's to neither write through nor remove: one
    # line saying so, and both link targets stay as they were
    with pytest.raises(VatError, match="symbolic link"):
        VATDataModule(train_files=[str(train)], cache_dir=str(cache), **kw).setup("fit")
    assert victim_tok.read_text() == "not a tokenizer"
    assert {p.name: p.read_bytes() for p in victim_data.rglob("*") if p.is_file()} == before
    assert data.is_symlink()


def test_a_fresh_run_refuses_a_logger_folder_holding_another_runs_events(tmp_path, cache, capsys):
    logs = tmp_path / "logs"
    logger = [
        "--trainer.logger=lightning.pytorch.loggers.TensorBoardLogger",
        f"--trainer.logger.save_dir={logs}",
        "--trainer.logger.name=",
        "--trainer.logger.version=shared",
    ]
    code, err = train_main(fit_args(tmp_path / "a", cache, *logger), capsys)
    assert code == 0, err
    events = sorted(p.name for p in (logs / "shared").glob("events.out.tfevents.*"))
    assert events
    code, err = train_main(fit_args(tmp_path / "b", cache, *logger), capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {logs / 'shared'} holds files no vat run recorded writing")
    assert sorted(p.name for p in (logs / "shared").glob("events.out.tfevents.*")) == events


def test_resume_hint_for_files_no_run_recorded_is_one_that_works(tmp_path, cache, capsys):
    """`--ckpt_path last` into a folder holding someone's run-named files (no manifest claims
    them) must not advise --overwrite, which refuses them: it advises moving them away, and
    the same command then starts."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("my: config\n")
    (run / "checkpoints" / "step0000002.ckpt").write_bytes(b"someone else's")
    args = fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps", "1")
    code, err = train_main(args, capsys)
    assert code == 2 and len(err) == 1, err
    assert "with --overwrite" not in err[0], err[0]  # it would refuse these files
    assert "move them" in err[0] and "another --run_dir" in err[0], err[0]
    named = [n for n in ("checkpoints", "config.yaml") if n in err[0]]
    assert named == ["checkpoints", "config.yaml"], err[0]
    assert (run / "config.yaml").read_text() == "my: config\n"  # nothing moved or written

    # as advised: the named files moved out of the run folder
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in named:
        os.replace(run / name, kept / name)
    code, err = train_main(args, capsys)
    assert code == 0, err
    assert _step(run / "checkpoints" / "last.ckpt") == 1
    assert (kept / "config.yaml").read_text() == "my: config\n"


def test_a_lock_file_that_is_not_vats_is_never_overwritten(tmp_path, cache, capsys):
    """A folder named as --checkpoint.dirpath may hold a file called .lock of another tool:
    vat refuses it in one line instead of replacing its text by a process id."""
    elsewhere = tmp_path / "ckpts"
    elsewhere.mkdir()
    (elsewhere / ".lock").write_text("held by my sync tool\n")
    args = fit_args(tmp_path / "run", cache, "--checkpoint.dirpath", str(elsewhere))
    code, err = train_main(args, capsys)
    assert code == 2 and len(err) == 1 and ".lock" in err[0] and str(elsewhere) in err[0], err
    assert (elsewhere / ".lock").read_text() == "held by my sync tool\n"


def test_a_huge_run_manifest_is_refused_unread(tmp_path, cache, capsys):
    """.vat-run.json is a few hundred bytes that vat wrote; one of many megabytes was not, and
    is refused in one line without being read into memory."""
    run = tmp_path / "run"
    run.mkdir()
    names = ", ".join(f'"f{i}"' for i in range(300_000))
    text = f'{{"written_by": "vat train", "preexisting": [{names}]}}'
    (run / ".vat-run.json").write_text(text)
    code, err = train_main(fit_args(run, cache, "--trainer.max_steps", "1"), capsys)
    assert code == 2 and len(err) == 1 and ".vat-run.json" in err[0], err
    assert (run / ".vat-run.json").read_text() == text


def test_the_resume_warning_reads_only_a_recorded_config_of_vats_shape(tmp_path, capsys):
    """The newest config of a run is read to warn about changed trainer options: a config
    hand-edited into a list, or one larger than any vat writes, is skipped, not a traceback
    and not read whole."""
    from types import SimpleNamespace

    from vat.runs.run_dir import MAX_RECORD_BYTES, warn_trainer_changes

    cfg = SimpleNamespace(trainer={"precision": "bf16-mixed"})
    (tmp_path / "config.yaml").write_text("trainer:\n  precision: 32-true\n")
    warn_trainer_changes(cfg, tmp_path)
    assert "changes trainer.precision from '32-true'" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text("- a list\n- not a config\n")
    warn_trainer_changes(cfg, tmp_path)
    (tmp_path / "config.yaml").write_text(
        "trainer:\n  precision: 32-true\n" + "#" * MAX_RECORD_BYTES + "\n"
    )
    warn_trainer_changes(cfg, tmp_path)
    assert capsys.readouterr().err == ""
