"""Every view of `vat explore` as plain Python, the page a thin layer over it; every input a
page can send is checked here (an OptionError naming the field)."""

from __future__ import annotations

import math
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from vat.errors import OptionError
from vat.explore.neighbours import Neighbour, NeighbourIndex
from vat.explore.wording import MarkedText, mark_changes, path_changes
from vat.generate.decoding import GREEDY
from vat.generate.generator import DecodeOptions, TruncationWarning
from vat.generate.latents import token_statistics

MAX_CHARS = 2000  # the model reads tens of words, so more is a paste gone wrong
MAX_SAMPLES = 20  # decodings one view shows (resample, sample, prior)
MAX_STEPS = 21  # points on an interpolation path, ends included
MAX_BEAM = 8
MAX_TAU = 10.0  # ten posterior sigmas from the mean: far past where decodings mean anything
MAX_NEIGHBOURS = 50
MAX_SEED = 2**31 - 1
ALLOWED_CONTROLS = "\t\n\r"  # whitespace a pasted sentence may carry: it becomes spaces


@contextmanager
def quiet_truncation() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        yield


@dataclass(frozen=True)
class TokenRow:
    """One latent z_t of a sentence: its subword and what its posterior carries."""

    position: int  # 0-based; the last is the </s> latent
    subword: str
    kl: float  # KL(q(z_t | x) || N(0, s^2 I)) in nats: the token's rate
    sigma: float  # mean posterior standard deviation over the d dimensions
    mu_norm: float


@dataclass(frozen=True)
class Encoding:
    """A sentence as the model reads it, its reconstruction and its token latents."""

    text: str
    reconstruction: str
    rows: tuple[TokenRow, ...]
    subwords: int  # read by the model, the </s> latent not counted
    cut_from: int | None  # the subword count of a sentence cut to the model's max_len

    @property
    def rate(self) -> float:
        return float(sum(r.kl for r in self.rows))


@dataclass(frozen=True)
class Resampling:
    reconstruction: str
    subword: str
    decodings: tuple[MarkedText, ...]  # marked against the reconstruction


@dataclass(frozen=True)
class PathPoint:
    alpha: float
    decoding: MarkedText  # marked against the point before it
    new: bool  # this wording's first appearance on the path


@dataclass(frozen=True)
class ModelFacts:
    rows: tuple[tuple[str, str], ...]
    scores: tuple[tuple[str, str, str, float], ...]  # (task, split, metric, value)


def check_sentence(text: object, name: str = "sentence") -> str:
    """A non-empty string of at most MAX_CHARS characters without control characters."""
    if not isinstance(text, str):
        raise OptionError(name, f"expected text, got {type(text).__name__}")
    for i, ch in enumerate(text):
        if unicodedata.category(ch) == "Cc" and ch not in ALLOWED_CONTROLS:
            raise OptionError(
                name, f"has a control character (U+{ord(ch):04X}) at character {i + 1}"
            )
        if unicodedata.category(ch) == "Cs":  # half a UTF-16 pair (JSON "\ud800"): no text
            raise OptionError(
                name, f"has a lone surrogate (U+{ord(ch):04X}) at character {i + 1}, not text"
            )
    text = " ".join(text.split())
    if not text:
        raise OptionError(name, "is empty: type a sentence")
    if len(text) > MAX_CHARS:
        raise OptionError(
            name,
            f"has {len(text):,} characters; a view takes at most {MAX_CHARS:,} (the model "
            "reads one sentence)",
        )
    return text


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)


def check_whole(value: object, name: str, low: int, high: int) -> int:
    """A whole number in [low, high] (or a float without fraction, as a number box sends)."""
    fraction = isinstance(value, float | np.floating) and not (
        math.isfinite(value) and value == int(value)
    )
    if not _is_number(value) or fraction:
        raise OptionError(name, f"must be a whole number in {low}..{high}, got {value!r}")
    if not low <= int(value) <= high:
        raise OptionError(name, f"must be in {low}..{high}, got {int(value)}")
    return int(value)


def check_tau(value: object, name: str = "tau") -> float:
    if not _is_number(value) or not (math.isfinite(value) and 0 <= value <= MAX_TAU):
        raise OptionError(name, f"must be a number in 0..{MAX_TAU:g}, got {value!r}")
    return float(value)


