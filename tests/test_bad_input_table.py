"""An audit of bad input, as a table: every subcommand (train, evaluate, geometry, generate *,
sweep, export, mteb, config) and the Python API, driven with generated bad values per option.
Each case must end in exit code 2 with one `error:` line on stderr naming the option, no
traceback, and no hang (a timer aborts a case that runs past its limit).

Kind: every option that names a file gets a named pipe (FIFO), a folder, a symlink loop and
a device (/dev/zero); a folder option gets a file. Range: counts get 0 and -1, scales get
negative, zero (where zero is meaningless), NaN and inf, and the sizes that would allocate
get a request far beyond the machine (refused before allocating, with the bytes it would
need). The CLI runs in-process (no interpreter start-up per case); one case runs `vat` in a
subprocess, where a FIFO would really block.
"""

from __future__ import annotations

import os
import signal
import subprocess

import numpy as np
import pytest
from conftest import ASSETS, ROOT
from helpers import train_env, vat_python

from vat.errors import OptionError, VatError

KINDS = ("fifo", "folder", "symlink loop", "device")


def _device_absent(name: str) -> bool:
    import torch

    if name == "mps":
        return not torch.backends.mps.is_available()
    return torch.cuda.device_count() <= int(name.split(":")[1])


PROBE = str(ASSETS / "sentences.txt")
TINY = str(ASSETS / "tiny.yaml")
SWEEP = str(ROOT / "configs" / "sweeps" / "sweep.yaml")
EVAL = ["--tasks", "STSBenchmark", "--preset", "prototyping", "--no-progress", "--device", "cpu"]
GEN = ["--no-progress", "--device", "cpu"]
SCORE = ["--samples", "2", "--no-progress", "--device", "cpu", "--no-representation"]

