"""`vat explore` below the browser: the Explorer (every view in Python), its maths and marks,
the page's rendering and error handling, the command's one-line errors, start-up on every
kind of model, Ctrl-C, and `vat export --space`. tests/test_explore_browser.py drives the page
in Chromium."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_fixtures import Stdout, ctrl_c_once, free_port, main_thread_in
from helpers import copy_folder

import vat
from vat.errors import OptionError, VatError
from vat.explore import Explorer
from vat.explore.explorer import MAX_CHARS, MAX_SAMPLES, MAX_STEPS, check_sentence
from vat.explore.neighbours import NeighbourIndex
from vat.explore.wording import mark_changes, path_changes
from vat.generate.latents import prior_at_positions, token_statistics

ROOT = Path(__file__).resolve().parents[1]
DEMO = "demo-wordnet-d64"
SENTENCE = "A man is playing a guitar in the park."


@pytest.fixture(scope="module")
def demo() -> vat.api.PretrainedVAT:
    return vat.load(DEMO, device="cpu")


@pytest.fixture(scope="module")
def explorer(demo) -> Explorer:
    lines = (ROOT / "data" / "demo_val.txt").read_text(encoding="utf-8").splitlines()[:200]
    return Explorer(demo, lines, corpus_name="demo_val.txt")


@pytest.fixture(scope="module")
def run_dir(tiny_ckpt, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("explore-run") / "demo"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_ckpt, run / "checkpoints" / "last.ckpt")
    return run


# -- the maths and the marks ---------------------------------------------------------------------
def test_token_statistics_match_torch_distributions():
    torch.manual_seed(0)
    mu, logvar, s = torch.randn(7, 5), torch.randn(7, 5) * 0.5, 0.4
    kl, sigma, norm = token_statistics(mu, logvar, s)
    q = torch.distributions.Normal(mu, torch.exp(0.5 * logvar))
    p = torch.distributions.Normal(torch.zeros_like(mu), torch.full_like(mu, s))
    torch.testing.assert_close(kl, torch.distributions.kl_divergence(q, p).sum(-1))
    torch.testing.assert_close(sigma, torch.exp(0.5 * logvar).mean(-1))
    torch.testing.assert_close(norm, torch.sqrt((mu**2).sum(-1)))
    # at the prior itself a token carries nothing
    kl0, _, _ = token_statistics(torch.zeros(3, 4), torch.full((3, 4), math.log(s**2)), s)
    torch.testing.assert_close(kl0, torch.zeros(3), atol=1e-6, rtol=0)


def test_prior_at_positions_keeps_the_rest_and_draws_the_prior():
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(20000, 3, 4, generator=g)
    where = torch.tensor([False, True, False]).expand(20000, 3)
    z = prior_at_positions(mu, where, 0.4, torch.Generator().manual_seed(1))
    assert torch.equal(z[:, [0, 2]], mu[:, [0, 2]])  # untouched, exactly
    drawn = z[:, 1]  # N(0, 0.4^2): independent of mu
    assert abs(float(drawn.mean())) < 0.01 and abs(float(drawn.std()) - 0.4) < 0.01
    assert abs(float(torch.corrcoef(torch.stack([drawn[:, 0], mu[:, 1, 0]]))[0, 1])) < 0.03


def test_mark_changes():
    same = mark_changes("a man plays .", "a man plays .")
    assert same.same and same.changed == [] and same.dropped == 0
    sub = mark_changes("a man plays a guitar .", "a woman plays a guitar .")
    assert sub.changed == ["woman"] and sub.dropped == 1
    ins = mark_changes("a man plays .", "a tall man plays .")
    assert ins.changed == ["tall"] and ins.dropped == 0  # only the inserted word
    dele = mark_changes("a tall man plays .", "a man plays .")
    assert dele.changed == [] and dele.dropped == 1 and not dele.same
    assert [w for w, _ in sub.words] == "a woman plays a guitar .".split()
    assert mark_changes("x", "").words == ()


def test_path_changes_flag_first_appearances():
    marks = path_changes(["a b", "a b", "a c", "a b", "d"])
    assert [new for _, new in marks] == [True, False, True, False, True]
    assert [m.changed for m, _ in marks] == [[], [], ["c"], ["b"], ["d"]]


def test_neighbour_index_is_exact():
    sentences = ["east", "north", "north-east", "zero", "west"]
    vectors = np.array([[1, 0], [0, 2], [3, 3], [0, 0], [-1, 0]], dtype=np.float32)
    index = NeighbourIndex(sentences, vectors)
    found = index.search(np.array([2.0, 0.0]), k=3)
    assert [n.sentence for n in found] == ["east", "north-east", "north"]
    assert [n.line for n in found] == [1, 3, 2]
    np.testing.assert_allclose([n.cosine for n in found], [1.0, 1 / math.sqrt(2), 0.0], atol=1e-6)
    tie = index.search(np.array([0.0, -1.0]), k=5)  # east, zero, west: cosine 0, in line order
    assert [n.sentence for n in tie] == ["east", "zero", "west", "north-east", "north"]
    assert len(index.search(np.array([1.0, 1.0]), k=50)) == 5  # k above N: every line
    with pytest.raises(OptionError, match="query: has 3 dimensions"):
        index.search(np.ones(3))
    with pytest.raises(OptionError, match="features: hold NaN"):
        NeighbourIndex(["a"], np.array([[np.nan, 1.0]]))
    with pytest.raises(OptionError, match="one row per sentence"):
        NeighbourIndex(["a", "b"], np.ones((3, 2)))


# -- the Explorer, view by view ------------------------------------------------------------------
def test_encode_rows_are_the_posterior(explorer, demo):
    enc = explorer.encode(SENTENCE)
    ids = demo.tokenizer.encode(SENTENCE)
    assert enc.subwords == len(ids) and len(enc.rows) == len(ids) + 1 and enc.cut_from is None
    assert enc.rows[-1].subword == "</s>"
    assert "".join(r.subword for r in enc.rows[:-1]) == SENTENCE  # byte-level subwords
    ((mu, logvar),) = demo.generator.posteriors([SENTENCE])
    kl, sigma, norm = token_statistics(mu, logvar, demo.prior_std)
    np.testing.assert_allclose([r.kl for r in enc.rows], kl.numpy(), rtol=1e-6)
    np.testing.assert_allclose([r.sigma for r in enc.rows], sigma.numpy(), rtol=1e-6)
    np.testing.assert_allclose([r.mu_norm for r in enc.rows], norm.numpy(), rtol=1e-6)
    assert enc.rate == pytest.approx(float(kl.sum()), rel=1e-6)
    assert enc.reconstruction == demo.reconstruct([SENTENCE])[0]
    assert (
        explorer.encode(SENTENCE, beam=3).reconstruction == demo.reconstruct([SENTENCE], beam=3)[0]
    )


def test_encode_cuts_long_sentences_and_says_so(explorer, demo):
    long = " ".join(["guitar"] * 80)
    n = len(demo.tokenizer.encode(long))
    enc = explorer.encode(long)
    assert enc.cut_from == n > explorer.max_len
    assert len(enc.rows) == explorer.max_len and enc.subwords == explorer.max_len - 1


def test_resample_at_tau_0_is_the_reconstruction(explorer):
    for position in (0, 3, 12):  # 12: the </s> latent
        r = explorer.resample(SENTENCE, position, num_samples=4, tau=0.0, seed=3)
        assert [m.text for m in r.decodings] == [r.reconstruction] * 4
        assert all(m.same for m in r.decodings)


def test_resample_is_the_python_api_and_marks_against_the_reconstruction(explorer, demo):
    for source in ("posterior", "prior"):
        r = explorer.resample(SENTENCE, 4, num_samples=6, tau=1.0, source=source, seed=5)
        (texts,) = demo.resample_token([SENTENCE], [4], num_samples=6, tau=1.0, seed=5,
                                       source=source)  # fmt: skip
        assert [m.text for m in r.decodings] == texts
        for m in r.decodings:
            assert m == mark_changes(r.reconstruction, m.text)
    prior = explorer.resample(SENTENCE, 8, num_samples=8, source="prior", seed=0)
    assert any(not m.same for m in prior.decodings)  # the prior carries nothing of the word


def test_interpolation_path_runs_between_the_reconstructions(explorer, demo):
    other = "Two dogs run across the snowy field."
    for method in ("linear", "slerp"):
        path = explorer.interpolate(SENTENCE, other, steps=6, method=method)
        assert [p.alpha for p in path] == pytest.approx([i / 5 for i in range(6)])
        assert path[0].decoding.text == demo.reconstruct([SENTENCE])[0]
        assert path[-1].decoding.text == demo.reconstruct([other])[0]
        assert path[0].new and path[0].decoding.same
        for a, b in zip(path, path[1:]):
            assert b.decoding == mark_changes(a.decoding.text, b.decoding.text)


def test_sample_prior_neighbours_and_facts(explorer, demo):
    recon, marked = explorer.sample(SENTENCE, num_samples=3, tau=1.0, seed=2)
    assert [m.text for m in marked] == demo.sample([SENTENCE], num_samples=3, tau=1.0, seed=2)[0]
    assert explorer.prior(num_samples=3, length=9, seed=4) == demo.prior(3, length=9, seed=4)
    assert [t for t, _ in explorer.prior(num_samples=4, length=0)] != [0] * 4  # 0: drawn
    found = explorer.neighbours(explorer.index.sentences[17], k=3)
    assert found[0].line == 18 and found[0].cosine == pytest.approx(1.0, abs=1e-5)
    assert [n.cosine for n in found] == sorted((n.cosine for n in found), reverse=True)
    facts = dict(explorer.facts().rows)
    assert facts["prior"] == "N(0, s² I), s = 0.4"
    assert facts["sentence features"] == "layer0/sif/none" == explorer.feature_spec
    assert facts["neighbours corpus"] == "200 lines of demo_val.txt"
    recorded = json.loads((demo.loaded.path / "config.json").read_text())
    sts12 = next(e for e in recorded["evaluation"] if e["task"] == "STS12")  # the card's score
    assert ("STS12", "test", "spearman", round(sts12["value"], 4)) in explorer.facts().scores


BAD = [
    ("encode", dict(text=""), "sentence: is empty"),
    ("encode", dict(text=" \t\n "), "sentence: is empty"),
    (
        "encode",
        dict(text="x" * 10_000),
        f"has 10,000 characters; a view takes at most {MAX_CHARS:,}",
    ),
    ("encode", dict(text="a\x07b"), r"control character \(U\+0007\) at character 2"),
    ("encode", dict(text=None), "sentence: expected text, got NoneType"),
    ("encode", dict(text=SENTENCE, beam=0), "beam: must be in 1..8"),
    ("resample", dict(text=SENTENCE, position=13), r"position: must be in 0..12, got 13"),
    ("resample", dict(text=SENTENCE, position=1.5), "position: must be a whole number"),
    ("resample", dict(text=SENTENCE, position=1, num_samples=0), "num_samples: must be in 1..20"),
    ("resample", dict(text=SENTENCE, position=1, num_samples=MAX_SAMPLES + 1), "num_samples"),
    (
        "resample",
        dict(text=SENTENCE, position=1, tau=float("nan")),
        r"tau: must be a number in 0..10",
    ),
    ("resample", dict(text=SENTENCE, position=1, tau=-1.0), r"tau: must be a number in 0..10"),
    ("resample", dict(text=SENTENCE, position=1, tau=math.inf), "tau"),
    ("resample", dict(text=SENTENCE, position=1, seed=-1), "seed: must be in 0..2147483647"),
    ("resample", dict(text=SENTENCE, position=1, source="both"), "source: must be 'posterior'"),
    ("interpolate", dict(a=SENTENCE, b="", steps=3), "other_sentence: is empty"),
    ("interpolate", dict(a=SENTENCE, b="x", steps=1), f"steps: must be in 2..{MAX_STEPS}"),
    ("interpolate", dict(a=SENTENCE, b="x", steps=MAX_STEPS + 1), "steps"),
    ("interpolate", dict(a=SENTENCE, b="x", method="cubic"), "method: must be 'linear'"),
    ("sample", dict(text=SENTENCE, tau=float("nan")), "tau"),
    ("prior", dict(length=49), r"length: must be in 0..48"),
    ("prior", dict(num_samples=float("inf")), "num_samples: must be a whole number"),
    ("neighbours", dict(text=SENTENCE, k=0), r"k: must be in 1..50"),
]


@pytest.mark.parametrize("view,kwargs,message", BAD, ids=[f"{v}-{m[:24]}" for v, _, m in BAD])
def test_bad_input_is_one_message_naming_the_field(explorer, view, kwargs, message):
    with pytest.raises(OptionError, match=message):
        _call(explorer, view, kwargs)


def _call(explorer, view, kwargs):
    kwargs = dict(kwargs)
    if view in ("encode", "resample", "sample", "neighbours"):
        return getattr(explorer, view)(kwargs.pop("text"), **kwargs)
    if view == "interpolate":
        return explorer.interpolate(kwargs.pop("a"), kwargs.pop("b"), **kwargs)
    return getattr(explorer, view)(**kwargs)


def test_no_corpus_and_control_whitespace(demo):
    bare = Explorer(demo)
    with pytest.raises(
        OptionError, match="corpus: none was loaded: start vat explore with --corpus"
    ):
        bare.neighbours(SENTENCE)
    assert check_sentence("  a\tb\r\nc  ") == "a b c"
    assert bare.subwords("") == [] and bare.subwords("a\x00") == []
    with pytest.raises(OptionError, match="model: Explorer takes a loaded model"):
        Explorer("demo-wordnet-d64")
    with pytest.raises(OptionError, match="corpus: holds no non-empty line"):
        Explorer(demo, ["", "  "])


# -- the page: rendering and errors (gradio is not needed for these) ----------------------------
def test_page_escapes_text_and_keeps_serving_on_errors(explorer, capsys):
    import html as html_lib

    from vat.explore.page import encoding_html, guarded, neighbours_html, token_choices

    evil = "<script>alert(1)</script> & co"
    html = encoding_html(explorer, evil, 1)
    assert "<script" not in html and "</script" not in html
    assert html_lib.escape(explorer.encode(evil).reconstruction) in html
    assert html.count("<tr data-position=") == len(
        explorer.encode("<script>alert(1)</script> & co").rows
    )
    assert "&lt;/s&gt;" in html
    view = guarded(neighbours_html)
    assert 'class="vat-error"' in view(explorer, "", 5) and "sentence: is empty" in view(
        explorer, "", 5
    )

    def broken(_explorer, _text):
        raise RuntimeError("boom\nsecond line")

    out = guarded(broken)(explorer, "x")
    assert "internal error (RuntimeError): boom" in out and "second line" not in out
    err = capsys.readouterr().err
    assert err.strip() == "vat explore: broken failed: RuntimeError: boom"
    assert "Traceback" not in err
    choices = token_choices(explorer, SENTENCE)
    assert choices[0] == "0: A" and choices[-1] == "12: </s>"


# -- the command ---------------------------------------------------------------------------------
def vat_cmd(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vat", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        **kw,
    )


def test_command_errors_are_one_line(tmp_path, capsys):
    from vat.cli.explore import main

    def one_line(*args: str) -> str:
        assert main(list(args)) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
        return lines[0]

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert one_line("--model", DEMO, "--port", str(port)) == (
            f"error: --port: 127.0.0.1:{port} is in use (another vat explore?); pick another "
            "with --port"
        )
    cases = [
        (["--model", str(tmp_path / "nope")], "nope"),
        (["--model", DEMO, "--corpus", str(tmp_path / "none.txt")], "--corpus"),
        (["--model", DEMO, "--corpus-limit", "0"], "--corpus-limit: must be at least 1"),
        (["--model", DEMO, "--port", "70000"], "--port: must be in 0..65535"),
        (["--model", DEMO, "--host", "no.such.host.invalid"], "--host: 'no.such.host.invalid'"),
        (["--model", DEMO, "--prot", "1"], "unrecognized arguments: --prot"),
    ]
    for args, message in cases:
        assert message in one_line("--port", "0", *args)  # a later --port wins


def test_missing_extra_is_one_line(monkeypatch, capsys):
    from vat.cli import main

    monkeypatch.setitem(sys.modules, "gradio", None)  # an import of it fails as without the extra
    assert main(["explore", "--model", DEMO, "--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: vat explore needs gradio, which is not installed: "
        'pip install "variational-auto-transformer[explore]"'
    )


def serve(model, tmp_path, corpus=None):
    from vat.explore.page import build_page, launch

    page = build_page(Explorer(vat.load(model, device="cpu"), corpus))
    _, url, _ = launch(page, "127.0.0.1", free_port(), block=False)
    return page, url


@pytest.mark.slow
def test_the_page_serves_every_kind_of_model(tiny_ckpt, run_dir, tiny_export, tmp_path):
    for model in (tiny_ckpt, run_dir, tiny_export):
        page, url = serve(model, tmp_path, corpus=["a b c", "the cat sat"])
        try:
            html = _view(url, "encode", ["the cat sat", 1])
            assert 'id="encode-rows"' in html and "vat-error" not in html
            nb = _view(url, "neighbours", ["the cat sat", 2])
            assert "the cat sat" in nb and 'id="neighbours-table"' in nb
            bad = _view(url, "encode", ["", 1])  # the server keeps serving
            assert "sentence: is empty" in bad
            assert "vat-error" not in _view(url, "encode", ["a b", 1])
        finally:
            page.close()


@pytest.mark.slow
def test_command_prints_the_address_and_stops_on_ctrl_c(run_dir):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vat", "explore", "--model", str(run_dir), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"vat explore: http://127.0.0.1:{port}/"), line
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            assert page.status == 200 and b"vat explore: demo" in page.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "vat explore: stopped" in err
    assert "neighbours: no --corpus" in err  # the tiny model records no training text
    from vat.cli.explore import check_port

    assert check_port("127.0.0.1", port) == port  # free again: a restart may take it at once


# -- vat export --space --------------------------------------------------------------------------
@pytest.mark.slow
def test_export_space_runs_the_page(tiny_ckpt, tmp_path, capsys, monkeypatch):
    from vat.cli.export import main as export

    out = tmp_path / "space"
    assert export([str(tiny_ckpt), str(out), "--space"]) == 0
    assert {"app.py", "requirements.txt", "model.safetensors"} <= {p.name for p in out.iterdir()}
    requirement = (out / "requirements.txt").read_text()
    assert requirement.startswith("variational-auto-transformer[explore]>=")
    card = (out / "README.md").read_text()
    assert "\nsdk: gradio\n" in card and "\napp_file: app.py\n" in card
    assert "## Explore it in the browser" in card
    assert json.loads((out / "config.json").read_text())["space"]["sdk"] == "gradio"
    assert export([str(tiny_ckpt), str(out), "--space", "--overwrite"]) == 0  # its own files
    capsys.readouterr()
    assert export([str(out), "--push-to-hub", "u/m", "--space"]) == 2
    assert "--space: writes into DIR" in capsys.readouterr().err
    # the Space runs app.py as a script, in a folder of its own: here in this process, served
    # on GRADIO_SERVER_PORT as app.py reads it, until Ctrl-C
    import runpy
    import urllib.request

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    monkeypatch.setenv("GRADIO_SERVER_PORT", str(port))
    monkeypatch.chdir(tmp_path)  # the app finds its model beside itself, from any folder

    def serving() -> str | None:
        if not main_thread_in("block_thread"):  # gradio's wait for Ctrl-C
            return None
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200
        return _api(url, "encode", ["the cat sat", 1])

    app, answer = ctrl_c_once(lambda: runpy.run_path(str(out / "app.py"), run_name="__main__"),
                              serving)  # fmt: skip
    from vat.explore.page import stop

    stop(app["demo"])
    assert 'id=\\"encode-rows\\"' in answer  # JSON
    assert app["HERE"] == out and app["demo"].title == "vat explore: space"


def test_generate_resample_token_from_the_prior(demo, capsys):
    from vat.cli import main

    rc = main(["generate", "resample-token", "--model", DEMO, SENTENCE, "--positions", "8",
               "--source", "prior", "-n", "3", "--seed", "0"])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 0, err
    (texts,) = demo.resample_token([SENTENCE], [8], num_samples=3, seed=0, source="prior")
    assert out.split("\n")[:3] == texts
    with pytest.raises(VatError, match="source"):
        demo.resample_token([SENTENCE], [8], source="nowhere")


def test_default_corpus_is_the_checkpoints_fitting_sample(tiny_ckpt, tiny_export, tmp_path):
    """Without --corpus, a training checkpoint's neighbours are its fitting sample (held in
    the checkpoint: no file is opened, whatever its record names); an exported folder
    carries no training text, so it has none, and a note says how to give one."""
    import argparse

    from helpers import checkpoint_with_counts

    from vat.cli.explore import corpus_lines

    lines = [f"the dog number {i} runs in the park" for i in range(8)]
    ckpt, train, _ = checkpoint_with_counts(tiny_ckpt, tmp_path, lines)
    train.unlink()  # the record names it; nothing reads it
    args = argparse.Namespace(corpus=None, corpus_limit=3)
    shown, name, note = corpus_lines(args, vat.load(ckpt, device="cpu").loaded)
    assert shown == lines[:3] and name == "the model's fitting sample" and note is None
    shown, name, note = corpus_lines(args, vat.load(tiny_export, device="cpu").loaded)
    assert shown is None and "holds no sample of its training sentences" in note
    assert note.endswith("give --corpus FILE")


# -- what a request can send, and where the page listens -----------------------------------------
def _api(url: str, name: str, data) -> str:
    """One call of the page's HTTP API (POST /gradio_api/call/NAME, then its result stream)."""
    import urllib.request

    request = urllib.request.Request(
        f"{url}gradio_api/call/{name}",
        data=json.dumps({"data": data}).encode(),
        headers={"Content-Type": "application/json"},
    )
    event = json.loads(urllib.request.urlopen(request, timeout=30).read())["event_id"]
    with urllib.request.urlopen(f"{url}gradio_api/call/{name}/{event}", timeout=60) as r:
        return r.read().decode()


