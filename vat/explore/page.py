"""The `vat explore` page: gradio components over an `Explorer`, each view one method as HTML.
Views take raw values (`preprocess=False`: gradio's own checks print tracebacks), the Explorer
checks them. Nothing leaves the machine: no analytics, share link or uploads."""

from __future__ import annotations

import atexit
import functools
import html
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from vat.errors import VatError, one_line
from vat.explore.explorer import MAX_BEAM, MAX_NEIGHBOURS, MAX_SAMPLES, MAX_STEPS, MAX_TAU, Explorer
from vat.explore.wording import MarkedText

EXAMPLE = "A man is playing a guitar in the park."
EXAMPLE_OTHER = "Two dogs run across the snowy field."

CSS = """
.vat-error { color: #b42318; background: #fef3f2; border: 1px solid #fecdca;
             border-radius: 6px; padding: 8px 12px; font-weight: 600; }
.vat-note { color: #475467; font-size: 0.92em; margin: 4px 0 8px 0; }
.vat-text { font-size: 1.08em; margin: 6px 0; }
.vat-heat span { display: inline-block; padding: 2px 3px; margin: 1px; border-radius: 4px;
                 white-space: pre; font-family: var(--font-mono); }
table.vat-table { border-collapse: collapse; margin-top: 8px; }
table.vat-table th, table.vat-table td { padding: 3px 10px; border-bottom: 1px solid #eaecf0;
                                        text-align: left; }
table.vat-table td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.vat-table td.sub { white-space: pre; font-family: var(--font-mono); }
mark { background: #fde68a; color: inherit; padding: 0 2px; border-radius: 3px; }
.vat-new { color: #027a48; font-weight: 600; font-size: 0.85em; }
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _table(table_id: str, headers: tuple[str, ...], rows: str) -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    return (
        f'<table class="vat-table" id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def error_html(message: str) -> str:
    return f'<div class="vat-error" role="alert">{_e(message)}</div>'


def marked_html(m: MarkedText) -> str:
    words = [f"<mark>{_e(w)}</mark>" if changed else _e(w) for w, changed in m.words]
    return " ".join(words) or '<span class="vat-note">(empty)</span>'


def _heat(kl: float, low: float, high: float) -> str:
    """From pale (the sentence's least KL) to deep orange (its most)."""
    alpha = 0.5 if high <= low else (kl - low) / (high - low)
    return f"background: rgba(234, 88, 12, {0.06 + 0.74 * alpha:.3f})"


def encoding_html(explorer: Explorer, text: str, beam: Any) -> str:
    enc = explorer.encode(text, beam=beam)
    low, high = min(r.kl for r in enc.rows), max(r.kl for r in enc.rows)
    how = "greedy" if int(beam) == 1 else f"beam search, width {int(beam)}"
    parts = [
        f'<div class="vat-note">Reconstruction ({how}, from the token means mu):</div>',
        f'<div class="vat-text" id="encode-reconstruction">{_e(enc.reconstruction)}</div>',
        f'<div class="vat-note" id="encode-rate">rate {enc.rate:,.1f} nats over {len(enc.rows)} '
        f"latents ({enc.subwords} subwords + &lt;/s&gt;); {enc.rate / len(enc.rows):,.1f} per "
        f"latent. Colour: KL from {low:,.1f} (pale) to {high:,.1f} nats (deep).</div>",
    ]
    if enc.cut_from is not None:
        parts.append(
            f'<div class="vat-error" id="encode-cut">The sentence has {enc.cut_from} subwords; the '
            f"model reads at most {explorer.max_len - 1} (max_len {explorer.max_len}), so it was "
            f"cut to its first {enc.subwords}.</div>"
        )
    spans = "".join(
        f'<span title="KL {r.kl:.2f} nats" style="{_heat(r.kl, low, high)}">{_e(r.subword)}</span>'
        for r in enc.rows
    )
    parts.append(f'<div class="vat-heat" id="encode-heat">{spans}</div>')
    rows = "".join(
        f'<tr data-position="{r.position}" style="{_heat(r.kl, low, high)}">'
        f'<td class="num">{r.position}</td><td class="sub">{_e(r.subword)}</td>'
        f'<td class="num">{r.kl:.2f}</td>'
        f'<td class="num">{r.sigma:.4f}</td><td class="num">{r.mu_norm:.3f}</td></tr>'
        for r in enc.rows
    )
    parts.append(_table("encode-rows", ("#", "subword", "KL (nats)", "mean sigma", "|mu|"), rows))
    return "\n".join(parts)


def _decodings_html(list_id: str, decodings: list[MarkedText], tau: Any) -> str:
    items = "".join(
        f"<li>{marked_html(m)}"
        + (' <span class="vat-note">(same as the reconstruction)</span>' if m.same else "")
        + "</li>"
        for m in decodings
    )
    out = f'<ol class="vat-text" id="{list_id}">{items}</ol>'
    if float(tau) > 0 and all(m.same for m in decodings):
        out += (
            f'<div class="vat-note" id="{list_id}-deterministic">Every decoding equals the '
            f"reconstruction: at tau {float(tau):g} this model's posterior is too narrow to "
            "change a word (a high rate makes it nearly deterministic). Raise tau, or draw "
            "from the prior.</div>"
        )
    return out


def resample_html(
    explorer: Explorer, text: str, token: Any, source: str, n: Any, tau: Any, seed: Any
) -> str:
    position = token_position(token)
    r = explorer.resample(text, position, num_samples=n, tau=tau, source=source, seed=seed)
    posterior = source == "posterior"
    how = f"its posterior at tau {float(tau):g}" if posterior else "the prior N(0, s² I)"
    parts = (
        f'<div class="vat-note">Latent {position} ({_e(r.subword.strip() or r.subword)}) '
        f"drawn again from {how}, seed {int(seed)}; every other latent is its mean. "
        "Words that differ from the reconstruction are marked.</div>",
        f'<div class="vat-note">Reconstruction: <span id="resample-reconstruction">'
        f"{_e(r.reconstruction)}</span></div>",
        _decodings_html("resample-decodings", list(r.decodings), tau if posterior else 0),
    )
    return "\n".join(parts)


def interpolate_html(explorer: Explorer, a: str, b: str, steps: Any, method: str) -> str:
    path = explorer.interpolate(a, b, steps=steps, method=method)
    rows = "".join(
        f'<tr data-alpha="{p.alpha:.4f}"><td class="num">{p.alpha:.2f}</td>'
        f'<td class="path-text">{marked_html(p.decoding)}</td><td>'
        + ('<span class="vat-new">new</span>' if p.new else "")
        + "</td></tr>"
        for p in path
    )
    kind = "linear" if method == "linear" else "spherical (slerp)"
    return (
        f'<div class="vat-note">{kind.capitalize()} interpolation of the two sentences\' token '
        "means, greedy decoding; words that differ from the row above are marked, and a wording "
        "is flagged new where it first appears.</div>"
    ) + _table("interpolate-path", ("alpha", "decoding", ""), rows)


def sample_html(explorer: Explorer, text: str, n: Any, tau: Any, seed: Any) -> str:
    recon, decodings = explorer.sample(text, num_samples=n, tau=tau, seed=seed)
    return (
        f'<div class="vat-note">Every latent drawn from its posterior, z_t = mu_t + tau sigma_t '
        f"eps, at tau {float(tau):g}, seed {int(seed)}. Reconstruction: "
        f'<span id="sample-reconstruction">{_e(recon)}</span></div>'
        + _decodings_html("sample-decodings", decodings, tau)
    )


def prior_html(explorer: Explorer, n: Any, length: Any, seed: Any) -> str:
    pairs = explorer.prior(num_samples=n, length=length, seed=seed)
    s = explorer.model.prior_std
    lengths = "lengths drawn from the training length histogram"
    if length:
        lengths = f"{int(length)} latents each"
    items = "".join(
        f'<li><span class="vat-note">{t} latents:</span> {_e(text)}</li>' for t, text in pairs
    )
    return (
        f'<div class="vat-note">Z ~ N(0, s² I) with s = {s:g}, {lengths}, seed {int(seed)}, '
        f'greedy decoding.</div><ol class="vat-text" id="prior-decodings">{items}</ol>'
    )


def neighbours_html(explorer: Explorer, text: str, k: Any) -> str:
    found = explorer.neighbours(text, k=k)
    rows = "".join(
        f'<tr><td class="num">{nb.cosine:.4f}</td><td>{_e(nb.sentence)}</td>'
        f'<td class="num">{nb.line}</td></tr>'
        for nb in found
    )
    return (
        f'<div class="vat-note">The {len(found)} nearest of {len(explorer.index or ()):,} lines '
        f"of {_e(explorer.corpus_name or 'the corpus')}, by cosine of the sentence features "
        f"<code>{_e(explorer.feature_spec)}</code>.</div>"
    ) + _table("neighbours-table", ("cosine", "sentence", "line"), rows)


def facts_html(explorer: Explorer) -> str:
    facts = explorer.facts()
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts.rows)
    out = f'<table class="vat-table" id="model-facts"><tbody>{rows}</tbody></table>'
    if facts.scores:
        scores = "".join(
            f'<tr><td>{_e(t)}</td><td>{_e(s)}</td><td>{_e(m)}</td><td class="num">{v:.2f}</td></tr>'
            for t, s, m, v in facts.scores
        )
        out += (
            "<h3>Scores stored with the model</h3>"
            f'<div class="vat-note">For its sentence features <code>{_e(explorer.feature_spec)}'
            "</code>; percent.</div>"
        ) + _table("model-scores", ("task", "split", "metric", "value"), scores)
    else:
        out += '<div class="vat-note">No scores are stored with this model.</div>'
    return out


