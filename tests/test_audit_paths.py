"""Paths vat finds in files rather than from its user (a cache's done.json, a sweep's folder),
and what vat copies, appends to, replaces or removes: never a place the file names outside
vat's own folder, never through a link vat did not create, and never more of a file than
the user asked for."""

from __future__ import annotations

import json
import zlib

import pytest
from helpers import tiny_datamodule

import vat.data.token_cache
from vat.errors import VatError


# -- the tokenized cache ---------------------------------------------------------------------
@pytest.fixture
def train(tmp_path, tiny_sentences):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(tiny_sentences * 4) + "\n")
    return path


def _built(tmp_path, train):
    dm = tiny_datamodule(tmp_path, train)
    dm.setup("fit")
    (folder,) = (tmp_path / "cache").glob("data-*")
    return {k: list(v.ids) for k, v in dm.splits.items()}, folder


def _outside_file(folder):
    """done.json also records a file outside the cache folder, with its right size and CRC."""
    outside = folder.parent.parent / "outside.bin"
    outside.write_bytes(b"not the cache's")
    return {"files": {"../../outside.bin": {"size": 15, "crc32": zlib.crc32(outside.read_bytes())}}}


def _split_outside(folder):
    """A split whose name leads out of the folder, its files recorded as they are."""
    (folder.parent.parent / "elsewhere").mkdir()
    info = json.loads((folder / "done.json").read_text())
    stats = {**info["stats"], "../../elsewhere": info["stats"]["val"]}
    return {"stats": stats}


def _split_without_files(folder):
    info = json.loads((folder / "done.json").read_text())
    return {"stats": {**info["stats"], "test": info["stats"]["val"]}}


def _record_not_a_dict(folder):
    info = json.loads((folder / "done.json").read_text())
    return {"files": {**info["files"], "train/tokens.bin": 7}}


@pytest.mark.parametrize(
    "edit", [_outside_file, _split_outside, _split_without_files, _record_not_a_dict]
)
def test_done_json_names_only_the_cache_s_own_files(tmp_path, train, edit):
    """done.json is read from disk: a name in it that leads out of the cache folder, a split
    without its files or a record of the wrong shape is damage, and the cache is rebuilt
    (before: the outside file was read and passed as part of the cache; a split without files
    or a bad record was a FileNotFoundError/TypeError traceback)."""
    ids, folder = _built(tmp_path, train)
    done = folder / "done.json"
    info = json.loads(done.read_text())
    for key, value in edit(folder).items():
        info[key] = {**info[key], **value} if key == "files" else value
    done.write_text(json.dumps(info))
    with pytest.raises(vat.data.token_cache.CacheDamaged):
        vat.data.token_cache.verify(folder, 24)
    dm = tiny_datamodule(tmp_path, train)
    with pytest.warns(UserWarning, match="tokenized cache .* is damaged"):
        dm.setup("fit")
    assert {k: list(v.ids) for k, v in dm.splits.items()} == ids
    vat.data.token_cache.verify(folder, 24)  # intact again


def test_a_damaged_cache_behind_a_link_is_named_not_removed(tmp_path, train):
    """A cache entry that is the user's symbolic link (to a cache kept elsewhere) is read
    through, but when it is damaged vat names it in one line and leaves the link and what it
    points to (before: the link was deleted and a cache written in its place)."""
    _, folder = _built(tmp_path, train)
    kept = tmp_path / "kept-cache"
    folder.rename(kept)
    folder.symlink_to(kept)
    dm = tiny_datamodule(tmp_path, train)
    dm.setup("fit")  # an intact cache through the link is used as it is
    (kept / "done.json").unlink()
    with pytest.raises(VatError, match=r"is damaged .*symbolic link.* remove it") as e:
        tiny_datamodule(tmp_path, train).setup("fit")
    assert "\n" not in str(e.value)
    assert folder.is_symlink() and (kept / "train" / "tokens.bin").is_file()