# Options naming a file: command, arguments ({bad} is the bad path; {ckpt}, {tmp} fixed).
FILE_OPTIONS = {
    "score --ckpt": ("score", ["--ckpt", "{bad}", PROBE, *SCORE]),
    "score FILE": ("score", ["--ckpt", "{ckpt}", "{bad}", *SCORE]),
    "score --output": ("score", ["--ckpt", "{ckpt}", PROBE, "--output", "{bad}", *SCORE]),
    "score --sts-pairs": (
        "score",
        ["--ckpt", "{ckpt}", PROBE, "--sts-pairs", "{bad}", "--samples", "2", "--no-progress"],
    ),
    "generate --ckpt": ("generate", ["reconstruct", "--ckpt", "{bad}", *GEN, "a b"]),
    "generate --input": ("generate", ["reconstruct", "--ckpt", "{ckpt}", "--input", "{bad}"]),
    "generate --output": (
        "generate",
        ["reconstruct", "--ckpt", "{ckpt}", "--output", "{bad}", "a"],
    ),
    "evaluate --ckpt": ("evaluate", ["--ckpt", "{bad}", "--data-dir", "{tmp}", *EVAL]),
    "evaluate --encoder": ("evaluate", ["--encoder", "{bad}:f", "--data-dir", "{tmp}", *EVAL]),
    "evaluate --output": (
        "evaluate",
        ["--ckpt", "{ckpt}", "--data-dir", "{tmp}", "--output", "{bad}", *EVAL],
    ),
    "evaluate --plot": (
        "evaluate",
        ["--ckpt", "{ckpt}", "--data-dir", "{tmp}", "--plot", "{bad}", *EVAL],
    ),
    "geometry --ckpt": (
        "geometry",
        ["--ckpt", "{bad}", "--probe", PROBE, "--output", "{tmp}/g.json"],
    ),
    "geometry --probe": (
        "geometry",
        ["--ckpt", "{ckpt}", "--probe", "{bad}", "--output", "{tmp}/g.json"],
    ),
    "geometry --output": ("geometry", ["--ckpt", "{ckpt}", "--probe", PROBE, "--output", "{bad}"]),
    "evaluate --compare": (
        "evaluate",
        [
            "--ckpt",
            "{ckpt}",
            "--data-dir",
            "{tmp}",
            "--plot",
            "{tmp}/p.png",
            "--compare",
            "{bad}",
            *EVAL,
        ],
    ),
    "evaluate --hf-model": ("evaluate", ["--hf-model", "{bad}", "--data-dir", "{tmp}", *EVAL]),
    "geometry --hf-model": (
        "geometry",
        ["--hf-model", "{bad}", "--probe", PROBE, "--output", "{tmp}/g.json"],
    ),
    "export CKPT": ("export", ["{bad}", "{tmp}/export"]),
    "sweep -c": ("sweep", ["-c", "{bad}"]),
    "mteb --model": ("mteb", ["--model", "{bad}", "--tasks", "STSBenchmark"]),
    "train -c": ("train", ["-c", "{bad}"]),
    "train --data.train_files": (
        "train",
        [
            "-c",
            TINY,
            "--run_dir",
            "{tmp}/run",
            "--data.train_files",
            "[{bad}]",
            "--data.cache_dir",
            "{tmp}/cache",
        ],
    ),
    "train --data.tokenizer_path": (
        "train",
        [
            "-c",
            TINY,
            "--run_dir",
            "{tmp}/run",
            "--data.tokenizer_path",
            "{bad}",
            "--data.cache_dir",
            "{tmp}/cache",
        ],
    ),
}
# The export's output folder is a folder option: a file, FIFO or device there is refused.
FOLDER_OPTIONS = {
    "score --data-dir": (
        "score",
        ["--ckpt", "{ckpt}", PROBE, "--data-dir", "{bad}", "--samples", "2", "--no-progress"],
    ),
    "mteb --output-dir": (
        "mteb",
        ["--model", "{ckpt}", "--output-dir", "{bad}", "--tasks", "STSBenchmark"],
    ),
    "export DIR": ("export", ["{ckpt}", "{bad}"]),
    "evaluate --data-dir": ("evaluate", ["--ckpt", "{ckpt}", "--data-dir", "{bad}", *EVAL]),
    "geometry --data-dir": (
        "geometry",
        ["--ckpt", "{ckpt}", "--data-dir", "{bad}", "--output", "{tmp}/g.json"],
    ),
    "geometry --plot-dir": (
        "geometry",
        ["--ckpt", "{ckpt}", "--probe", PROBE, "--plot-dir", "{bad}", "--output", "{tmp}/g.json"],
    ),
    "sweep --output-dir": ("sweep", ["-c", SWEEP, "--output-dir", "{bad}"]),
    "train --checkpoint.dirpath": (
        "train",
        [
            "-c",
            TINY,
            "--run_dir",
            "{tmp}/run",
            "--checkpoint.dirpath",
            "{bad}",
            "--data.cache_dir",
            "{tmp}/cache",
        ],
    ),
    "train --run_dir": (
        "train",
        ["-c", TINY, "--run_dir", "{bad}", "--data.cache_dir", "{tmp}/cache"],
    ),
}
HUGE = str(10**12)
# Options taking numbers: the bad values of each.
NUMBER_OPTIONS = {
    "score --samples": (
        "score",
        ["--ckpt", "{ckpt}", PROBE, *SCORE, "--samples", "{v}"],
        ["0", "-1"],
    ),
    "score --batch-size": (
        "score",
        ["--ckpt", "{ckpt}", PROBE, *SCORE, "--batch-size", "{v}"],
        ["0", "-1"],
    ),
    "score --diversity-samples": (
        "score",
        ["--ckpt", "{ckpt}", PROBE, *SCORE, "--diversity-samples", "{v}"],
        ["-1", "1", HUGE],
    ),
    "score --prior-samples": (
        "score",
        ["--ckpt", "{ckpt}", PROBE, *SCORE, "--prior-samples", "{v}"],
        ["-1", "1", HUGE],
    ),
    "score --limit": ("score", ["--ckpt", "{ckpt}", PROBE, *SCORE, "--limit", "{v}"], ["0", "-1"]),
    "generate --batch-size": (
        "generate",
        ["reconstruct", "--ckpt", "{ckpt}", *GEN, "--batch-size", "{v}", "a"],
        ["0", "-1"],
    ),
    "generate --beam": (
        "generate",
        ["reconstruct", "--ckpt", "{ckpt}", *GEN, "--beam", "{v}", "a"],
        ["0", "-1", "1000000"],
    ),
    "generate --top-k": (
        "generate",
        ["reconstruct", "--ckpt", "{ckpt}", *GEN, "--sampling", "--top-k", "{v}", "a"],
        ["-1"],
    ),
    "generate --top-p": (
        "generate",
        ["reconstruct", "--ckpt", "{ckpt}", *GEN, "--sampling", "--top-p", "{v}", "a"],
        ["0", "-0.5", "1.5", "nan"],
    ),
    "generate --temperature": (
        "generate",
        ["reconstruct", "--ckpt", "{ckpt}", *GEN, "--sampling", "--temperature", "{v}", "a"],
        ["0", "-1", "nan", "inf"],
    ),
    "generate --max-len": (
        "generate",
        ["reconstruct", "--ckpt", "{ckpt}", *GEN, "--max-len", "{v}", "a"],
        ["0", "-1"],
    ),
    "generate --length-penalty": (
        "generate",
        ["reconstruct", "--ckpt", "{ckpt}", *GEN, "--length-penalty", "{v}", "a"],
        ["nan", "-inf"],
    ),
    "generate sample -n": (
        "generate",
        ["sample", "--ckpt", "{ckpt}", *GEN, "-n", "{v}", "a b"],
        ["0", "-1", HUGE],
    ),
    "generate sample --tau": (
        "generate",
        ["sample", "--ckpt", "{ckpt}", *GEN, "--tau", "{v}", "a b"],
        ["-1", "nan", "inf"],
    ),
    "generate resample-token --positions": (
        "generate",
        ["resample-token", "--ckpt", "{ckpt}", *GEN, "--positions", "{v}", "a b"],
        ["-1", "1000", "nan"],
    ),
    "generate interpolate --alphas": (
        "generate",
        ["interpolate", "--ckpt", "{ckpt}", *GEN, "--alphas", "{v}", "a", "b"],
        ["nan", "0,inf"],
    ),
    "generate prior -n": (
        "generate",
        ["prior", "--ckpt", "{ckpt}", *GEN, "-n", "{v}"],
        ["0", "-1", HUGE],
    ),
    "generate prior --length": (
        "generate",
        ["prior", "--ckpt", "{ckpt}", *GEN, "--length", "{v}"],
        ["0", "-1", "100000"],
    ),
    "generate prior --prior-std": (
        "generate",
        ["prior", "--ckpt", "{ckpt}", *GEN, "--prior-std", "{v}"],
        ["0", "-1", "nan"],
    ),
    "generate bleu --limit": (
        "generate",
        ["bleu", "--ckpt", "{ckpt}", *GEN, "--input", PROBE, "--limit", "{v}"],
        ["0", "-1"],
    ),
    "generate bleu --long-over": (
        "generate",
        ["bleu", "--ckpt", "{ckpt}", *GEN, "--input", PROBE, "--long-over", "{v}"],
        ["0", "-1"],
    ),
    "evaluate --batch-size": (
        "evaluate",
        ["--ckpt", "{ckpt}", "--data-dir", "{tmp}", *EVAL, "--batch-size", "{v}"],
        ["0", "-1"],
    ),
    "evaluate --nhid": (
        "evaluate",
        ["--ckpt", "{ckpt}", "--data-dir", "{tmp}", *EVAL, "--nhid", "{v}"],
        ["0", "-1"],
    ),
    "evaluate --epochs": (
        "evaluate",
        ["--ckpt", "{ckpt}", "--data-dir", "{tmp}", *EVAL, "--epochs", "{v}"],
        ["0", "-1"],
    ),
    "evaluate --lr": (
        "evaluate",
        ["--ckpt", "{ckpt}", "--data-dir", "{tmp}", *EVAL, "--lr", "{v}"],
        ["0", "-1", "nan", "inf"],
    ),
    "evaluate --seed": (
        "evaluate",
        ["--ckpt", "{ckpt}", "--data-dir", "{tmp}", *EVAL, "--seed", "{v}"],
        ["-1", str(2**40)],
    ),
    "geometry --max-sentences": (
        "geometry",
        [
            "--ckpt",
            "{ckpt}",
            "--probe",
            PROBE,
            "--output",
            "{tmp}/g.json",
            "--max-sentences",
            "{v}",
        ],
        ["0", "-1"],
    ),
    "geometry --min-count": (
        "geometry",
        ["--ckpt", "{ckpt}", "--probe", PROBE, "--output", "{tmp}/g.json", "--min-count", "{v}"],
        ["0", "-1"],
    ),
    "geometry --batch-size": (
        "geometry",
        ["--ckpt", "{ckpt}", "--probe", PROBE, "--output", "{tmp}/g.json", "--batch-size", "{v}"],
        ["0", "-1"],
    ),
    "geometry --top-types": (
        "geometry",
        ["--ckpt", "{ckpt}", "--probe", PROBE, "--output", "{tmp}/g.json", "--top-types", "{v}"],
        ["-1"],
    ),
    "sweep --jobs": ("sweep", ["-c", SWEEP, "--jobs", "{v}"], ["0", "-1"]),
    "sweep --values": ("sweep", ["-c", SWEEP, "--values", "{v}"], ["nan", "0.1,0.1"]),
    "mteb --batch-size": (
        "mteb",
        ["--model", "{ckpt}", "--batch-size", "{v}", "--tasks", "STSBenchmark"],
        ["0", "-1"],
    ),
    "config NAME": ("config", ["{v}"], ["no-such-config", "../../etc/passwd"]),
    "train --data.batch_size": (
        "train",
        ["-c", TINY, "--run_dir", "{tmp}/run", "--data.batch_size", "{v}"],
        ["0", "-1"],
    ),
    "train --model.optim.lr": (
        "train",
        ["-c", TINY, "--run_dir", "{tmp}/run", "--model.optim.lr", "{v}"],
        ["nan", "-1"],
    ),
    "train --model.loss.prior_std": (
        "train",
        ["-c", TINY, "--run_dir", "{tmp}/run", "--model.loss.prior_std", "{v}"],
        ["0", "nan"],
    ),
}
# --device on every command that runs a model: names torch does not know, meta (a device
# without data), a CUDA device this machine lacks and mps where Metal is missing.
BAD_DEVICES = ["xyz", "meta", "Cuda", *[d for d in ("cuda:7", "mps") if _device_absent(d)]]
DEVICE_OPTIONS = {
    "evaluate": [
        "--ckpt",
        "{ckpt}",
        "--data-dir",
        "{tmp}",
        "--tasks",
        "STSBenchmark",
        "--preset",
        "prototyping",
        "--no-progress",
    ],
    "geometry": ["--ckpt", "{ckpt}", "--probe", PROBE, "--output", "{tmp}/g.json"],
    "mteb": ["--model", "{ckpt}", "--tasks", "STSBenchmark", "--output-dir", "{tmp}/mteb"],
    "generate": ["reconstruct", "--ckpt", "{ckpt}", "--no-progress", "a"],
    "score": ["--ckpt", "{ckpt}", PROBE, "--samples", "2", "--no-progress", "--no-representation"],
    "explore": ["--model", "{ckpt}", "--no-progress"],
    "export": ["{ckpt}", "{tmp}/export", "--evaluate", "STSBenchmark"],
}
for _cmd, _argv in DEVICE_OPTIONS.items():
    NUMBER_OPTIONS[f"{_cmd} --device"] = (_cmd, [*_argv, "--device", "{v}"], BAD_DEVICES)
