"""Memory and time bounded by what the user asked for, and values that once escaped as
tracebacks refused in one line: `vat score` reads stdin and FILE lazily (`--limit` stops the
reading, a line without an end is held to a bound), a model config's max_len and prior_std
are checked before anything is built, and a path the system refuses as too long is one line
wherever it is typed."""

from __future__ import annotations

import codecs
import errno
import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import copy_folder

import vat
from vat.cli.score import main
from vat.errors import CheckpointError, OptionError, VatError, run_cli
from vat.io import atomic_write, check_output_file, regular_file, writable_target
from vat.model import VAT
from vat.share.checkpoint import read_checkpoint, save_vat

FAST = ["--samples", "2", "--diversity-samples", "0", "--prior-samples", "0"]
QUIET = [*FAST, "--no-representation", "--quiet"]
LONG = "n" * 5000  # a pasted name: longer than any file name or path may be


def cli(argv, capsys) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


# -- stdin and FILE are read as far as --limit needs ----------------------------------------
# The writer writes TEXT over and over, at most 32 MB, then keeps the pipe open without
# writing: a reader that waits for the end of the input waits until the watchdog kills it.
WRITER = """
import sys, time
text = sys.argv[1].encode() * 4096
for _ in range((32 << 20) // len(text)):
    sys.stdout.buffer.write(text)
sys.stdout.buffer.flush()
time.sleep(60)
"""


def score_from_endless_stdin(text: str, argv: list, monkeypatch, capsys, patience: float = 20):
    writer = subprocess.Popen([sys.executable, "-c", WRITER, text], stdout=subprocess.PIPE)
    watchdog = threading.Timer(patience, writer.kill)
    watchdog.start()
    try:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(writer.stdout))
        start = time.perf_counter()
        rc, out, err = cli([*argv, "-", *QUIET], capsys)
        seconds = time.perf_counter() - start
        writing = writer.poll() is None  # vat finished while the input had not ended
    finally:
        watchdog.cancel()
        writer.kill()
        writer.wait()
    return rc, out, err, seconds, writing


def test_limit_stops_reading_an_endless_stdin(tiny_ckpt, monkeypatch, capsys):
    # `yes 'A man.' | vat score --model M - --limit 3` read all of stdin first
    rc, out, err, seconds, writing = score_from_endless_stdin(
        "A man.\n", ["--model", tiny_ckpt, "--limit", "3"], monkeypatch, capsys
    )
    assert rc == 0, err
    assert writing and seconds < 20
    assert "on stdin: 3 sentences" in out


def test_a_line_without_an_end_is_held_to_a_bound(tiny_ckpt, monkeypatch, capsys):
    rc, out, err, seconds, writing = score_from_endless_stdin(
        "word ", ["--model", tiny_ckpt, "--limit", "1"], monkeypatch, capsys
    )
    assert rc == 0, err
    assert writing and seconds < 20
    assert "on stdin: 1 sentences" in out
    assert "1 sentence(s) had more than max_len - 1" in out


def test_reading_holds_one_bounded_line(tmp_path):
    from vat.cli.common import iter_text_lines
    from vat.data.corpus import MAX_LINE_BYTES

    # a 3 MB line of two-byte characters, then a short line: the long one is kept to its
    # first MAX_LINE_BYTES, cut between characters, and the next line is still its own
    p = tmp_path / "long.txt"
    p.write_bytes("é".encode() * (3 << 19) + b"\nshort\n\xff\n")
    got = list(iter_text_lines(str(p), "FILE"))
    assert [n for n, _ in got] == [1, 2, 3]
    assert len(got[0][1]) == MAX_LINE_BYTES and got[0][1].decode("utf-8") == "é" * (1 << 19)
    assert got[1][1] == b"short" and got[2][1] == b"\xff"
    # one byte more than the bound: the cut falls inside a character, which is left out
    p.write_bytes(b"a" + "é".encode() * (1 << 19) + b"\n")
    (_, line), = iter_text_lines(str(p), "FILE")  # fmt: skip
    assert line.decode("utf-8") == "a" + "é" * ((1 << 19) - 1)