# -- sweeps ------------------------------------------------------------------------------------
def _sweep(tmp_path):
    from conftest import ASSETS

    from vat.experiments.config import SweepConfig

    return SweepConfig(
        train_config=str(ASSETS / "tiny.yaml"),
        sweep={"model.loss.prior_std": [0.3, 0.7]},
        out_dir=str(tmp_path / "sweep"),
        jobs=2,
        device="cpu",
    )


def test_a_sweep_log_that_is_a_link_is_not_appended_through(tmp_path):
    """A parallel sweep appends each child's output to its run's sweep.log: a symbolic link
    put there (to a file vat did not write) is refused in one line and the file it points to
    is untouched (before: the child's output was appended to that file)."""
    import sys

    from vat.experiments import sweep
    from vat.experiments.config import run_name

    cfg = _sweep(tmp_path)
    points = cfg.points()
    # the children: a real process that prints a line, as a child sweep run logs its work
    runner = sweep.Runner(
        train=lambda argv: 0,
        check=lambda argv: 0,
        prepare=lambda argv: 0,
        child=(sys.executable, "-c", "print(1)"),
    )
    theirs = tmp_path / "notes.txt"
    theirs.write_text("the user's notes\n")
    run_dir = tmp_path / "sweep" / run_name(points[1])
    run_dir.mkdir(parents=True)
    (run_dir / "sweep.log").symlink_to(theirs)
    with pytest.raises(VatError, match=r"sweep.log is a symbolic link; .* remove it") as e:
        sweep.run_parallel(runner, cfg, "sweep.yaml", points, log=lambda m: None, poll_s=0.05)
    assert "\n" not in str(e.value)
    assert theirs.read_text() == "the user's notes\n"
    assert (run_dir / "sweep.log").is_symlink()
    assert not (tmp_path / "sweep" / run_name(points[0])).exists()  # refused before any start
    (run_dir / "sweep.log").unlink()  # without the link, both children log to files of vat's
    sweep.run_parallel(runner, cfg, "sweep.yaml", points, log=lambda m: None, poll_s=0.05)
    for point in points:
        assert (tmp_path / "sweep" / run_name(point) / "sweep.log").read_text() == "1\n"


def _records():
    return [
        {"run": "prior_std_0.3", "model.loss.prior_std": 0.3, "step": 4, "val_kl": 1.5},
        {"run": "../../escaped", "model.loss.prior_std": 0.7, "step": 4, "val_kl": 0.5},
    ]


def test_the_hparams_view_is_written_only_inside_the_sweep_folder(tmp_path):
    """The TensorBoard view is written under a fresh temporary name and swapped in: a link
    left at the old fixed temporary name, or a run name read back from a record.json that
    leads out (`../../escaped`, kept as the one folder `.._.._escaped`), no longer sends the
    event files elsewhere (before: both wrote into the folder outside)."""
    from vat.experiments import frontier

    out = tmp_path / "sweep" / "out"
    out.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / ".hparams-tmp").symlink_to(elsewhere)
    final = frontier.write_hparams(_records(), ["model.loss.prior_std"], out)
    assert list(elsewhere.iterdir()) == []
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "sweep" / "escaped").exists()
    runs = [".._.._escaped", "prior_std_0.3"]
    assert sorted(p.name for p in final.iterdir() if p.is_dir()) == runs
    assert (out / ".hparams-tmp").is_symlink()  # the link is left as it was
    assert sorted(p.name for p in out.iterdir()) == [".hparams-tmp", "hparams"]
    # a rerun replaces the view; a link in the view's place is refused in one line
    frontier.write_hparams(_records(), ["model.loss.prior_std"], out)
    assert sorted(p.name for p in out.iterdir()) == [".hparams-tmp", "hparams"]
    (out / "hparams").rename(tmp_path / "moved")
    (out / "hparams").symlink_to(tmp_path / "moved")
    with pytest.raises(VatError, match=r"hparams is a symbolic link; .* remove it"):
        frontier.write_hparams(_records(), ["model.loss.prior_std"], out)
    assert sorted(p.name for p in (tmp_path / "moved").iterdir() if p.is_dir()) == runs