def token_choices(explorer: Explorer, text: str) -> list[str]:
    return [f"{t}: {s.strip() or repr(s)}" for t, s in enumerate(explorer.subwords(text))]


def token_position(choice: Any) -> int:
    """The latent position of a token picker choice ("3: guitar"), or a bare number."""
    if isinstance(choice, int | float) and not isinstance(choice, bool):
        if not (math.isfinite(choice) and choice == int(choice)):  # JSON may send Infinity
            raise VatError(f"token: must be a whole number, got {choice!r}")
        return int(choice)
    head = str(choice or "").split(":", 1)[0].strip()
    if not head.isdigit():
        raise VatError("token: pick a token of the sentence (type the sentence first)")
    return int(head)


def guarded(view: Callable[..., str]) -> Callable[..., str]:
    """A view that answers any failure with one line: never a traceback, never a dead server."""

    def run(*args: Any) -> str:
        try:
            return view(*args)
        except VatError as e:
            return error_html(one_line(e))
        except Exception as e:  # a bug: one line each side, and the page keeps serving
            print(f"vat explore: {view.__name__} failed: {type(e).__name__}: {one_line(e)}",
                  file=sys.stderr)  # fmt: skip
            return error_html(f"internal error ({type(e).__name__}): {one_line(e)}")

    run.__name__ = view.__name__
    return run