# a task list that names no task selected every MTEB task (",,,"), or the defaults ("")
NUMBER_OPTIONS["mteb --tasks"] = (
    "mteb",
    ["--model", "{ckpt}", "--output-dir", "{tmp}/mteb", "--tasks", "{v}"],
    [",,,", "", " , "],
)
CASES = [
    *[
        (f"{name} [{kind}]", cmd, argv, kind)
        for name, (cmd, argv) in FILE_OPTIONS.items()
        for kind in KINDS
    ],
    *[
        (f"{name} [{kind}]", cmd, argv, kind)
        for name, (cmd, argv) in FOLDER_OPTIONS.items()
        for kind in ("file", "fifo", "device")
    ],
    *[
        (f"{name} {v}", cmd, [a.replace("{v}", v) for a in argv], None)
        for name, (cmd, argv, values) in NUMBER_OPTIONS.items()
        for v in values
    ],
]
# Lines Lightning logs on stderr before a training command fails.
LOG_LINES = ("Seed set to", "GPU available", "TPU available", "💡", "INFO")


@pytest.fixture(scope="module")
def bad_paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    os.mkfifo(d / "fifo")
    (d / "folder").mkdir()
    os.symlink(d / "loop", d / "loop")
    (d / "file").write_text("a file\n")
    return {
        "fifo": d / "fifo",
        "folder": d / "folder",
        "symlink loop": d / "loop",
        "device": "/dev/zero",
        "file": d / "file",
    }


class _Hang(Exception):
    pass


def _alarm(*_):
    raise _Hang


def run_case(cmd: str, argv: list[str], capsys, limit: int = 60) -> tuple[object, list[str], str]:
    """`vat CMD ARGV` in-process under a timer: a FIFO blocks for ever, while a command's first
    case also imports what it needs (mteb, Lightning), which took 20 s on a loaded machine."""
    from vat.cli import command

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    try:
        try:
            code = command(cmd)(argv)
        except SystemExit as e:
            code = e.code
    except _Hang:
        code = "hang"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = _without_logging_errors(capsys.readouterr().err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith(LOG_LINES)]
    return code, lines, err


def _without_logging_errors(err: str) -> str:
    """Drop Python's "--- Logging error ---" reports: in-process runs under pytest, a
    Lightning log handler may still hold an earlier test's closed capture stream (not vat's
    output; a real `vat` process has one stderr)."""
    out, skipping = [], False
    for line in err.splitlines():
        if line.startswith("--- Logging error ---"):
            skipping = True
        elif skipping and line.startswith("Arguments:"):
            skipping = False
        elif not skipping:
            out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("name,cmd,argv,kind", CASES, ids=[c[0] for c in CASES])