# -- readers with a limit: only as much of the file as was asked for -------------------------
def _file_then_bad_bytes(tmp_path, lines):
    """Good lines, then bytes that are not UTF-8: a reader that stops at its limit never
    reaches them, one that reads the whole file first fails on them."""
    path = tmp_path / "big.txt"
    path.write_bytes("".join(f"{s}\n" for s in lines).encode() + b"\xff\xfe broken\n" * 1000)
    return path


def test_a_probe_is_read_only_as_far_as_max_sentences(tmp_path, tiny_sentences):
    """`max_sentences` (vat geometry --max-sentences, the callbacks, a sweep's
    probe_max_sentences) stops the reading, so a probe file is not held whole (before: the
    whole file was read and decoded, failing on bytes past the sentences asked for)."""
    from vat.geometry.probes import load_probe_sentences

    path = _file_then_bad_bytes(tmp_path, tiny_sentences[:6])
    assert load_probe_sentences(path, max_sentences=5) == tiny_sentences[:5]
    with pytest.raises(VatError, match=r"big.txt:7: bytes that are not UTF-8"):
        load_probe_sentences(path)  # the whole file, named with the line


def test_bleu_reads_only_its_bleu_lines(tmp_path, tiny_sentences, tiny_ckpt):
    """A sweep's mu-decoding BLEU uses the first bleu_lines lines of bleu_file and reads no
    further (before: the whole file was read into memory, and a later bad byte failed it)."""
    from vat.experiments import measure
    from vat.share.resolve import load_model

    cfg = _sweep(tmp_path)
    cfg.bleu_file, cfg.bleu_lines = str(_file_then_bad_bytes(tmp_path, tiny_sentences[:4])), 3
    bleu = measure._bleu(cfg, load_model(tiny_ckpt, "cpu"))
    assert 0.0 <= bleu <= 100.0


def test_samples_callback_reads_its_sentences_file_up_to_num_sentences(tmp_path, tiny_sentences):
    """SamplesCallback takes the first num_sentences lines of sentences_file when it is made,
    before training: the rest is never read, and a line that is not UTF-8 among those is one
    error naming the file and line (before: the whole file was read at the first validation,
    and a bad byte anywhere was a UnicodeDecodeError traceback in the middle of training)."""
    from vat.callbacks.samples import SamplesCallback

    path = _file_then_bad_bytes(tmp_path, tiny_sentences[:4])
    cb = SamplesCallback(sentences_file=str(path), num_sentences=3)
    assert cb.sentences(None, None) == tiny_sentences[:3]
    with pytest.raises(VatError, match=r"big.txt:5: bytes that are not UTF-8"):
        SamplesCallback(sentences_file=str(path), num_sentences=10)


# -- vat mteb --output-dir ---------------------------------------------------------------------
def _local_sts_task(sentences):
    """MTEB's STSBenchmark task with a few local pairs instead of the Hub's data."""
    from datasets import Dataset, DatasetDict
    from mteb.tasks.sts.eng.sts_benchmark_sts import STSBenchmarkSTS

    class LocalSTS(STSBenchmarkSTS):
        def load_data(self, num_proc=None, **kwargs) -> None:
            n = len(sentences) // 2
            rows = {
                "sentence1": sentences[:n],
                "sentence2": sentences[n : 2 * n],
                "score": [float(i % 5) for i in range(n)],
            }
            self.dataset = {"default": DatasetDict({"test": Dataset.from_dict(rows)})}
            self.data_loaded = True

    return LocalSTS()