def draw_controls(gr, view: str, what: str):
    with gr.Row():
        n = gr.Number(5, label=f"{what} (1-{MAX_SAMPLES})", precision=0, elem_id=f"{view}-n")
        tau = gr.Number(1.0, label=f"tau (0-{MAX_TAU:g})", elem_id=f"{view}-tau")
        seed = gr.Number(0, label="Seed", precision=0, elem_id=f"{view}-seed")
    return n, tau, seed


def build_page(explorer: Explorer, *, analytics: bool = False):
    """The gradio Blocks of the page (not launched)."""
    if not analytics:
        os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"  # before gradio reads it
    import gradio as gr

    class Page(gr.Blocks):
        async def preprocess_data(self, block_fn, *args, **kwargs):
            """A request gradio refuses before a view runs is one line, not a traceback."""
            try:
                return await super().preprocess_data(block_fn, *args, **kwargs)
            except gr.Error:
                raise
            except Exception as e:
                raise gr.Error(f"{block_fn.name}: {one_line(e)}", print_exception=False) from None

    loaded = explorer.model.loaded
    title = f"vat explore: {loaded.name}"
    with Page(title=title, analytics_enabled=analytics) as page:
        gr.Markdown(
            f"## {_e(title)}\n"
            f"d = {explorer.model.dim}, prior s = {explorer.model.prior_std:g}, max_len "
            f"{explorer.max_len}. Every view is a method of `vat.explore.Explorer` in Python."
        )
        sentence = gr.Textbox(label="Sentence", value=EXAMPLE, elem_id="sentence", lines=1)
        with gr.Tabs():
            with gr.Tab("Encode and reconstruct", id="encode"):
                with gr.Row():
                    beam = gr.Slider(1, MAX_BEAM, value=1, step=1, label="Beam width (1 = greedy)",
                                     elem_id="encode-beam")  # fmt: skip
                    encode_run = gr.Button("Encode", variant="primary", elem_id="encode-run")
                encode_out = gr.HTML(elem_id="encode-out")
            with gr.Tab("Resample a token", id="resample"):
                choices = token_choices(explorer, EXAMPLE)
                with gr.Row():
                    # a typed position is taken too ("3")
                    token = gr.Dropdown(choices=choices, value=choices[min(1, len(choices) - 1)],
                                        allow_custom_value=True, label="Token",
                                        elem_id="resample-token")  # fmt: skip
                    source = gr.Radio(["posterior", "prior"], value="posterior",
                                      label="Draw it from", elem_id="resample-source")  # fmt: skip
                r_n, r_tau, r_seed = draw_controls(gr, "resample", "Decodings")
                resample_run = gr.Button("Resample", variant="primary", elem_id="resample-run")
                resample_out = gr.HTML(elem_id="resample-out")
            with gr.Tab("Interpolate", id="interpolate"):
                other = gr.Textbox(label="Other sentence", value=EXAMPLE_OTHER,
                                   elem_id="other-sentence")  # fmt: skip
                with gr.Row():
                    steps = gr.Number(7, label=f"Points, ends included (2-{MAX_STEPS})",
                                      precision=0, elem_id="interpolate-steps")  # fmt: skip
                    method = gr.Radio(["linear", "slerp"], value="linear", label="Path",
                                      elem_id="interpolate-method")  # fmt: skip
                interpolate_run = gr.Button("Interpolate", variant="primary",
                                            elem_id="interpolate-run")  # fmt: skip
                interpolate_out = gr.HTML(elem_id="interpolate-out")
            with gr.Tab("Sample", id="sample"):
                gr.Markdown("**Around the sentence**: every latent drawn from its posterior.")
                s_n, s_tau, s_seed = draw_controls(gr, "sample", "Samples")
                sample_run = gr.Button("Sample", variant="primary", elem_id="sample-run")
                sample_out = gr.HTML(elem_id="sample-out")
                gr.Markdown(f"**From the prior** N(0, s² I), s = {explorer.model.prior_std:g}.")
                with gr.Row():
                    p_n = gr.Number(5, label=f"Samples (1-{MAX_SAMPLES})", precision=0,
                                    elem_id="prior-n")  # fmt: skip
                    p_len = gr.Number(0, label=f"Latents (1-{explorer.max_len}; 0 = drawn from "
                                      "training lengths)", precision=0,
                                      elem_id="prior-length")  # fmt: skip
                    p_seed = gr.Number(0, label="Seed", precision=0, elem_id="prior-seed")
                prior_run = gr.Button("Sample the prior", variant="primary", elem_id="prior-run")
                prior_out = gr.HTML(elem_id="prior-out")
            with gr.Tab("Neighbours", id="neighbours"):
                if explorer.index is None:
                    gr.HTML(error_html("No corpus was loaded: start vat explore with "
                                       "--corpus FILE to look up neighbours."))  # fmt: skip
                k = gr.Number(5, label=f"Neighbours (1-{MAX_NEIGHBOURS})", precision=0,
                              elem_id="neighbours-k")  # fmt: skip
                neighbours_run = gr.Button("Find neighbours", variant="primary",
                                           elem_id="neighbours-run")  # fmt: skip
                neighbours_out = gr.HTML(elem_id="neighbours-out")
            with gr.Tab("Model", id="model"):
                gr.HTML(guarded(facts_html)(explorer), elem_id="model-out")

        def bind(view: Callable[..., str]) -> Callable[..., str]:
            return guarded(functools.wraps(view)(functools.partial(view, explorer)))

        def pick(text: str):
            options = token_choices(explorer, text)
            return gr.Dropdown(choices=options, value=options[min(1, len(options) - 1)]
                               if options else None)  # fmt: skip

        raw = {"preprocess": False}  # the Explorer checks every value (module docstring)
        encode_inputs = [sentence, beam]
        encode_run.click(bind(encoding_html), encode_inputs, encode_out, api_name="encode", **raw)
        page.load(bind(encoding_html), encode_inputs, encode_out, api_name=False, **raw)
        sentence.submit(bind(encoding_html), encode_inputs, encode_out, api_name=False, **raw)
        sentence.change(pick, sentence, token, api_name=False, show_progress="hidden", **raw)
        resample_run.click(bind(resample_html), [sentence, token, source, r_n, r_tau, r_seed],
                           resample_out, api_name="resample", **raw)  # fmt: skip
        interpolate_run.click(bind(interpolate_html), [sentence, other, steps, method],
                              interpolate_out, api_name="interpolate", **raw)  # fmt: skip
        sample_run.click(bind(sample_html), [sentence, s_n, s_tau, s_seed], sample_out,
                         api_name="sample", **raw)  # fmt: skip
        prior_run.click(bind(prior_html), [p_n, p_len, p_seed], prior_out, api_name="prior",
                        **raw)  # fmt: skip
        neighbours_run.click(bind(neighbours_html), [sentence, k], neighbours_out,
                             api_name="neighbours", **raw)  # fmt: skip
    return page


def launch(
    page, host: str = "127.0.0.1", port: int = 7860, *, share: bool = False, block: bool = True
):
    """Serve the page on host:port; returns gradio's (app, local URL, share URL). gradio's
    upload route writes to a private folder, not the shared /tmp/gradio."""
    uploads = tempfile.mkdtemp(prefix="vat-explore-")
    page.vat_upload_dir = uploads
    atexit.register(shutil.rmtree, uploads, True)
    # gradio reads its upload folder from the environment when the server's app is made
    os.environ["GRADIO_TEMP_DIR"] = uploads
    # [host] is gradio's spelling of IPv6 hosts; tracebacks never reach the browser (views are
    # `guarded`); no Node process (ssr_mode)
    return page.launch(max_file_size=0, server_name=f"[{host}]" if ":" in host else host,
                       server_port=port, share=share, prevent_thread_lock=not block, quiet=True,
                       show_error=False, ssr_mode=False, mcp_server=False, pwa=False,
                       css=CSS)  # fmt: skip


def stop(page) -> None:
    page.close(verbose=False)
    uploads = getattr(page, "vat_upload_dir", None)
    if uploads:
        shutil.rmtree(uploads, ignore_errors=True)