def test_every_option_refuses_bad_values_in_one_line(
    name, cmd, argv, kind, bad_paths, tiny_ckpt, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bad = str(bad_paths[kind]) if kind else ""
    fill = {"{bad}": bad, "{ckpt}": str(tiny_ckpt), "{tmp}": str(tmp_path)}
    args = []
    for a in argv:
        for k, v in fill.items():
            a = a.replace(k, v)
        args.append(a)
    code, lines, err = run_case(cmd, args, capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[-2000:])
    assert "Traceback" not in err
    if kind:
        assert bad in lines[0] or os.path.basename(bad) in lines[0], lines[0]
    if kind == "symlink loop" and name.split()[1] in ("--ckpt", "--model", "CKPT"):
        assert "symbolic link loop" in lines[0], lines[0]  # not "does not exist"
    if name.split()[1] in ("--device", "--tasks"):  # the command names its own flag
        assert lines[0].startswith(f"error: {name.split()[1]}: "), lines[0]


# -- the Python API ------------------------------------------------------------------------
# Every public callable of vat.api, vat.generate, vat.features and the integrations, driven
# with the argument kinds a Python user passes by mistake (None, bytes, a list for one
# sentence, numbers out of range or of the wrong kind, devices vat cannot run on). Each case
# names the callable ("Qualified.name: what"), calls it on the tiny model `m` and gives the
# Python argument its one-line vat.errors message must name; no message names a CLI flag.
NAN, INF = float("nan"), float("inf")
NO_CUDA_7 = "cuda:7"  # refused without CUDA, and with CUDA on fewer than 8 GPUs


def _z(m, *shape):
    import torch

    return torch.zeros(*shape)


def _decoding(name):
    from vat.generate import decoding

    return getattr(decoding, name)


def _features(name):
    import vat.features

    return getattr(vat.features, name)


def _st(name):
    from vat.integrations import sentence_transformers

    return getattr(sentence_transformers, name)


def _mteb(name):
    from vat.integrations import mteb

    return getattr(mteb, name)


_EXPORTED: dict = {}  # the tiny model exported once, for transformers' AutoModel


def _auto_model(m):
    from transformers import AutoModel

    if "model" not in _EXPORTED:
        folder = m.save_pretrained(_EXPORTED["dir"])
        _EXPORTED["model"] = AutoModel.from_pretrained(str(folder))
    return _EXPORTED["model"]


API_CASES = {
    # vat.load
    "load: model None": (lambda m: _load(None), "model"),
    "load: model empty": (lambda m: _load(""), "model: is empty"),  # Path("") is "."
    # a name's control characters shown escaped (before: raw, a "one-line" error of two lines)
    "load: model with a newline": (lambda m: _load("runs/x\ny"), "runs/x\\ny"),
    "load: model with a terminal escape": (lambda m: _load("runs/\x1b[2Jx"), "runs/\\x1b[2Jx"),
    "load: model bytes": (lambda m: _load(b"runs/vat"), "model"),
    "load: model list": (lambda m: _load(["runs/vat"]), "model"),
    "load: model int": (lambda m: _load(3), "model"),
    "load: device meta": (lambda m: _load(m, device="meta"), "device"),
    "load: device xyz": (lambda m: _load(m, device="xyz"), "device"),
    "load: device cuda:7": (lambda m: _load(m, device=NO_CUDA_7), "device"),
    "load: device int": (lambda m: _load(m, device=3), "device"),
    "load: batch_size 0": (lambda m: _load(m, batch_size=0), "batch_size"),
    "load: batch_size -1": (lambda m: _load(m, batch_size=-1), "batch_size"),
    "load: batch_size 1.5": (lambda m: _load(m, batch_size=1.5), "batch_size"),
    "load: batch_size None": (lambda m: _load(m, batch_size=None), "batch_size"),
    "load: batch_size str": (lambda m: _load(m, batch_size="8"), "batch_size"),
    "load: revision int": (lambda m: _load(m, revision=1), "revision"),
    "load: cache_dir bytes": (lambda m: _load(m, cache_dir=b"x"), "cache_dir"),
    "load: token int": (lambda m: _load(m, token=3), "token"),
    # PretrainedVAT
    "PretrainedVAT.to: meta": (lambda m: m.to("meta"), "device"),
    "PretrainedVAT.to: xyz": (lambda m: m.to("xyz"), "device"),
    "PretrainedVAT.to: cuda:7": (lambda m: m.to(NO_CUDA_7), "device"),
    "PretrainedVAT.encode: sentences None": (lambda m: m.encode(None), "sentences"),
    "PretrainedVAT.encode: sentences bytes": (lambda m: m.encode(b"a b"), "sentences"),
    "PretrainedVAT.encode: sentences int": (lambda m: m.encode(3), "sentences"),
    "PretrainedVAT.encode: a None item": (lambda m: m.encode(["a", None]), "sentences"),
    "PretrainedVAT.encode: a bytes item": (lambda m: m.encode([b"a"]), "sentences"),
    "PretrainedVAT.encode: a dict": (lambda m: m.encode({"a": 1}), "sentences"),
    "PretrainedVAT.encode: a 2-D array": (
        lambda m: m.encode(np.array([["a", "b"], ["c", "d"]])),
        "sentences",
    ),
    "PretrainedVAT.encode: batch_size 0": (lambda m: m.encode(["a"], batch_size=0), "batch_size"),
    "PretrainedVAT.encode: batch_size 2.5": (
        lambda m: m.encode(["a"], batch_size=2.5),
        "batch_size",
    ),
    "PretrainedVAT.encode: batch_size nan": (
        lambda m: m.encode(["a"], batch_size=NAN),
        "batch_size",
    ),
    "PretrainedVAT.encode: unknown pooling": (
        lambda m: m.encode(["a"], pooling="nope"),
        "pooling",
    ),
    # pooling=None is the default (the model's own vectors); a non-string is refused
    "PretrainedVAT.encode: pooling int": (lambda m: m.encode(["a"], pooling=3), "pooling"),
    "PretrainedVAT.encode: features int": (lambda m: m.encode(["a"], features=3), "features"),
    "PretrainedVAT.encode: features list": (
        lambda m: m.encode(["a"], features=["mu/mean/none"]),
        "features",
    ),
    "PretrainedVAT.encode: device meta": (lambda m: m.encode(["a"], device="meta"), "device"),
    "PretrainedVAT.encode: device xyz": (lambda m: m.encode(["a"], device="xyz"), "device"),
    "PretrainedVAT.encode: device mps": (
        lambda m: m.encode(["a"], device="mps" if not _mps() else "meta"),
        "device",
    ),
    "PretrainedVAT.similarity: a None": (lambda m: m.similarity(None, [[1.0, 2.0]]), "a"),
    "PretrainedVAT.similarity: a text": (lambda m: m.similarity("a b", [[1.0, 2.0]]), "a"),
    "PretrainedVAT.similarity: widths differ": (
        lambda m: m.similarity([[1.0, 2.0]], [[1.0, 2.0, 3.0]]),
        "b",
    ),
    "PretrainedVAT.similarity: 3-D": (lambda m: m.similarity(np.zeros((2, 2, 2)), [1.0, 2.0]), "a"),
    "PretrainedVAT.feature_encoder: features int": (lambda m: m.feature_encoder(3), "features"),
    # a feature spec's own checks name `features` (before: unnamed, and "" was mu/mean/none)
    "PretrainedVAT.encode: features mistyped": (
        lambda m: m.encode(["a"], features="mu/sfi"),
        "features",
    ),
    "PretrainedVAT.encode: features empty": (lambda m: m.encode(["a"], features=""), "features"),
    "PretrainedVAT.encode: features beyond the layers": (
        lambda m: m.encode(["a"], features="layer99/mean/none"),
        "features",
    ),
    # a folder whose own spec lacks its statistics: the way out named as `features`
    # (before: "... (--features SPEC, or vat.load(...).feature_encoder('SPEC'))")
    "PretrainedVAT.encode: a folder spec without its statistics": (
        lambda m: _unfitted_folder(m).encode(["a man plays"]),
        "features",
    ),
    "PretrainedVAT.feature_encoder: features mistyped": (
        lambda m: m.feature_encoder("mu/mean/pcx"),
        "features",
    ),
    "PretrainedVAT.save_pretrained: directory None": (
        lambda m: m.save_pretrained(None),
        "directory",
    ),
    "PretrainedVAT.save_pretrained: directory empty": (
        lambda m: m.save_pretrained(""),
        "directory",
    ),
    "PretrainedVAT.save_pretrained: directory bytes": (
        lambda m: m.save_pretrained(b"out"),
        "directory",
    ),
    "PretrainedVAT.save_pretrained: evaluate ,,,": (
        lambda m: m.save_pretrained("/nonexistent/out", evaluate=",,,"),
        "evaluate",
    ),
    "PretrainedVAT.save_pretrained: evaluate int item": (
        lambda m: m.save_pretrained("/nonexistent/out", evaluate=[3]),
        "evaluate",
    ),
    "PretrainedVAT.save_pretrained: license int": (
        lambda m: m.save_pretrained("/nonexistent/out", license=3),
        "license",
    ),
    "PretrainedVAT.save_pretrained: features int": (
        lambda m: m.save_pretrained("/nonexistent/out", features=3),
        "features",
    ),
    "PretrainedVAT.save_pretrained: features mistyped": (
        lambda m: m.save_pretrained("/nonexistent/out", features="mu/sfi"),
        "features",
    ),
    # before: "data dir ... does not exist (...; set --data-dir or VAT_SENTEVAL_DIR; ...)",
    # after the features were fitted
    "PretrainedVAT.save_pretrained: data_dir missing": (
        lambda m: m.save_pretrained(
            _EXPORTED["dir"].parent / "none", evaluate="STS12", data_dir="/nonexistent/senteval"
        ),  # fmt: skip
        "SentEval data folder /nonexistent/senteval does not exist",
    ),
    "PretrainedVAT.save_pretrained: data_dir int": (
        lambda m: m.save_pretrained("/nonexistent/out", data_dir=3),
        "data_dir",
    ),
    "PretrainedVAT.push_to_hub: repo_id None": (lambda m: m.push_to_hub(None), "repo_id"),
    "PretrainedVAT.push_to_hub: repo_id empty": (lambda m: m.push_to_hub(""), "repo_id"),
    "PretrainedVAT.push_to_hub: commit_message None": (
        lambda m: m.push_to_hub("me/x", commit_message=None),
        "commit_message",
    ),
    "PretrainedVAT.score: sentences None": (lambda m: m.score(None), "sentences"),
    "PretrainedVAT.score: a bytes item": (lambda m: m.score([b"a b"]), "sentences"),
    "PretrainedVAT.score: samples 0": (lambda m: m.score(["a b"], samples=0), "samples"),
    "PretrainedVAT.score: samples 2.5": (lambda m: m.score(["a b"], samples=2.5), "samples"),
    "PretrainedVAT.score: batch_size -1": (
        lambda m: m.score(["a b"], batch_size=-1),
        "batch_size",
    ),
    "PretrainedVAT.score: seed 1.5": (lambda m: m.score(["a b"], seed=1.5), "seed"),
    "PretrainedVAT.score: sts_pairs int": (lambda m: m.score(["a b"], sts_pairs=3), "sts_pairs"),
    "PretrainedVAT.score: data_dir empty": (lambda m: m.score(["a b"], data_dir=""), "data_dir"),
    "PretrainedVAT.reconstruct: sentences None": (lambda m: m.reconstruct(None), "sentences"),
    "PretrainedVAT.reconstruct: sentences bytes": (
        lambda m: m.reconstruct(b"a man"),
        "sentences",
    ),
    "PretrainedVAT.reconstruct: an int item": (lambda m: m.reconstruct(["a", 3]), "sentences"),
    "PretrainedVAT.reconstruct: beam 2.5": (lambda m: m.reconstruct(["a"], beam=2.5), "beam"),
    "PretrainedVAT.reconstruct: beam 0": (lambda m: m.reconstruct(["a"], beam=0), "beam"),
    "PretrainedVAT.reconstruct: beam -1": (lambda m: m.reconstruct(["a"], beam=-1), "beam"),
    "PretrainedVAT.reconstruct: beam nan": (lambda m: m.reconstruct(["a"], beam=NAN), "beam"),
    "PretrainedVAT.reconstruct: beam str": (lambda m: m.reconstruct(["a"], beam="2"), "beam"),
    "PretrainedVAT.reconstruct: beam huge": (lambda m: m.reconstruct(["a"], beam=10**6), "beam"),
    "PretrainedVAT.reconstruct: beam_size": (
        lambda m: m.reconstruct(["a"], strategy="beam", beam_size=2),
        "beam_size",
    ),
    "PretrainedVAT.reconstruct: unknown option": (
        lambda m: m.reconstruct(["a"], beams=2),
        "unknown decoding option",
    ),
    "PretrainedVAT.reconstruct: strategy None": (
        lambda m: m.reconstruct(["a"], strategy=None),
        "strategy",
    ),
    "PretrainedVAT.reconstruct: strategy nope": (
        lambda m: m.reconstruct(["a"], strategy="nope"),
        "strategy",
    ),
    "PretrainedVAT.reconstruct: temperature 0": (
        lambda m: m.reconstruct(["a"], strategy="sample", temperature=0),
        "temperature",
    ),
    "PretrainedVAT.reconstruct: temperature inf": (
        lambda m: m.reconstruct(["a"], strategy="sample", temperature=INF),
        "temperature",
    ),
    "PretrainedVAT.reconstruct: temperature str": (
        lambda m: m.reconstruct(["a"], strategy="sample", temperature="1"),
        "temperature",
    ),
    "PretrainedVAT.reconstruct: top_k -1": (lambda m: m.reconstruct(["a"], top_k=-1), "top_k"),
    "PretrainedVAT.reconstruct: top_k 2.5": (lambda m: m.reconstruct(["a"], top_k=2.5), "top_k"),
    "PretrainedVAT.reconstruct: top_p 0": (lambda m: m.reconstruct(["a"], top_p=0), "top_p"),
    "PretrainedVAT.reconstruct: top_p 1.5": (lambda m: m.reconstruct(["a"], top_p=1.5), "top_p"),
    "PretrainedVAT.reconstruct: top_p nan": (lambda m: m.reconstruct(["a"], top_p=NAN), "top_p"),
    "PretrainedVAT.reconstruct: max_len 0": (
        lambda m: m.reconstruct(["a"], max_len=0),
        "max_len",
    ),
    "PretrainedVAT.reconstruct: max_len 2.5": (
        lambda m: m.reconstruct(["a"], max_len=2.5),
        "max_len",
    ),
    "PretrainedVAT.reconstruct: max_len beyond the model": (
        lambda m: m.reconstruct(["a"], max_len=10**6),
        "max_len",
    ),
    "PretrainedVAT.reconstruct: min_len -1": (
        lambda m: m.reconstruct(["a"], min_len=-1),
        "min_len",
    ),
    "PretrainedVAT.reconstruct: length_penalty nan": (
        lambda m: m.reconstruct(["a"], beam=2, length_penalty=NAN),
        "length_penalty",
    ),
    "PretrainedVAT.reconstruct: min_len beyond max_len": (
        lambda m: m.reconstruct(["a"], min_len=9, max_len=3),  # before: every output cut
        "min_len",
    ),
    "PretrainedVAT.reconstruct: use_cache str": (
        lambda m: m.reconstruct(["a"], use_cache="no"),
        "use_cache",
    ),
    "PretrainedVAT.sample: sentences None": (lambda m: m.sample(None), "sentences"),
    "PretrainedVAT.sample: tau nan": (lambda m: m.sample(["a b"], tau=NAN), "tau"),
    "PretrainedVAT.sample: tau -1": (lambda m: m.sample(["a b"], tau=-1.0), "tau"),
    "PretrainedVAT.sample: tau inf": (lambda m: m.sample(["a b"], tau=INF), "tau"),
    "PretrainedVAT.sample: tau str": (lambda m: m.sample(["a b"], tau="1"), "tau"),
    "PretrainedVAT.sample: num_samples 0": (
        lambda m: m.sample(["a b"], num_samples=0),
        "num_samples",
    ),
    "PretrainedVAT.sample: num_samples -1": (
        lambda m: m.sample(["a b"], num_samples=-1),
        "num_samples",
    ),
    "PretrainedVAT.sample: num_samples huge": (
        lambda m: m.sample(["a b"], num_samples=10**12),
        "would need",
    ),
    "PretrainedVAT.sample: num_samples float": (
        lambda m: m.sample(["a b"], num_samples=2.5),
        "num_samples",
    ),
    "PretrainedVAT.sample: num_samples None": (
        lambda m: m.sample(["a b"], num_samples=None),
        "num_samples",
    ),
    "PretrainedVAT.sample: seed -1": (lambda m: m.sample(["a b"], seed=-1), "seed"),
    "PretrainedVAT.sample: seed 2.5": (lambda m: m.sample(["a b"], seed=2.5), "seed"),
    "PretrainedVAT.sample: temperature nan": (
        lambda m: m.sample(["a"], strategy="sample", temperature=NAN),
        "temperature",
    ),
    "PretrainedVAT.resample_token: positions None": (
        lambda m: m.resample_token(["a b"], None),
        "positions",
    ),
    "PretrainedVAT.resample_token: positions str": (
        lambda m: m.resample_token(["a b"], "1"),
        "positions",
    ),
    "PretrainedVAT.resample_token: positions empty": (
        lambda m: m.resample_token(["a b"], []),
        "positions",
    ),
    "PretrainedVAT.resample_token: position 1.5": (
        lambda m: m.resample_token(["a b"], [1.5]),
        "positions",
    ),
    "PretrainedVAT.resample_token: position -1": (
        lambda m: m.resample_token(["a b"], [-1]),
        "positions",
    ),
    "PretrainedVAT.resample_token: position beyond": (
        lambda m: m.resample_token(["a b"], [1000]),
        "positions",
    ),
    "PretrainedVAT.resample_token: source None": (
        lambda m: m.resample_token(["a b"], [0], source=None),
        "source",
    ),
    "PretrainedVAT.resample_token: sentences bytes": (
        lambda m: m.resample_token(b"a b", [0]),
        "sentences",
    ),
    "PretrainedVAT.interpolate: a None": (lambda m: m.interpolate(None, "b"), "a"),
    "PretrainedVAT.interpolate: a list": (lambda m: m.interpolate(["a"], "b"), "a"),
    "PretrainedVAT.interpolate: b bytes": (lambda m: m.interpolate("a", b"b"), "b"),
    "PretrainedVAT.interpolate: alpha nan": (
        lambda m: m.interpolate("a", "b", alphas=[0.0, NAN]),
        "alphas",
    ),
    "PretrainedVAT.interpolate: alpha inf": (
        lambda m: m.interpolate("a", "b", alphas=[INF]),
        "alphas",
    ),
    "PretrainedVAT.interpolate: alphas None": (
        lambda m: m.interpolate("a", "b", alphas=None),
        "alphas",
    ),
    "PretrainedVAT.interpolate: alphas str": (
        lambda m: m.interpolate("a", "b", alphas="0.5"),
        "alphas",
    ),
    "PretrainedVAT.interpolate: alphas empty": (
        lambda m: m.interpolate("a", "b", alphas=[]),
        "alphas",
    ),
    "PretrainedVAT.interpolate: method nope": (
        lambda m: m.interpolate("a", "b", method="nope"),
        "method",
    ),
    "PretrainedVAT.prior: prior_std nan": (lambda m: m.prior(2, prior_std=NAN), "prior_std"),
    "PretrainedVAT.prior: prior_std 0": (lambda m: m.prior(2, prior_std=0.0), "prior_std"),
    "PretrainedVAT.prior: prior_std str": (lambda m: m.prior(2, prior_std="1"), "prior_std"),
    "PretrainedVAT.prior: num_samples huge": (lambda m: m.prior(10**12), "would need"),
    "PretrainedVAT.prior: num_samples 0": (lambda m: m.prior(0), "num_samples"),
    "PretrainedVAT.prior: num_samples 2.5": (lambda m: m.prior(2.5), "num_samples"),
    "PretrainedVAT.prior: num_samples None": (lambda m: m.prior(None), "num_samples"),
    "PretrainedVAT.prior: length 0": (lambda m: m.prior(2, length=0), "length"),
    "PretrainedVAT.prior: length 2.5": (lambda m: m.prior(2, length=2.5), "length"),
    "PretrainedVAT.prior: length beyond": (lambda m: m.prior(2, length=10**5), "length"),
    "PretrainedVAT.prior: seed -1": (lambda m: m.prior(2, seed=-1), "seed"),
    # models that ship with vat
    "add_pretrained: a path": (lambda m: _shipping("add_pretrained")("runs/x", "x"), "model"),
    "add_pretrained: name None": (lambda m: _shipping("add_pretrained")(m, None), "name"),
    "add_pretrained: summary int": (
        lambda m: _shipping("add_pretrained")(m, "x", summary=3),
        "summary",
    ),
    "add_pretrained: good_for int": (
        lambda m: _shipping("add_pretrained")(m, "x", good_for=3),
        "good_for",
    ),
    "add_pretrained: check_sentences bytes": (
        lambda m: _shipping("add_pretrained")(m, "x", check_sentences=b"a"),
        "check_sentences",
    ),
    "add_pretrained: registry int": (
        lambda m: _shipping("add_pretrained")(m, "x", registry=3),
        "registry",
    ),
    "precision_match: a path": (
        lambda m: _shipping("precision_match")("runs/x", "float16", ["a"], "o"),
        "model",
    ),
    "precision_match: dtype": (
        lambda m: _shipping("precision_match")(m.loaded, "float64", ["a"], "o"),
        "dtype",
    ),
    "precision_match: sentences None": (
        lambda m: _shipping("precision_match")(m.loaded, "float16", None, "o"),
        "sentences",
    ),
    "precision_match: origin int": (
        lambda m: _shipping("precision_match")(m.loaded, "float16", ["a"], 3),
        "origin",
    ),
    "require_loaded: a path": (lambda m: _api("require_loaded")("runs/x", "f"), "model"),
    "check_export: evaluate empty": (
        lambda m: _api("check_export")("/nonexistent/out", evaluate=""),
        "evaluate",
    ),
    # vat.generate
    "VATGenerator: batch_size 0": (
        lambda m: _gen_class()(m.model, m.tokenizer, batch_size=0),
        "batch_size",
    ),
    "VATGenerator: prior_std nan": (
        lambda m: _gen_class()(m.model, m.tokenizer, prior_std=NAN),
        "prior_std",
    ),
    "VATGenerator.from_loaded: a path": (lambda m: _gen_class().from_loaded("runs/x"), "model"),
    "VATGenerator.from_loaded: batch_size 1.5": (
        lambda m: _gen_class().from_loaded(m.loaded, batch_size=1.5),
        "batch_size",
    ),
    "VATGenerator.tokenize: sentences None": (lambda m: m.generator.tokenize(None), "sentences"),
    "VATGenerator.tokenize: labels too few": (
        lambda m: m.generator.tokenize(["a", "b"], labels=["line 1"]),
        "labels",
    ),
    "VATGenerator.posteriors: sentences bytes": (
        lambda m: m.generator.posteriors(b"a"),
        "sentences",
    ),
    "VATGenerator.latents: sentences None": (lambda m: m.generator.latents(None), "sentences"),
    "VATGenerator.decode: options str": (
        lambda m: m.generator.decode([_z(m, 2, 32)], "greedy"),
        "options",
    ),
    "VATGenerator.decode: a 1-D latent": (lambda m: m.generator.decode([_z(m, 32)]), "zs"),
    "VATGenerator.decode: seed -1": (lambda m: m.generator.decode([_z(m, 2, 32)], seed=-1), "seed"),
    "VATGenerator.text: None": (lambda m: m.generator.text(None), "hyp"),
    "VATGenerator.reconstruct_hypotheses: sentences None": (
        lambda m: m.generator.reconstruct_hypotheses(None),
        "sentences",
    ),
    "VATGenerator.reconstruct: sentences int": (
        lambda m: m.generator.reconstruct(5),
        "sentences",
    ),
    "VATGenerator.sample: source nope": (
        lambda m: m.generator.sample(["a"], source="nope"),
        "source",
    ),
    "VATGenerator.resample_token: positions float": (
        lambda m: m.generator.resample_token(["a"], 0.5),
        "positions",
    ),
    "VATGenerator.interpolate: alphas nan": (
        lambda m: m.generator.interpolate("a", "b", [NAN]),
        "alphas",
    ),
    "VATGenerator.prior: length str": (lambda m: m.generator.prior(2, "3"), "length"),
    "VATGenerator.score: sentences None": (lambda m: m.generator.score(None), "sentences"),
    "DecodeOptions: beam_size 2.5": (lambda m: _decoding("DecodeOptions")(beam_size=2.5), "beam"),
    "DecodeOptions: min_len beyond max_len": (
        lambda m: _generate("DecodeOptions")(min_len=9, max_len=3),
        "min_len",
    ),
    "DecodeOptions: strategy None": (
        lambda m: _decoding("DecodeOptions")(strategy=None),
        "strategy",
    ),
    "corpus_bleu: references too few": (
        lambda m: _generate("corpus_bleu")(["a", "b"], ["a"]),
        "references",
    ),
    "corpus_bleu: hypotheses None": (
        lambda m: _generate("corpus_bleu")(None, ["a"]),
        "hypotheses",
    ),
    "reconstruction_score: references None": (
        lambda m: _generate("reconstruction_score")(["a"], None),
        "references",
    ),
    "greedy_decode: a 2-D z": (
        lambda m: _decoding("greedy_decode")(m.model, _z(m, 2, 32), _z(m, 2).bool()),
        "z",
    ),
    "greedy_decode: max_len 2.5": (
        lambda m: _decoding("greedy_decode")(m.model, _z(m, 1, 2, 32), _z(m, 1, 2).bool(), 2.5),
        "max_len",
    ),
    "sample_decode: temperature nan": (
        lambda m: _decoding("sample_decode")(
            m.model, _z(m, 1, 2, 32), _z(m, 1, 2).bool(), temperature=NAN
        ),
        "temperature",
    ),
    "beam_search: beam_size 0": (
        lambda m: _decoding("beam_search")(m.model, _z(m, 1, 2, 32), _z(m, 1, 2).bool(), 0),
        "beam",
    ),
    "beam_search: a mask of the wrong shape": (
        lambda m: _decoding("beam_search")(m.model, _z(m, 1, 2, 32), _z(m, 3).bool(), 2),
        "z_mask",
    ),
    "decode_latents: options str": (
        lambda m: _decoding("decode_latents")(m.model, _z(m, 1, 2, 32), _z(m, 1, 2).bool(), "beam"),
        "options",
    ),
    "filter_logits: top_p nan": (
        lambda m: _decoding("filter_logits")(_z(m, 1, 8), top_p=NAN),
        "top_p",
    ),
    "filter_logits: top_k -1": (
        lambda m: _decoding("filter_logits")(_z(m, 1, 8), top_k=-1),
        "top_k",
    ),
    # vat.features
    "sentence_features: sentences None": (
        lambda m: _features("sentence_features")(m.model, m.tokenizer, None),
        "sentences",
    ),
    "sentence_features: pooling nope": (
        lambda m: _features("sentence_features")(m.model, m.tokenizer, ["a"], "nope"),
        "pooling",
    ),
    "sentence_features: batch_size 0": (
        lambda m: _features("sentence_features")(m.model, m.tokenizer, ["a"], "mean", 0),
        "batch_size",
    ),
    "pool: pooling nope": (
        lambda m: _features("pool")(_z(m, 1, 2, 4), _z(m, 1).long(), "nope"),
        "pooling",
    ),
    "iter_encoded: sentences bytes": (
        lambda m: list(_features("iter_encoded")(m.model, m.tokenizer, b"a")),
        "sentences",
    ),
    "iter_encoded_ids: batch_size 0": (
        lambda m: list(_features("iter_encoded_ids")(m.model, [[5]], 0)),
        "batch_size",
    ),
    "length_sorted_batches: size 0": (
        lambda m: list(_features("length_sorted_batches")([1, 2], 0)),
        "batch_size",
    ),
    "token_posteriors: sentences None": (
        lambda m: _features("token_posteriors")(m.model, m.tokenizer, None),
        "sentences",
    ),
    "token_vectors: an int item": (
        lambda m: _features("token_vectors")(m.model, m.tokenizer, ["a", 1]),
        "sentences",
    ),
    # the integrations
    "to_sentence_transformer: a path": (
        lambda m: _st("to_sentence_transformer")("runs/x"),
        "model",
    ),
    "to_sentence_transformer: pooling nope": (
        lambda m: _st("to_sentence_transformer")(m, pooling="nope"),
        "pooling",
    ),
    "to_sentence_transformer: device meta": (
        lambda m: _st("to_sentence_transformer")(m, device="meta"),
        "device",
    ),
    "to_sentence_transformer: features int": (
        lambda m: _st("to_sentence_transformer")(m, features=3),
        "features",
    ),
    "VATSentenceEncoder: a path": (lambda m: _st("VATSentenceEncoder")("runs/x"), "model"),
    "VATSentenceEncoder: pooling int": (
        lambda m: _st("VATSentenceEncoder")(m.loaded, pooling=3),
        "pooling",
    ),
    "VATSentenceEncoder.preprocess: inputs None": (
        lambda m: _st("VATSentenceEncoder")(m.loaded).preprocess(None),
        "inputs",
    ),
    "VATMTEBEncoder: batch_size 0": (
        lambda m: _mteb("VATMTEBEncoder")("x", model=m, batch_size=0),
        "batch_size",
    ),
    "VATMTEBEncoder: pooling nope": (
        lambda m: _mteb("VATMTEBEncoder")("x", model=m, pooling="nope"),
        "pooling",
    ),
    "VATMTEBEncoder: device meta": (
        lambda m: _mteb("VATMTEBEncoder")(str(m.loaded.source.location), device="meta"),
        "device",
    ),
    "VATMTEBEncoder: model_name empty": (lambda m: _mteb("VATMTEBEncoder")(""), "model"),
    "VATMTEBEncoder: model a path": (
        lambda m: _mteb("VATMTEBEncoder")("x", model="runs/x"),
        "model",
    ),
    "model_meta: a path": (lambda m: _mteb("model_meta")("runs/x"), "model"),
    "model_meta: name int": (lambda m: _mteb("model_meta")(m, name=3), "name"),
    "register_model: a path": (lambda m: _mteb("register_model")("runs/x"), "model"),
    "select_tasks: ,,,": (lambda m: _mteb("select_tasks")(",,,"), "tasks"),
    "select_tasks: empty": (lambda m: _mteb("select_tasks")(""), "tasks"),
    "select_tasks: empty list": (lambda m: _mteb("select_tasks")([]), "tasks"),
    "select_tasks: an empty name": (lambda m: _mteb("select_tasks")(["STS12", " "]), "tasks"),
    "select_tasks: unknown": (lambda m: _mteb("select_tasks")("NoSuchTask"), "tasks"),
    "select_tasks: bytes": (lambda m: _mteb("select_tasks")(b"STS12"), "tasks"),
    "evaluate: output_dir empty": (lambda m: _mteb("evaluate")(None, ["STS12"], ""), "output_dir"),
    "check_no_links: output_dir empty": (lambda m: _mteb("check_no_links")(""), "output_dir"),
    "check_no_links: output_dir int": (lambda m: _mteb("check_no_links")(3), "output_dir"),
    "evaluate: unknown task": (lambda m: _mteb("evaluate")(None, "NoSuchTask", "out"), "tasks"),
    "hub_unreachable: timeout 0": (lambda m: _mteb("hub_unreachable")(0), "timeout"),
    "hub_unreachable: timeout str": (lambda m: _mteb("hub_unreachable")("3"), "timeout"),
    "VATTransformersModel.from_pretrained: empty": (
        lambda m: type(_auto_model(m)).from_pretrained(""),
        "pretrained_model_name_or_path",
    ),
    "VATTransformersModel.encode: sentences None": (
        lambda m: _auto_model(m).encode(None),
        "sentences",
    ),
    "VATTransformersModel.encode: pooling nope": (
        lambda m: _auto_model(m).encode(["a"], pooling="nope"),
        "pooling",
    ),
    # vat.eval's Python API (docs/evaluate.md "From Python", docs/geometry.md): before, its
    # messages named --pooling, --hf-model, --layer, --preset and --data-dir, or were a
    # KeyError, ValueError or TypeError from inside
    "vat_encoder: pooling nope": (
        lambda m: _eval("encoders.vat_encoder")(m.loaded, "nope"),
        "pooling",
    ),
    "vat_encoder: batch_size 0": (
        lambda m: _eval("encoders.vat_encoder")(m.loaded, "mean", batch_size=0),
        "batch_size",
    ),
    "senteval_batcher: pooling nope": (
        lambda m: _eval("encoders.senteval_batcher")(m.loaded, "nope"),
        "pooling",
    ),
    "hf_encoder: pooling nope": (
        lambda m: _eval("encoders.hf_encoder")("/nonexistent/hf", pooling="nope"),
        "pooling",
    ),
    "hf_encoder: model_dir missing": (
        lambda m: _eval("encoders.hf_encoder")("/nonexistent/hf"),
        "model_dir",
    ),
    "hf_sentence_features: model_dir missing": (
        lambda m: _eval("hf_encoders.hf_sentence_features")("/nonexistent/hf", ["a"]),
        "model_dir",
    ),
    "hf_sentence_features: sentences None": (
        lambda m: _eval("hf_encoders.hf_sentence_features")("/nonexistent/hf", None),
        "sentences",
    ),
    "hf_token_vectors: model_dir empty": (
        lambda m: _eval("hf_encoders.hf_token_vectors")("", ["a"]),
        "model_dir",
    ),
    "EvalSettings: preset nope": (lambda m: _eval("engine.EvalSettings")(preset="nope"), "preset"),
    "EvalSettings: classifier nope": (
        lambda m: _eval("engine.EvalSettings")(classifier="nope"),
        "classifier",
    ),
    "EvalSettings: relatedness nope": (
        lambda m: _eval("engine.EvalSettings")(relatedness="nope"),
        "relatedness",
    ),
    "EvalSettings: batch_size 0": (
        lambda m: _eval("engine.EvalSettings")(batch_size=0),
        "batch_size",
    ),
    "EvalSettings: mlp nhid 0": (
        lambda m: _eval("engine.EvalSettings")(classifier="mlp", nhid=0),
        "nhid",
    ),
    # before: "--pooling must be one of ... for fine-tuning", after the model was copied
    "FinetuneSettings: pooling nope": (
        lambda m: _eval("finetune.FinetuneSettings")(pooling="nope"),
        "pooling",
    ),
    "FinetuneSettings: epochs 0": (
        lambda m: _eval("finetune.FinetuneSettings")(epochs=0),
        "epochs",
    ),
    "FinetuneSettings: lr nan": (lambda m: _eval("finetune.FinetuneSettings")(lr=NAN), "lr"),
    "vat.eval evaluate: tasks unknown": (lambda m: _evaluate(m, tasks="STS99"), "tasks"),
    "vat.eval evaluate: tasks int": (lambda m: _evaluate(m, tasks=3), "tasks"),
    "vat.eval evaluate: tasks empty": (lambda m: _evaluate(m, tasks=""), "tasks"),
    "vat.eval evaluate: data_dir None": (lambda m: _evaluate(m, data_dir=None), "data_dir"),
    "vat.eval evaluate: data_dir missing": (
        lambda m: _evaluate(m, data_dir="/nonexistent/senteval"),
        "SentEval data folder /nonexistent/senteval does not exist",
    ),
    "vat.eval evaluate: encoder None": (lambda m: _evaluate(m, encoder=None), "encoder"),
    "vat.eval evaluate: settings dict": (lambda m: _evaluate(m, settings={}), "settings"),
}


def _eval(name):
    """A callable of vat.eval by its module-relative name ("engine.EvalSettings")."""
    import importlib

    module, attr = name.rsplit(".", 1)
    return getattr(importlib.import_module(f"vat.eval.{module}"), attr)


def _evaluate(m, **kw):
    """vat.eval.engine.evaluate with good arguments but those in `kw`."""
    args = {
        "encoder": lambda s: np.zeros((len(s), 2)),
        "tasks": "STS12",
        "data_dir": str(ASSETS),
        "settings": None,
    }
    return _eval("engine.evaluate")(**{**args, **kw})


def _unfitted_folder(m):
    """A folder exported from `m` whose sentence_vat_config.json was changed afterwards to a
    spec it holds no statistics for, loaded."""
    import json

    import vat

    folder = _EXPORTED["dir"].parent / "unfitted"
    if not folder.exists():
        m.save_pretrained(folder)
        settings = {"pooling": "mean", "features": "mu/mean/whiten2"}
        (folder / "sentence_vat_config.json").write_text(json.dumps(settings))
    return vat.load(folder, device="cpu")


def _load(model, **kw):
    import vat

    return vat.load(str(model.loaded.source.location) if hasattr(model, "loaded") else model, **kw)


def _api(name):
    import vat.api

    return getattr(vat.api, name)


def _shipping(name):
    from helpers import add_pretrained_script

    return getattr(add_pretrained_script(), name)


def _generate(name):
    import vat.generate

    return getattr(vat.generate, name)


def _gen_class():
    from vat.generate import VATGenerator

    return VATGenerator


def _mps() -> bool:
    import torch

    return torch.backends.mps.is_available()


# Public callables that take no argument a user could get wrong.
NO_ARGUMENTS = {
    "list_pretrained",  # vat.share.pretrained
    "english_sts_tasks",
    "register",  # transformers_auto: registers the Auto classes
    "install",  # transformers_auto: called by `import vat`
}


def public_callables() -> set[str]:
    """Every public function and method of vat.api, the maintainer's
    scripts/add_pretrained.py, vat.generate (its exports and the decoding functions),
    vat.features, the integrations and vat.eval's documented entry points, as the audit table
    names them."""
    import inspect

    import vat.api
    import vat.features
    import vat.generate
    from vat.eval import encoders, hf_encoders
    from vat.generate import decoding
    from vat.integrations import mteb, sentence_transformers, transformers_auto

    names: set[str] = set()

    def functions(module, only=None):
        for name, obj in vars(module).items():
            if name.startswith("_") or (only is not None and name not in only):
                continue
            if inspect.isfunction(obj) and obj.__module__ == module.__name__:
                names.add(name)

    def methods(cls, label=None):
        names.add(label or cls.__name__)  # the constructor
        for name, obj in vars(cls).items():
            if not name.startswith("_") and isinstance(obj, staticmethod | classmethod):
                names.add(f"{label or cls.__name__}.{name}")
            elif not name.startswith("_") and inspect.isfunction(obj):
                names.add(f"{label or cls.__name__}.{name}")

    functions(vat.api)
    from helpers import add_pretrained_script

    functions(add_pretrained_script(), only={"add_pretrained", "precision_match"})
    methods(vat.api.PretrainedVAT)
    names.discard("PretrainedVAT")  # made by vat.load
    names.add("load")
    for name in vat.generate.__all__:
        obj = getattr(vat.generate, name)
        if name == "VATGenerator":
            methods(obj)
        elif name in ("DecodeOptions",) or inspect.isfunction(obj):
            names.add(name)
    functions(decoding)
    for name in vat.features.__all__:
        if inspect.isfunction(getattr(vat.features, name)):
            names.add(name)
    functions(sentence_transformers)
    methods(sentence_transformers.VATSentenceEncoder)
    for name in ("forward", "save", "load", "get_embedding_dimension"):  # sentence-transformers'
        names.discard(f"VATSentenceEncoder.{name}")  # own calls, with its own arguments
    names.discard("VATSentenceEncoder.get_sentence_embedding_dimension")
    functions(mteb)
    names.add("VATMTEBEncoder")  # its encode takes mteb's DataLoader, from mteb
    functions(transformers_auto)
    names |= {"VATTransformersModel.from_pretrained", "VATTransformersModel.encode"}
    # vat.eval's documented Python API (docs/evaluate.md, docs/geometry.md)
    functions(encoders, only={"vat_encoder", "hf_encoder", "senteval_batcher"})
    functions(hf_encoders, only={"hf_token_vectors", "hf_sentence_features"})
    names |= {"EvalSettings", "FinetuneSettings", "vat.eval evaluate"}  # apart from mteb's
    return names


def test_the_api_audit_covers_every_public_callable():
    covered = {case.split(":")[0] for case in API_CASES}
    missing = sorted(public_callables() - covered - NO_ARGUMENTS)
    assert not missing, f"public callables without a bad-argument case: {missing}"


@pytest.fixture(scope="module")
def api_model(tiny_ckpt, tmp_path_factory):
    import vat

    _EXPORTED.clear()
    _EXPORTED["dir"] = tmp_path_factory.mktemp("api-export") / "model"
    return vat.load(str(tiny_ckpt))


@pytest.mark.parametrize("case", API_CASES)
def test_the_api_refuses_bad_arguments_like_the_cli(api_model, case, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    call, needle = API_CASES[case]
    with pytest.raises(VatError) as e:
        call(api_model)
    message = str(e.value)
    assert needle in message and message.isprintable(), message  # one line, no escapes
    assert "--" not in message, f"an API message names a CLI flag: {message}"
    if needle.isidentifier():  # named as the argument: the CLI shows its flag from the name
        assert isinstance(e.value, OptionError) and e.value.name == needle, message
    assert api_model.device.type == "cpu"  # a refused device leaves the model where it was


@pytest.mark.parametrize("kind", KINDS)
def test_vat_load_refuses_paths_of_the_wrong_kind(bad_paths, kind):
    import vat

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        with pytest.raises(VatError) as e:
            vat.load(str(bad_paths[kind]))
    finally:
        signal.alarm(0)
    assert "\n" not in str(e.value)
    if kind == "symlink loop":
        assert "symbolic link loop" in str(e.value), str(e.value)


@pytest.mark.slow
def test_a_fifo_never_hangs_a_real_vat_process(bad_paths):
    """`python -m vat sweep -c FIFO` in a process of its own: it ends, exit 2, one line."""
    r = subprocess.run(
        [vat_python(), "-m", "vat", "sweep", "-c", str(bad_paths["fifo"])],
        capture_output=True,
        text=True,
        timeout=120,
        env=train_env(),
    )
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(LOG_LINES)]
    assert r.returncode == 2 and len(lines) == 1 and "named pipe (FIFO)" in lines[0], r.stderr


def test_a_fifo_input_never_hangs_generate_nor_keeps_its_process(bad_paths, tiny_ckpt, capsys):
    """`vat generate --input FIFO` (in-process, under the table's timer): exit 2, one line
    naming the pipe, and no thread left behind that would keep a `vat` process from ending.
    (Until vat checks --input before it loads the model, a process of its own would spend its
    time importing torch and loading the model; tests/test_generate_cli.py runs one.)"""
    import threading

    before = {t for t in threading.enumerate() if not t.daemon}
    argv = ["reconstruct", "--ckpt", str(tiny_ckpt), "--input", str(bad_paths["fifo"])]
    code, lines, err = run_case("generate", argv, capsys)
    assert code == 2 and len(lines) == 1 and "named pipe (FIFO)" in lines[0], err
    assert {t for t in threading.enumerate() if not t.daemon} <= before