def _view(url: str, name: str, data) -> str:
    """What a view answers over the page's HTTP API (as a browser's client reads it): the HTML
    of its one output."""
    stream = _api(url, name, data)
    event, line = stream.split("\n")[:2]
    assert event == "event: complete" and line.startswith("data: "), stream[:2000]
    (html,) = json.loads(line.removeprefix("data: "))
    return html


API_PAYLOADS = [  # (view, values as a client sends them, what the page answers)
    ("neighbours", ["the cat", 10**9], "k: must be in 1..50"),
    ("neighbours", ["the cat", "x"], "k: must be a whole number"),
    ("neighbours", ["the cat"], "input values (needed: 2, got: 1)"),  # too few: no view runs
    ("encode", [SENTENCE, 10**9], "beam: must be in 1..8"),
    ("encode", [SENTENCE, "x"], "beam: must be a whole number"),
    ("encode", ["\ud800", 1], "sentence: has a lone surrogate"),
    ("encode", [{"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}, 1], "not uploaded"),
    ("resample", [SENTENCE, 10**9, "posterior", 2, 1.0, 0], "position: must be in 0..12"),
    ("resample", [SENTENCE, "1: man", "both", 2, 1.0, 0], "source: must be 'posterior'"),
    ("resample", [SENTENCE, "1: man", "posterior", -3, 1.0, 0], "num_samples: must be in"),
    ("interpolate", [SENTENCE, "b", 3, "cubic"], "method: must be 'linear'"),
    ("sample", [SENTENCE, 2, "nan", 0], "tau: must be a number"),
    ("prior", [2, None, None], "seed: must be a whole number"),
]


@pytest.mark.slow
def test_api_requests_are_checked_in_one_line_and_uploads_refused(explorer, capfd):
    """Out-of-range, mistyped or missing values sent straight to the HTTP API: one line in
    the answer, nothing printed on the server's terminal; the page has no upload component,
    so an upload is refused, and gradio's upload folder is private and gone once it stops."""
    import html as html_lib
    import urllib.error
    import urllib.request

    from vat.explore.page import build_page, launch, stop

    page = build_page(explorer)
    _, url, _ = launch(page, "127.0.0.1", free_port(), block=False)
    uploads = Path(page.vat_upload_dir)
    try:
        capfd.readouterr()
        for view, data, message in API_PAYLOADS:
            answer = html_lib.unescape(_api(url, view, data))
            assert message in answer, (view, data, answer)
            assert "internal error" not in answer
        body = (
            b'--B\r\nContent-Disposition: form-data; name="files"; filename="a.bin"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n" + b"x" * 1_000_000 + b"\r\n--B--\r\n"
        )
        upload = urllib.request.Request(
            f"{url}gradio_api/upload",
            data=body,
            headers={"Content-Type": "multipart/form-data; boundary=B"},
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(upload, timeout=30)
        assert e.value.code == 413
        assert uploads.is_dir() and not any(uploads.rglob("*.bin"))
        assert uploads.name.startswith("vat-explore-")
    finally:
        stop(page)
    out, err = capfd.readouterr()
    assert "Traceback" not in err + out and "Error" not in err, err[-2000:]
    assert not uploads.exists()


def test_ipv6_hosts_and_which_hosts_other_machines_reach():
    from vat.cli.explore import check_port, reachable_from_elsewhere, served_url

    assert not reachable_from_elsewhere("127.0.0.1") and not reachable_from_elsewhere("localhost")
    assert reachable_from_elsewhere("0.0.0.0")
    assert served_url("127.0.0.1", 8000) == "http://127.0.0.1:8000/"
    assert served_url("0.0.0.0", 8000) == (
        "http://0.0.0.0:8000/ (every interface; on this machine http://127.0.0.1:8000/)"
    )
    assert served_url("::1", 8000) == "http://[::1]:8000/"
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    assert not reachable_from_elsewhere("::1") and reachable_from_elsewhere("::")
    assert check_port("::1", 0) > 0  # bound as IPv6, not refused as no address of this machine
    with socket.socket(socket.AF_INET6) as busy:
        busy.bind(("::1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OptionError, match=rf"\[::1\]:{port} is in use"):
            check_port("::1", port)


@pytest.mark.slow
def test_an_ipv6_page_serves(demo):
    import urllib.request

    from vat.cli.explore import check_port
    from vat.explore.page import build_page, launch, stop

    try:
        port = check_port("::1", 0)
    except OptionError:
        pytest.skip("this machine has no IPv6 loopback")
    page = build_page(Explorer(demo))
    _, url, _ = launch(page, "::1", port, block=False)
    try:
        with urllib.request.urlopen(f"http://[::1]:{port}/", timeout=30) as r:
            assert r.status == 200
        assert 'id=\\"encode-rows\\"' in _api(url, "encode", ["the cat sat", 1])  # JSON
    finally:
        stop(page)


def test_every_interface_is_warned_and_the_bound_address_printed(tmp_path, monkeypatch, capsys):
    from vat.cli import main

    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("a first line\ncaf\xe9 au lait\nna\xefve\nthe last line\n".encode("latin-1"))
    port = free_port()
    out = Stdout()
    monkeypatch.setattr(sys, "stdout", out)
    code, _ = ctrl_c_once(
        lambda: main(["explore", "--model", DEMO, "--host", "0.0.0.0", "--port", str(port),
                      "--corpus", str(corpus)]),
        lambda: out.has("vat explore: http") or None,  # said once served, inside its try
    )  # fmt: skip
    err = capsys.readouterr().err
    assert out.getvalue().startswith(
        f"vat explore: http://0.0.0.0:{port}/ (every interface; on this machine "
        f"http://127.0.0.1:{port}/)"
    ), out.getvalue()
    assert code == 0 and "Traceback" not in err and "vat explore: stopped" in err, err
    assert (
        f"warning: --host 0.0.0.0: the page is reachable from other machines on the network: "
        f"anyone who can reach port {port} can run the model and read its neighbours corpus "
        "(the 2 lines of latin1.txt)"
    ) in err
    assert f"warning: {corpus}: skipped 2 lines with bytes that are not UTF-8" in err
    from vat.cli.explore import check_port

    assert check_port("0.0.0.0", port) == port  # stopped: the port is free again


def test_a_corpus_with_lines_that_are_not_utf8_says_how_many_it_skipped(demo, tmp_path, capsys):
    import argparse

    from vat.cli.explore import corpus_lines

    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("a first line\ncaf\xe9 au lait\nthe last line\n".encode("latin-1"))
    args = argparse.Namespace(corpus=str(corpus), corpus_limit=100)
    assert corpus_lines(args, demo.loaded)[0] == ["a first line", "the last line"]
    assert capsys.readouterr().err == (
        f"warning: {corpus}: skipped 1 line with bytes that are not UTF-8\n"
    )


# -- scores and facts a folder records --------------------------------------------------------
@pytest.mark.parametrize(
    "scores,key",
    [
        ([{"task": "STS12", "split": "test", "metric": "spearman", "value": "abc"}], "[0].value"),
        ([{"task": "STS12", "split": "test", "metric": "spearman", "value": None}], "[0].value"),
        ([{"task": "STS12", "split": "test", "metric": "spearman", "value": True}], "[0].value"),
        ([{"task": 7, "split": "test", "metric": "spearman", "value": 1.0}], "[0].task"),
        (["STS12"], "[0] must be an object"),
        ({"STS12": 50.0}, "'evaluation' must be a list"),
        ("training", "training.data must be an object"),
        ("train_files", "training.data.train_files must be a list of file names"),
    ],
)
def test_a_hand_edited_score_or_record_is_refused_at_load(tiny_export, tmp_path, scores, key):

    from vat.errors import CheckpointError

    folder = copy_folder(tiny_export, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    if scores == "training":
        config["training"] = {"data": "corpus.txt"}
    elif scores == "train_files":
        config["training"] = {"data": {"train_files": "corpus.txt"}}
    else:
        config["evaluation"] = scores
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as e:
        vat.load(folder, device="cpu")
    assert str(folder / "config.json") in str(e.value) and key in str(e.value)


def test_the_model_view_shows_hand_edited_training_facts(tiny_export, tmp_path):
    """A record's sections of the wrong kind show nothing; a sound score is shown."""

    from vat.explore.page import facts_html

    folder = copy_folder(tiny_export, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["training"] = {"metrics": {"val/kl": "high"}, "tokens_seen": True}
    config["evaluation"] = [{"task": "STS12", "split": "test", "metric": "spearman", "value": 51}]
    (folder / "config.json").write_text(json.dumps(config))
    html = facts_html(Explorer(vat.load(folder, device="cpu")))
    assert "internal error" not in html and "vat-error" not in html
    assert "<td>STS12</td>" in html and "51.00" in html and "rate (validation)" not in html