def test_mteb_results_are_never_written_through_a_link(
    tmp_path, tiny_export, tiny_sentences, capsys, monkeypatch
):
    """MTEB writes its result files with plain opens: a result file in --output-dir that is a
    symbolic link is refused in one line before any work, and the file it points to keeps
    its bytes (before: the link was followed and that file overwritten with the results)."""
    import huggingface_hub.constants

    from vat.cli.mteb import main
    from vat.integrations.mteb import VATMTEBEncoder, evaluate

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # local task data
    out = tmp_path / "results"
    encoder = VATMTEBEncoder(str(tiny_export), device="cpu")
    evaluate(encoder, [_local_sts_task(tiny_sentences)], out)
    (result,) = out.rglob("STSBenchmark.json")
    theirs = tmp_path / "theirs.json"
    theirs.write_text("the user's file\n")
    result.unlink()
    result.symlink_to(theirs)
    with pytest.raises(VatError, match=r"output_dir: .* holds a symbolic link"):
        evaluate(encoder, [_local_sts_task(tiny_sentences)], out)
    assert theirs.read_text() == "the user's file\n"
    capsys.readouterr()
    # the command refuses it before the model loads (this model does not even exist)
    argv = ["--model", str(tmp_path / "no-model"), "--tasks", "STSBenchmark"]
    assert main([*argv, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --output-dir: ") and "symbolic link" in err
    assert err.count("\n") == 1


# -- scripts/build_demo_corpus.py ------------------------------------------------------------
def test_the_demo_corpus_build_replaces_links_instead_of_writing_through(tmp_path):
    """Rebuilding the demo corpus into a data folder whose files are links (to a shared,
    read-only copy) replaces the links with the new files and leaves what they point to
    (before: the build wrote into the linked files)."""
    import io
    import tarfile

    from conftest import ROOT
    from helpers import load_file_module

    build_demo = load_file_module(ROOT / "scripts" / "build_demo_corpus.py", "build_demo")
    lines = [f'00 | a gloss; "the example number {i} is here"' for i in range(1200)]
    tarball = tmp_path / "wordnet.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name in build_demo.POS_FILES:
            data = "\n".join(lines).encode("latin-1") if name == "data.noun" else b""
            info = tarfile.TarInfo(f"package/dict/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shared, out = tmp_path / "shared", tmp_path / "data"
    shared.mkdir()
    out.mkdir()
    for name in ("demo_en.txt.gz", "demo_val.txt"):
        (shared / name).write_text("the shared copy\n")
        (out / name).symlink_to(shared / name)
    stats = build_demo.build(tarball, out)
    assert stats["train_lines"] == 200 and stats["val_lines"] == 1000
    for name in ("demo_en.txt.gz", "demo_val.txt"):
        assert (shared / name).read_text() == "the shared copy\n"
        assert not (out / name).is_symlink()
    assert len((out / "demo_val.txt").read_text().splitlines()) == 1000
    assert sorted(p.name for p in out.iterdir()) == ["demo_en.txt.gz", "demo_val.txt"]


def test_generate_bleu_limit_reads_only_that_many_lines(
    tmp_path, tiny_sentences, tiny_ckpt, capsys
):
    """`vat generate bleu --limit N` stops reading --input after its N-th sentence (before:
    the whole input was read first, so a bad byte far past the N lines failed the command
    and a large file was held whole)."""
    from vat.cli.generate import main

    path = _file_then_bad_bytes(tmp_path, tiny_sentences[:4])
    argv = ["bleu", "--ckpt", str(tiny_ckpt), "--input", str(path), "--json", "--max-len", "6"]
    assert main([*argv, "--limit", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 3
    assert main(argv) == 2  # the whole input: the bad line is named
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:5: bytes that are not UTF-8")  # FILE:LINE, as all


def test_a_line_without_an_end_is_kept_to_its_first_mib(tmp_path):
    """A probe or BLEU file without line ends (a one-line dump) is not read into memory
    whole: each line is kept to its first MiB, cut between characters, and the reader goes
    on at the next line (before: the whole line was read and kept)."""
    from vat.geometry.probes import iter_lines

    mib = 1 << 20
    path = tmp_path / "one-line.txt"
    path.write_bytes(b"a" * (mib - 3) + "é".encode() * 2_000_000 + b"\nnext\n")
    first, second = iter_lines(path)  # the cut falls inside the second é: it is dropped
    assert first == "a" * (mib - 3) + "é"
    assert second == "next"
