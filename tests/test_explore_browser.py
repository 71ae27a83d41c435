"""`vat explore` end to end in a real browser: the command serves a shipped model (run in the
test's process) and headless Chromium drives every view through Playwright, checking what the
page shows against the same calls in Python (`vat.explore.Explorer`).

The model is wmt-tatoeba-en-d128, the one docs/explore.md shows; $VAT_EXPLORE_MODEL names
another (demo-wordnet-d64 has sentences of its own in SCENES; any other model, a run folder
say, gets the demo's). The neighbours corpus is data/demo_val.txt, its first 300 lines;
$VAT_EXPLORE_CORPUS and $VAT_EXPLORE_CORPUS_LIMIT name another file and count (docs/explore.md
gives the ones its screenshots used).

Playwright's own browser download cannot run on vat's machines, so the test uses Debian's
`chromium` package through `executable_path` ($VAT_CHROMIUM, default /usr/bin/chromium);
`.ci/run` installs it. Under CI=true a missing browser fails the test instead of skipping it.
A screenshot of each view goes to $VAT_EXPLORE_SCREENSHOTS (docs/explore/ was made so), else
to the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
from cli_fixtures import Stdout, ctrl_c_once, free_port

import vat
from vat.cli import main as vat_main
from vat.data.corpus import LineReader
from vat.explore import Explorer

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class Scene:
    """What the test types into the page for one model."""

    sentence: str
    other: str  # the interpolation's other end
    position: int  # the latent the resample view draws again
    draws: tuple[tuple[str, float], ...]  # the resample view's (source, tau); the shot: the last
    steps: int  # interpolation points, ends included
    sample_tau: float


SCENES = {
    # "small" drawn from its posterior at tau 3 decodes as other words (at tau 1 all six draws
    # give the reconstruction: a narrow posterior); the path's midpoint mixes the two sentences
    "wmt-tatoeba-en-d128": Scene(
        "My sister lives in a small house near the sea.",
        "My brother works in a big office in the city.",
        5,
        (("prior", 1.0), ("posterior", 3.0)),
        7,
        1.5,
    ),
    "demo-wordnet-d64": Scene(
        "A woman is slicing an onion in the kitchen.",
        "The children ran across the field after school.",
        4,
        (("posterior", 1.0), ("prior", 1.0)),
        6,
        2.0,
    ),
}
MODEL = os.environ.get("VAT_EXPLORE_MODEL") or "wmt-tatoeba-en-d128"
SCENE = SCENES.get(MODEL, SCENES["demo-wordnet-d64"])
CORPUS = Path(os.environ.get("VAT_EXPLORE_CORPUS") or ROOT / "data" / "demo_val.txt")
CORPUS_LIMIT = int(os.environ.get("VAT_EXPLORE_CORPUS_LIMIT") or 300)

pytestmark = pytest.mark.slow


def chromium() -> str:
    path = os.environ.get("VAT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Chromium at {path}: .ci/run installs Debian's chromium")
        pytest.skip(f"no Chromium at {path} (apt-get install chromium, or set $VAT_CHROMIUM)")
    return path


@pytest.fixture(scope="module")
def explorer() -> Explorer:
    lines: list[str] = []  # read as vat.cli.explore.corpus_lines reads them (plain or .gz)
    for chunk in LineReader(CORPUS, "skip"):
        lines.extend(chunk)
        if len(lines) >= CORPUS_LIMIT:
            break
    lines = lines[:CORPUS_LIMIT]
    return Explorer(vat.load(MODEL, device="cpu"), lines, corpus_name=CORPUS.name)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = os.environ.get("VAT_EXPLORE_SCREENSHOTS")
    out = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_every_view_in_chromium(explorer, shots, monkeypatch, capsys):
    """`vat explore` as a user starts it, run in this process (no interpreter start-up; the
    command's own process and its Ctrl-C are tests/test_explore.py's), one torch thread; the
    browser drives it from another thread, then presses Ctrl-C."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium()
    out = Stdout()
    monkeypatch.setattr(sys, "stdout", out)
    argv = ["explore", "--model", MODEL, "--corpus", str(CORPUS), "--corpus-limit",
            str(CORPUS_LIMIT), "--port", str(free_port())]  # fmt: skip

    def browse() -> list[str] | None:
        if not out.has("vat explore: http://"):
            return None
        url = out.getvalue().split()[2]
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                page.set_default_timeout(TIMEOUT_MS)
                outside: list[str] = []  # nothing may leave the machine
                page.on(
                    "request",
                    lambda r: (
                        outside.append(r.url)
                        if urlparse(r.url).hostname not in ("127.0.0.1", None, "")
                        else None
                    ),
                )
                sync_api.expect.set_options(timeout=TIMEOUT_MS)  # a busy CI machine is slow
                page.goto(url)
                drive(page, sync_api.expect, explorer, shots)
            finally:
                browser.close()
        return outside

    code, outside = ctrl_c_once(lambda: vat_main(argv), browse)
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err and "vat explore: stopped" in err, err
    assert out.getvalue().startswith("vat explore: http://127.0.0.1:"), out.getvalue()
    assert outside == [], outside
    for name in ("encode", "resample", "interpolate", "sample", "neighbours", "model", "error"):
        png = shots / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        if os.environ.get("VAT_EXPLORE_SCREENSHOTS"):
            shrink(png)