def test_a_long_multibyte_line_is_scored_not_refused_as_bad_bytes(tiny_ckpt, tmp_path, capsys):
    p = tmp_path / "long.txt"
    p.write_bytes(b"a" + "é ".encode() * (1 << 19) + b"\nA man.\n")
    rc, out, err = cli(["--model", tiny_ckpt, p, *QUIET], capsys)
    assert rc == 0, err
    assert "2 sentences" in out


# -- values from options: checked before the model is read ----------------------------------
def test_seed_beyond_what_torch_takes_is_one_line_before_loading(tiny_ckpt, tmp_path, capsys):
    p = tmp_path / "two.txt"
    p.write_text("A man.\nA dog runs.\n")
    for model in (tiny_ckpt, tmp_path / "no-such-model"):  # the seed is checked first
        rc, _, err = cli(["--model", model, p, *QUIET, "--seed", "99999999999999999999"], capsys)
        assert rc == 2 and err.count("\n") == 1, err
        assert err.startswith("error: --seed: must be None or a whole number in [0, 2**63)")


def test_output_that_is_a_device_is_refused_before_any_work(tmp_path, capsys):
    p = tmp_path / "two.txt"
    p.write_text("A man.\n")
    # a model that names nothing: the output is refused before the model is looked for
    argv = ["--model", tmp_path / "no-such-model", p, "--output", "/dev/null", "--overwrite"]
    rc, _, err = cli(argv, capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "--output /dev/null is a device, expected a file path to write" in err


def test_a_model_without_length_histogram_names_prior_samples(tiny_tokenizer, tmp_path, capsys):
    from conftest import tiny_config

    ckpt = tmp_path / "no-histogram.ckpt"
    save_vat(ckpt, VAT(tiny_config(tiny_tokenizer.vocab_size)), tiny_tokenizer, prior_std=0.4)
    p = tmp_path / "two.txt"
    p.write_text("A man.\nA dog runs.\n")
    argv = ["--model", ckpt, p, "--samples", "2", "--diversity-samples", "0"]
    rc, _, err = cli([*argv, "--prior-samples", "3", "--no-representation"], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "--prior-samples: " in err and "set it to 0" in err and "--length" not in err
    with pytest.raises(OptionError) as e:
        vat.load(ckpt, device="cpu").score(["A man."], samples=1, prior_samples=2)
    assert e.value.name == "prior_samples"
    rc, out, err = cli([*argv, "--prior-samples", "0", "--no-representation"], capsys)
    assert rc == 0, err
    # the prior's own message names the length both ways: the command's option and Python's
    with pytest.raises(VatError, match=r"--length N; length=N in Python"):
        vat.load(ckpt, device="cpu").prior(num_samples=2)
    assert len(vat.load(ckpt, device="cpu").prior(num_samples=2, length=3)) == 2


# -- a path too long for the system ---------------------------------------------------------
def test_paths_too_long_are_one_line_in_every_path_check(tmp_path):
    long = tmp_path / LONG
    for check in (
        lambda: regular_file(long, "--input"),
        lambda: writable_target(long, "--output"),
        lambda: check_output_file(long, True, "--output"),
        lambda: atomic_write(long, lambda f: f.write("x")),
        lambda: read_checkpoint(long),
    ):
        with pytest.raises(VatError) as e:
            check()
        message = str(e.value)
        assert "file name too long" in message and "characters)" in message
        assert len(message) < 300 and LONG not in message


def test_a_long_but_valid_output_name_gets_its_temp_file(tmp_path):
    # a name of 250 bytes is allowed; its temp name (".NAME.tmp-PID@HOST-XXXXXXXX") must be too
    out = tmp_path / ("o" * 250)
    atomic_write(out, lambda f: f.write("kept"))
    assert out.read_text() == "kept"
    assert check_output_file(out, True) == out


def test_score_output_and_file_too_long_are_one_line(tiny_ckpt, tmp_path, capsys):
    p = tmp_path / "two.txt"
    p.write_text("A man.\n")
    for argv in (
        [p, "--output", tmp_path / LONG],
        [tmp_path / LONG],
        [LONG],
        ["/".join(["n" * 200] * 25)],  # every name allowed, the whole path too long
    ):
        rc, _, err = cli(["--model", tiny_ckpt, *argv, *QUIET], capsys)
        assert rc == 2 and err.count("\n") == 1, err
        assert "file name too long" in err and len(err) < 300


def test_the_last_resort_for_a_name_too_long_is_one_line(capsys):
    def opens_a_long_name(argv):
        open(LONG).close()  # a real ENAMETOOLONG from the system, wherever it is raised

    assert run_cli(opens_a_long_name, []) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: File name too long: nnn") and err.count("\n") == 1
    assert "5,000 characters" in err and len(err) < 200
    with pytest.raises(OSError) as e:
        run_cli(opens_a_long_name, ["--debug"])
    assert e.value.errno == errno.ENAMETOOLONG


# -- sizes and scales in a model's config ---------------------------------------------------
def edited_folder(tiny_export: Path, tmp_path: Path, **changes) -> Path:
    folder = copy_folder(tiny_export, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if key in config["model_config"]:
            config["model_config"][key] = value
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_max_len_far_beyond_the_model_is_refused_before_building(tiny_export, tmp_path):
    # d_model 32: a position table of 4,000,001 x 32 floats is 512 MB, for a model of 1 MB
    folder = edited_folder(tiny_export, tmp_path, max_len=4_000_000)
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as e:
        vat.load(folder, device="cpu")
    assert time.perf_counter() - start < 5
    assert "max_len 4000000" in str(e.value) and "needs a 512 MB position table" in str(e.value)
    # the refusal itself, not the loader's "weights do not match its config.json" around it
    assert "do not match" not in str(e.value)


@pytest.mark.parametrize("prior_std", [1e300, 1e-300])
def test_a_prior_std_whose_square_overflows_is_one_line(tiny_export, tmp_path, capsys, prior_std):
    folder = edited_folder(tiny_export, tmp_path, prior_std=prior_std)
    with pytest.raises(CheckpointError, match="prior_std") as e:
        vat.load(folder, device="cpu")
    assert "config.json: 'prior_std'" in str(e.value)  # the folder's file names it first
    p = tmp_path / "two.txt"
    p.write_text("A man.\n")
    rc, _, err = cli(["--model", folder, p, *FAST, "--no-representation"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "prior_std" in err, err


@pytest.mark.parametrize("prior_std", [1e300, 1e-300])
def test_training_refuses_the_same_prior_std(prior_std):
    from vat.train.config import LossConfig

    with pytest.raises(VatError, match="model.loss.prior_std"):
        LossConfig(prior_std=prior_std)


def test_generate_input_lines_are_held_to_the_same_bound(tmp_path):
    # vat generate --input and vat pretrained --check-file keep every line (one output line
    # per input line); a line without an end no longer fills memory
    from vat.cli.common import read_text_lines
    from vat.data.corpus import MAX_LINE_BYTES

    p = tmp_path / "in.txt"
    p.write_bytes(b"x" * (3 * MAX_LINE_BYTES) + b"\r\n\nlast")
    lines = read_text_lines(str(p), "--input")
    assert [len(s) for s in lines] == [MAX_LINE_BYTES, 0, 4]


def test_training_files_too_long_for_a_path_are_one_line_in_the_api(tmp_path):
    from vat.data.corpus import expand_files

    with pytest.raises(VatError, match="--data.train_files .*file name too long"):
        expand_files([str(tmp_path / LONG)], "--data.train_files")


# -- how every reader decodes text: one rule (vat.data.corpus.check_text, bounded_lines,
# LineReader, decode_each; docs/cli.md "How vat reads text") --------------------------------
TEXT = "A man plays a guitar.\nA dog runs in the park.\n"
CLEAN = ["A man plays a guitar.", "A dog runs in the park."]


def _sentences(lines) -> list[str]:
    return [s.strip() for s in lines if s.strip()]


def _read_with(reader: str, path: Path) -> list[str]:
    from vat.cli.common import read_text_lines
    from vat.cli.score import _read
    from vat.data.corpus import read_lines
    from vat.eval.tasks.files import iter_lines as senteval_lines
    from vat.features.fitting import sample_lines
    from vat.geometry.probes import iter_lines as probe_lines

    return _sentences(
        {
            "score FILE": lambda: _read(str(path), "error", None),
            "generate --input, pretrained --check-file": lambda: read_text_lines(str(path)),
            "training, explore --corpus (LineReader)": lambda: read_lines(path)[0],
            "--fit-files, --count-files": lambda: sample_lines([str(path)], 10),
            "--probe, samples and sweep BLEU files": lambda: list(probe_lines(path)),
            "SentEval's UTF-8 files": lambda: senteval_lines(path, "utf-8"),
        }[reader]()
    )


READERS = (
    "score FILE",
    "generate --input, pretrained --check-file",
    "training, explore --corpus (LineReader)",
    "--fit-files, --count-files",
    "--probe, samples and sweep BLEU files",
    "SentEval's UTF-8 files",
)
SAMPLERS = ("training, explore --corpus (LineReader)", "--fit-files, --count-files")
DECODING = {
    # a UTF-8 byte-order mark is an editor's mark, not the first sentence's first character
    # (before: kept by every reader but SentEval's, three more subwords of the first sentence)
    "utf-8 byte-order mark": (codecs.BOM_UTF8 + TEXT.encode(), CLEAN),
    "crlf line ends": (TEXT.replace("\n", "\r\n").encode(), CLEAN),
    # invisible characters are the tokenizer's to see: kept, never silently dropped
    "invisible characters": (
        "A\u200bman plays.\n\u2060A dog\u00adruns.\n".encode(),
        ["A\u200bman plays.", "\u2060A dog\u00adruns."],
    ),
    # UTF-16/32: one line naming the encoding (before: "line 1 has bytes that are not
    # UTF-8", "looks like a binary file (NUL bytes)" or "not valid utf-8 at byte 0", by reader)
    "utf-16": (TEXT.encode("utf-16"), "is UTF-16 text (it starts with a UTF-16 byte-order mark)"),
    "utf-16 big-endian": (
        codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"),
        "is UTF-16 text (it starts with a UTF-16 byte-order mark)",
    ),
    "utf-32": (TEXT.encode("utf-32"), "is UTF-32 text (it starts with a UTF-32 byte-order mark)"),
    # a NUL at the start: binary, whichever reader (before: kept as text by generate --input,
    # pretrained --check-file, the probe and BLEU files and SentEval's files)
    "nul bytes": (b"A man\x00plays.\n" + TEXT.encode(), "looks like a binary file (NUL bytes"),
    # not UTF-8: FILE:LINE, or skipped and counted where a corpus is sampled
    "latin-1": ("Un café.\n".encode("latin-1") + TEXT.encode(), ":1: bytes that are not UTF-8"),
}


@pytest.mark.parametrize("case", DECODING)
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_decodes_text_by_one_rule(reader, case, tmp_path):
    content, expected = DECODING[case]
    path = tmp_path / "in.txt"
    path.write_bytes(content)
    if case == "latin-1" and reader in SAMPLERS:
        expected = CLEAN  # skipped, and counted in one warning (warn_skipped)
    if isinstance(expected, list):
        assert _read_with(reader, path) == expected
        return
    with pytest.raises(VatError) as e:
        _read_with(reader, path)
    assert expected in str(e.value) and str(path) in str(e.value), str(e.value)


def test_a_byte_order_mark_changes_no_sentence(tiny_ckpt, tmp_path, capsys):
    """The first sentence decodes the same with or without a UTF-8 byte-order mark (before:
    its three bytes were three more subwords of it)."""
    from vat.cli.generate import main as generate

    outputs = []
    for name, content in (("clean", TEXT.encode()), ("bom", codecs.BOM_UTF8 + TEXT.encode())):
        p = tmp_path / f"{name}.txt"
        p.write_bytes(content)
        argv = ["reconstruct", "--ckpt", str(tiny_ckpt), "--input", str(p), "--json"]
        assert generate([*argv, "--max-len", "6", "--no-progress"]) == 0
        outputs.append([json.loads(x) for x in capsys.readouterr().out.splitlines()])
    assert outputs[0] == outputs[1] and outputs[1][0]["input"] == CLEAN[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "--model", "{ckpt}", "{file}", *QUIET],
        ["generate", "reconstruct", "--model", "{ckpt}", "--input", "{file}"],
        ["generate", "bleu", "--model", "{ckpt}", "--input", "{file}"],
        ["geometry", "--model", "{ckpt}", "--probe", "{file}"],
    ],
    ids=["score FILE", "generate --input", "generate bleu --input", "geometry --probe"],
)
def test_a_utf16_file_is_one_line_naming_it_in_every_command(argv, tiny_ckpt, tmp_path, capsys):
    from helpers import one_line_error

    path = tmp_path / "utf16.txt"
    path.write_bytes(TEXT.encode("utf-16"))
    err = one_line_error(capsys, [a.format(ckpt=tiny_ckpt, file=path) for a in argv])
    assert f"{path} is UTF-16 text" in err and "expected UTF-8" in err, err


# -- names with control characters: shown visibly, once (vat.errors.visible) -----------------
NAMES = {
    "newline": ("runs/x\ny", "runs/x\\ny"),
    "carriage return": ("runs/x\rerror: fake", "runs/x\\rerror: fake"),
    "terminal escape": ("runs/\x1b[2J\x1b[31mred", "runs/\\x1b[2J\\x1b[31mred"),
    "bidi override": ("runs/a\u202eb", "runs/a\\u202eb"),
}


def test_shown_path_shows_control_characters_visibly():
    from vat.errors import shown_path

    assert shown_path("a\nb\x1b[2J\u2028c é") == "a\\nb\\x1b[2J\\u2028c é"
    long = shown_path("\x1b" + "n" * 400)
    assert long.startswith("\\x1bnnn") and long.isprintable()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "argv",
    [
        ["score", "--model", "{name}", "{file}"],
        ["score", "--model", "{ckpt}", "{name}"],
        ["generate", "reconstruct", "--model", "{ckpt}", "--input", "{name}"],
        ["evaluate", "--model", "{ckpt}", "--tasks", "STS12", "--data-dir", "{name}/none"],
        ["export", "{ckpt}", "{folder}"],
    ],
    ids=["--model", "score FILE", "--input", "--data-dir", "export DIR (not empty)"],
)
def test_a_name_with_control_characters_is_one_visible_line(
    name, argv, tiny_ckpt, tmp_path, capsys, monkeypatch
):
    """A newline, carriage return, terminal escape or bidi override in a name a command
    quotes is shown escaped: the error stays one line that cannot rewrite the terminal
    (before: `--model` printed it raw, `score FILE` cut the message at the newline)."""
    from helpers import one_line_error

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    raw, shown = NAMES[name]
    (tmp_path / "runs").mkdir(exist_ok=True)
    folder = tmp_path / raw
    folder.mkdir(exist_ok=True)
    (folder / "kept.txt").write_text("not vat's")  # export refuses a folder that is not empty
    file = tmp_path / "in.txt"
    file.write_text(TEXT)
    values = {"ckpt": tiny_ckpt, "file": file, "name": raw, "folder": folder}
    err = one_line_error(capsys, [a.format(**values) for a in argv])
    assert shown in err and err[:-1].isprintable(), repr(err)