class Explorer:
    """The views over one loaded model, with an optional corpus for the neighbours view."""

    def __init__(
        self,
        model,
        corpus: Sequence[str] | None = None,
        *,
        corpus_name: str | None = None,
        progress: bool = False,
    ) -> None:
        from vat.api import require_loaded

        require_loaded(model, "Explorer")
        self.model, self.generator, self.corpus_name = model, model.generator, corpus_name
        self.index: NeighbourIndex | None = None
        if corpus is not None:
            lines = [s for s in (" ".join(x.split()) for x in corpus) if s]
            if not lines:
                raise OptionError("corpus", "holds no non-empty line")
            with quiet_truncation():  # long corpus lines are cut like every input
                vectors = model.encode(lines, show_progress_bar=progress)
            self.index = NeighbourIndex(lines, vectors)

    @property
    def max_len(self) -> int:
        return self.generator.max_len

    @property
    def feature_spec(self) -> str:
        return str(self.model.default_features.spec)

    def subwords(self, text: str) -> list[str]:
        """The labels of a sentence's latents ("</s>" last), [] for text a view would refuse."""
        try:
            text = check_sentence(text)
        except OptionError:
            return []
        return self._labels(self.model.tokenizer.encode(text))

    def _labels(self, ids: list[int]) -> list[str]:
        return [self.model.tokenizer.token_text(i) for i in ids[: self.max_len - 1]] + ["</s>"]

    def encode(self, text: str, beam: int = 1) -> Encoding:
        """The reconstruction and one TokenRow per latent."""
        text = check_sentence(text)
        beam = check_whole(beam, "beam", 1, MAX_BEAM)
        ids = self.model.tokenizer.encode(text)
        options = GREEDY if beam == 1 else DecodeOptions(strategy="beam", beam_size=beam)
        with quiet_truncation():  # the page says it was cut; no terminal line
            ((mu, logvar, s),) = self.generator.latents([text])  # (T, d) each; s (k,) or None
        # the reconstruction, from mu (and the sentence latent's mean, if the model has one)
        ((best, *_),) = self.generator.decode([mu], options, None, None if s is None else [s])
        kl, sigma, norm = token_statistics(mu.float(), logvar.float(), self.model.prior_std)
        labels = self._labels(ids)
        rows = tuple(
            TokenRow(t, labels[t], float(kl[t]), float(sigma[t]), float(norm[t]))
            for t in range(mu.shape[0])
        )
        kept = len(rows) - 1
        cut_from = len(ids) if len(ids) > kept else None
        return Encoding(text, self.generator.text(best), rows, kept, cut_from)

    def resample(
        self,
        text: str,
        position: int,
        num_samples: int = 5,
        tau: float = 1.0,
        source: str = "posterior",
        seed: int = 0,
    ) -> Resampling:
        """Greedy decodings redrawing only the latent at `position`."""
        text = check_sentence(text)
        labels = self.subwords(text)
        position = check_whole(position, "position", 0, len(labels) - 1)
        n = check_whole(num_samples, "num_samples", 1, MAX_SAMPLES)
        tau = check_tau(tau)
        seed = check_whole(seed, "seed", 0, MAX_SEED)
        if source not in ("posterior", "prior"):
            raise OptionError("source", f"must be 'posterior' or 'prior', got {source!r}")
        with quiet_truncation():
            (recon,) = self.model.reconstruct([text])
            (texts,) = self.model.resample_token(
                [text], [position], num_samples=n, tau=tau, seed=seed, source=source
            )
        return Resampling(recon, labels[position], tuple(mark_changes(recon, t) for t in texts))

    def interpolate(
        self, a: str, b: str, steps: int = 7, method: str = "linear"
    ) -> list[PathPoint]:
        """Greedy decodings of `steps` evenly spaced points between two sentences' token means."""
        a, b = check_sentence(a, "sentence"), check_sentence(b, "other_sentence")
        steps = check_whole(steps, "steps", 2, MAX_STEPS)
        if method not in ("linear", "slerp"):
            raise OptionError("method", f"must be 'linear' or 'slerp', got {method!r}")
        alphas = [i / (steps - 1) for i in range(steps)]
        with quiet_truncation():
            texts = self.model.interpolate(a, b, alphas=alphas, method=method)
        return [PathPoint(x, m, new) for x, (m, new) in zip(alphas, path_changes(texts))]

    def sample(
        self, text: str, num_samples: int = 5, tau: float = 1.0, seed: int = 0
    ) -> tuple[str, list[MarkedText]]:
        """The reconstruction and variational samples marked against it."""
        text = check_sentence(text)
        n = check_whole(num_samples, "num_samples", 1, MAX_SAMPLES)
        tau = check_tau(tau)
        seed = check_whole(seed, "seed", 0, MAX_SEED)
        with quiet_truncation():
            (recon,) = self.model.reconstruct([text])
            (texts,) = self.model.sample([text], num_samples=n, tau=tau, seed=seed)
        return recon, [mark_changes(recon, t) for t in texts]

    def prior(
        self, num_samples: int = 5, length: int | None = None, seed: int = 0
    ) -> list[tuple[int, str]]:
        """(T, text) decodings of Z ~ N(0, s^2 I); `length` None or 0 draws T."""
        n = check_whole(num_samples, "num_samples", 1, MAX_SAMPLES)
        if length is not None:
            length = check_whole(length, "length", 0, self.max_len) or None
        seed = check_whole(seed, "seed", 0, MAX_SEED)
        return self.model.prior(num_samples=n, length=length, seed=seed)

    def neighbours(self, text: str, k: int = 5) -> list[Neighbour]:
        """The k corpus sentences nearest to `text` by cosine of `feature_spec` features."""
        text = check_sentence(text)
        k = check_whole(k, "k", 1, MAX_NEIGHBOURS)
        if self.index is None:
            raise OptionError("corpus", "none was loaded: start vat explore with --corpus FILE")
        with quiet_truncation():
            query = self.model.encode([text])[0]
        return self.index.search(query, k)

    def facts(self) -> ModelFacts:
        """What the model card says of the model, and the scores stored with it."""
        loaded = self.model.loaded
        cfg, training = loaded.config, _mapping(loaded.training)
        metrics = _mapping(training.get("metrics"))
        rows: list[tuple[str, str]] = [
            ("model", f"{loaded.source.location} ({loaded.source.kind})"),
            (
                "architecture",
                f"{cfg.n_encoder_layers} + {cfg.n_decoder_layers} layers, {cfg.n_heads} heads, "
                f"d = {cfg.d_model}, feed-forward {cfg.d_ff}, max_len {cfg.max_len}",
            ),
            ("vocabulary", f"{cfg.vocab_size:,} subwords"),
            ("prior", f"N(0, s² I), s = {loaded.prior_std:g}"),
        ]
        for key, label in (("val/kl", "rate (validation)"), ("train/kl", "rate (training)")):
            if _is_number(value := metrics.get(key)) and math.isfinite(value):
                rows.append((label, f"{metrics[key]:.2f} nats per token"))
        for key, label in (
            ("tokens_seen", "training tokens"),
            ("sentences_seen", "training sentences"),
            ("global_step", "optimizer steps"),
        ):
            if type(training.get(key)) is int:
                rows.append((label, f"{training[key]:,}"))
        data = _mapping(training.get("data"))
        files = data.get("train_files")
        if files:  # what the model says it was trained on: a label, shown as text
            shown = files if isinstance(files, list) else [files]
            rows.append(("training data", ", ".join(str(f) for f in shown)))
        elif data.get("hf_dataset"):
            rows.append(("training data", f"Hub dataset {data['hf_dataset']}"))
        rows.append(("sentence features", self.feature_spec))
        if self.index is not None:
            rows.append(
                ("neighbours corpus", f"{len(self.index):,} lines of {self.corpus_name or 'text'}")
            )
        scores = tuple(
            (str(s["task"]), str(s["split"]), str(s["metric"]), float(s["value"]))
            for s in loaded.evaluation
        )
        return ModelFacts(tuple(rows), scores)


def _mapping(value: object) -> dict:
    """A record's section as a dict; a hand-edited non-dict shows nothing rather than failing."""
    return value if isinstance(value, dict) else {}