def shrink(png: Path) -> None:
    """128 colours, no dithering: about a third of the bytes and the same to the eye, so the
    screenshots in docs/explore/ stay small."""
    from PIL import Image

    with Image.open(png) as im:
        small = im.convert("RGB").quantize(
            colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
    small.save(png, optimize=True)


def put(page, expect, selector: str, value: str) -> None:
    """Type into a field of a tab once the tab has mounted it (its default value is shown):
    a value typed before that is overwritten by the default."""
    field = page.locator(selector)
    expect(field).not_to_have_value("")
    for _ in range(300):  # a tab shown for the first time may still reset it: type again
        field.fill(value)
        page.wait_for_timeout(100)
        if field.input_value() == value:
            break
    expect(field).to_have_value(value)


def drive(page, expect, explorer: Explorer, shots: Path) -> None:
    # 1. encode and reconstruct: the example sentence on load, then a typed one
    page.locator("#encode-rows").wait_for()
    sentence, other = SCENE.sentence, SCENE.other
    page.locator("#sentence textarea").fill(sentence)
    page.locator("#encode-run").click()
    enc = explorer.encode(sentence)
    expect(page.locator("#encode-reconstruction")).to_have_text(enc.reconstruction)
    rows = page.locator("#encode-rows tbody tr")
    expect(rows).to_have_count(len(enc.rows))
    for i in (0, len(enc.rows) // 2, len(enc.rows) - 1):
        cells = rows.nth(i).locator("td").all_inner_texts()
        assert cells[1].strip() == enc.rows[i].subword.strip()
        assert cells[2] == f"{enc.rows[i].kl:.2f}"
    expect(page.locator("#encode-rate")).to_contain_text(f"rate {enc.rate:,.1f} nats")
    page.screenshot(path=str(shots / "encode.png"), full_page=True)

    # 2. resample a token: tau 0 gives the reconstruction N times; then the scene's draws
    page.get_by_role("tab", name="Resample a token").click()
    position = SCENE.position
    label = f"{position}: {enc.rows[position].subword.strip()}"
    picker = page.locator("#resample-token input")
    # the picker follows the typed sentence (its default: latent 1); pick only after that update,
    # which a busy machine can deliver late enough to undo an earlier pick
    expect(picker).to_have_value(f"1: {enc.rows[1].subword.strip()}")
    picker.click()
    page.get_by_role("option", name=label, exact=True).click()
    expect(picker).to_have_value(label)
    put(page, expect, "#resample-n input", "6")
    put(page, expect, "#resample-tau input", "0")
    page.locator("#resample-run").click()
    expect(page.locator("#resample-out")).to_contain_text("at tau 0,")
    items = page.locator("#resample-decodings li")
    expect(items).to_have_count(6)
    for text in items.all_inner_texts():
        assert text.replace("(same as the reconstruction)", "").strip() == enc.reconstruction
    for source, tau in SCENE.draws:
        put(page, expect, "#resample-tau input", f"{tau:g}")
        page.locator("#resample-source label").filter(has_text=source).click()
        page.locator("#resample-run").click()
        said = f"at tau {tau:g}," if source == "posterior" else "from the prior"
        expect(page.locator("#resample-out")).to_contain_text(said)
        expect(page.locator("#resample-out")).to_contain_text(f"Latent {position} (")
        expect(items).to_have_count(6)
        want = explorer.resample(sentence, position, 6, tau, source=source, seed=0)
        # expect() waits out a list gradio is still replacing (its output shows "pending")
        expect(items).to_contain_text([m.text for m in want.decodings])
        for i, m in enumerate(want.decodings):
            expect(items.nth(i).locator("mark")).to_have_text(m.changed)
    assert any(m.changed for m in want.decodings)  # the last draw marked words in the page
    page.screenshot(path=str(shots / "resample.png"), full_page=True)

    # 3. interpolate: the path starts and ends at the two reconstructions
    page.get_by_role("tab", name="Interpolate").click()
    put(page, expect, "#other-sentence textarea", other)
    put(page, expect, "#interpolate-steps input", str(SCENE.steps))
    page.locator("#interpolate-run").click()
    path = page.locator("#interpolate-path tbody tr")
    expect(path).to_have_count(SCENE.steps)
    texts = path.locator("td.path-text").all_inner_texts()
    assert texts[0] == enc.reconstruction
    assert texts == [p.decoding.text for p in explorer.interpolate(sentence, other, SCENE.steps)]
    assert texts[-1] == explorer.encode(other).reconstruction
    assert path.nth(0).locator(".vat-new").count() == 1
    page.screenshot(path=str(shots / "interpolate.png"), full_page=True)

    # 4. sample around the sentence and from the prior, at a fixed seed
    page.get_by_role("tab", name="Sample", exact=True).click()
    put(page, expect, "#sample-tau input", f"{SCENE.sample_tau:g}")
    page.locator("#sample-run").click()
    expect(page.locator("#sample-decodings li")).to_have_count(5)
    _, want_sample = explorer.sample(sentence, num_samples=5, tau=SCENE.sample_tau, seed=0)
    expect(page.locator("#sample-decodings li")).to_contain_text([m.text for m in want_sample])
    put(page, expect, "#prior-length input", "12")
    put(page, expect, "#prior-seed input", "3")
    page.locator("#prior-run").click()
    prior = page.locator("#prior-decodings li")
    expect(prior).to_have_count(5)
    want_prior = explorer.prior(num_samples=5, length=12, seed=3)
    assert [t.split(":", 1)[1].strip() for t in prior.all_inner_texts()] == [
        t for _, t in want_prior
    ]
    page.screenshot(path=str(shots / "sample.png"), full_page=True)

    # 5. neighbours in the corpus, under the model's feature spec
    page.get_by_role("tab", name="Neighbours").click()
    put(page, expect, "#neighbours-k input", "4")
    page.locator("#neighbours-run").click()
    found = page.locator("#neighbours-table tbody tr")
    expect(found).to_have_count(4)
    want_nb = explorer.neighbours(sentence, k=4)
    for row, nb in zip(found.all(), want_nb):
        cells = row.locator("td").all_inner_texts()
        assert cells == [f"{nb.cosine:.4f}", nb.sentence, str(nb.line)]
    expect(page.locator("#neighbours-out")).to_contain_text(explorer.feature_spec)
    page.screenshot(path=str(shots / "neighbours.png"), full_page=True)

    # 6. the model's facts
    page.get_by_role("tab", name="Model").click()
    expect(page.locator("#model-facts")).to_contain_text("s = 0.4")
    expect(page.locator("#model-scores")).to_contain_text("STS12")
    page.screenshot(path=str(shots / "model.png"), full_page=True)

    # bad input: a message in the page, and the server keeps serving
    page.get_by_role("tab", name="Encode and reconstruct").click()
    page.locator("#sentence textarea").fill("   ")
    page.locator("#encode-run").click()
    expect(page.locator("#encode-out .vat-error")).to_have_text(
        "sentence: is empty: type a sentence"
    )
    page.screenshot(path=str(shots / "error.png"), full_page=False)
    page.locator("#sentence textarea").fill(other)
    page.locator("#encode-run").click()
    expect(page.locator("#encode-reconstruction")).to_have_text(
        explorer.encode(other).reconstruction
    )
