"""The audit of issue 20, section 3, as a table: every subcommand (train, evaluate, geometry,
generate *, sweep, export, mteb, config) and the Python API, driven with generated bad values
per option. Each case must end in exit code 2 with one `error:` line on stderr naming the
option, no traceback, and no hang (a timer aborts a case that runs past its limit).

Kind: every option that names a file gets a named pipe (FIFO), a folder, a symlink loop and
a device (/dev/zero); a folder option gets a file. Range: counts get 0 and -1, scales get
negative, zero (where zero is meaningless), NaN and inf, and the sizes that would allocate
get a request far beyond the machine (refused before allocating, with the bytes it would
need). The CLI runs in-process (no interpreter start-up per case); two cases run `vat` in a
subprocess, where a FIFO would really block.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import ASSETS, ROOT

from vat.errors import VatError

KINDS = ("fifo", "folder", "symlink loop", "device")
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
    "mteb --output": (
        "mteb",
        ["--model", "{ckpt}", "--output", "{bad}", "--tasks", "STSBenchmark"],
    ),
    "export DIR": ("export", ["{ckpt}", "{bad}"]),
    "evaluate --data-dir": ("evaluate", ["--ckpt", "{ckpt}", "--data-dir", "{bad}", *EVAL]),
    "geometry --senteval-dir": (
        "geometry",
        ["--ckpt", "{ckpt}", "--senteval-dir", "{bad}", "--output", "{tmp}/g.json"],
    ),
    "sweep --output": ("sweep", ["-c", SWEEP, "--output", "{bad}"]),
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


def run_case(cmd: str, argv: list[str], capsys, limit: int = 20) -> tuple[object, list[str], str]:
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


# -- the Python API ------------------------------------------------------------------------
API_CASES = {
    "sample tau nan": (lambda m: m.sample(["a b"], tau=float("nan")), "tau"),
    "sample tau -1": (lambda m: m.sample(["a b"], tau=-1.0), "tau"),
    "sample num_samples 0": (lambda m: m.sample(["a b"], num_samples=0), "num_samples"),
    "sample num_samples huge": (lambda m: m.sample(["a b"], num_samples=10**12), "would need"),
    "sample num_samples float": (lambda m: m.sample(["a b"], num_samples=2.5), "num_samples"),
    "sample temperature nan": (
        lambda m: m.sample(["a"], strategy="sample", temperature=float("nan")),
        "temperature",
    ),
    "prior prior_std nan": (lambda m: m.prior(2, prior_std=float("nan")), "prior_std"),
    "prior prior_std 0": (lambda m: m.prior(2, prior_std=0.0), "prior_std"),
    "prior num_samples huge": (lambda m: m.prior(10**12), "would need"),
    "prior length 0": (lambda m: m.prior(2, length=0), "length"),
    "interpolate alpha nan": (
        lambda m: m.interpolate("a", "b", alphas=[0.0, float("nan")]),
        "--alphas",
    ),
    "reconstruct beam huge": (
        lambda m: m.reconstruct(["a"], strategy="beam", beam_size=10**6),
        "--beam",
    ),
    "reconstruct unknown option": (
        lambda m: m.reconstruct(["a"], beams=2),
        "unknown decoding option",
    ),
    "encode batch_size 0": (lambda m: m.encode(["a"], batch_size=0), "batch_size"),
    "encode unknown pooling": (lambda m: m.encode(["a"], pooling="nope"), "nope"),
}


@pytest.fixture(scope="module")
def api_model(tiny_ckpt):
    import vat

    return vat.load(str(tiny_ckpt))


@pytest.mark.parametrize("case", API_CASES)
def test_the_api_refuses_bad_arguments_like_the_cli(api_model, case):
    call, needle = API_CASES[case]
    with pytest.raises(VatError) as e:
        call(api_model)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


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


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "reconstruct", "--ckpt", "{ckpt}", "--input", "{fifo}"],
        ["sweep", "-c", "{fifo}"],
    ],
    ids=["generate --input FIFO", "sweep -c FIFO"],
)
def test_a_fifo_never_hangs_a_real_vat_process(argv, bad_paths, tiny_ckpt):
    args = [
        a.replace("{ckpt}", str(tiny_ckpt)).replace("{fifo}", str(bad_paths["fifo"])) for a in argv
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "vat", *args], capture_output=True, text=True, timeout=120, env=env
    )
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(LOG_LINES)]
    assert r.returncode == 2 and len(lines) == 1 and "named pipe (FIFO)" in lines[0], r.stderr
