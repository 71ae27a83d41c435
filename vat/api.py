"""`vat.load(model)`: one object to encode sentences, generate text and export a trained VAT.

    import vat

    model = vat.load("runs/vat")  # a run folder, .ckpt, exported folder, Hub id or shipped model
    features = model.encode(["A man plays a guitar.", "A dog runs."])  # (2, d) numpy
    model.similarity(features, features)                                # (2, 2) cosines
    model.reconstruct(["A man plays a guitar."], beam=5)
    model.sample(["A man plays a guitar."], num_samples=3, tau=1.0)
    model.interpolate("A man plays a guitar.", "A dog runs.")
    print(model.score(["A man plays a guitar."], samples=100).table())  # NLL, -ELBO, MI, AU, ...
    model.save_pretrained("my-vat", evaluate="STS12,STSBenchmark")

Arguments are checked before any work; a bad one is an OptionError naming the argument.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vat.data.paths import default_senteval_dir
from vat.errors import (
    OptionError,
    check_choice,
    check_count,
    check_optional_text,
    check_path,
    check_sentences,
    one_line,
)
from vat.eval import engine
from vat.eval.encoders import vat_encoder
from vat.eval.task_scores import task_scores
from vat.eval.tasks.registry import choose_tasks, expand_tasks
from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.features import POOLINGS, sentence_features
from vat.features.choice import ChosenFeatures, check_pooling, features_for, parse_spec
from vat.features.encoder import FeatureEncoder
from vat.features.fitting import DEFAULT_FIT_SENTENCES, FitOptions
from vat.generate.generator import DecodeOptions, VATGenerator
from vat.runtime import resolve_device
from vat.score.settings import DEFAULT_SAMPLES, ScoreSettings
from vat.score.table import ScoreTable, representation_pairs, score_table
from vat.share.export import export_model
from vat.share.folder import check_output_dir
from vat.share.hub import upload
from vat.share.loaded import LoadedVAT
from vat.share.resolve import load_model


def _check_features(features: object) -> None:
    """None, a spec string such as "mu/sif/pc1", a FeatureSpec or a FittedFeatures."""
    if features is not None and not isinstance(features, FittedFeatures):
        parse_spec(features)


def _vectors(x: Any, name: str) -> torch.Tensor:
    """Vectors (d,) or (N, d) as a float tensor, else an OptionError."""
    if torch.is_tensor(x):
        t = x
    else:
        try:
            t = torch.as_tensor(np.asarray(x, dtype=np.float32))
        except (TypeError, ValueError):
            raise OptionError(
                name, f"expected vectors (an array or tensor of numbers), got {type(x).__name__}"
            ) from None
    if t.dim() not in (1, 2) or t.shape[-1] == 0 or t.is_complex() or t.dtype == torch.bool:
        raise OptionError(
            name, f"expected vectors of shape (d,) or (N, d), got shape {tuple(t.shape)}"
        )
    return t.float()


def load(
    model: str | os.PathLike,
    device: str | torch.device | None = None,
    batch_size: int = 64,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> PretrainedVAT:
    """Read what every command's `--model` takes: a .ckpt, an exported or run folder, a
    shipped model or a Hub id (`revision`, `token`, `cache_dir` go to the download)."""
    if model is None:
        raise OptionError("model", "is required (a .ckpt, a folder, a run folder or a Hub id)")
    check_count(batch_size, "batch_size")
    check_optional_text(revision, "revision")
    check_path(cache_dir, "cache_dir", optional=True)
    if token is not None and not isinstance(token, str | bool):
        raise OptionError("token", f"must be a string, True, False or None, got {token!r:.60}")
    device = torch.device(resolve_device(device))
    loaded = load_model(model, device, revision=revision, token=token, cache_dir=cache_dir)
    return PretrainedVAT(loaded, batch_size=batch_size)


class PretrainedVAT:
    """A loaded VAT (`loaded`, read once) with the methods users call."""

    def __init__(self, loaded: LoadedVAT, batch_size: int = 64) -> None:
        self.loaded = loaded
        self.generator = VATGenerator.from_loaded(loaded, batch_size=batch_size)
        self._feature_encoders: dict[tuple, FeatureEncoder] = {}
        self._default_features: ChosenFeatures | None = None

    @property
    def model(self):
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def prior_std(self) -> float:
        return self.loaded.prior_std

    @property
    def dim(self) -> int:
        return int(self.model.config.d_model)

    @property
    def embedding_dim(self) -> int:
        """Width of the sentence features `encode` gives by default (`default_features`)."""
        return self.feature_encoder().dim

    @property
    def default_features(self) -> ChosenFeatures:
        """Which vectors `encode` gives when none are named, and why (resolved once)."""
        if self._default_features is None:
            self._default_features = features_for(self.loaded)
        return self._default_features

    @property
    def device(self) -> torch.device:
        return self.loaded.device

    def to(self, device: str | torch.device) -> PretrainedVAT:
        """Move the model to `device`; a failed move leaves it where it was."""
        target, before = torch.device(resolve_device(device)), self.device
        try:
            self.model.to(target)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            self.model.to(before)  # some tensors may have moved already
            raise OptionError(
                "device", f"cannot move the model to {target}: {one_line(e)}"
            ) from None
        return self

    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = 64,
        show_progress_bar: bool | None = None,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | torch.device | None = None,
        normalize_embeddings: bool = False,
        pooling: str | None = None,
        features: str | FeatureSpec | FittedFeatures | None = None,
    ) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """Sentence features as `SentenceTransformer.encode` returns them: the model's own
        (`default_features`), token means mu pooled with `pooling`, or a spec (`features`)."""
        batch, single = check_sentences(sentences)
        check_count(batch_size, "batch_size")
        if pooling is not None:
            check_choice(pooling, "pooling", POOLINGS)
        _check_features(features)
        if device is not None:
            self.to(device)
        if show_progress_bar is None:  # the default bar starts at 1000 sentences
            show_progress_bar = len(batch) >= 1000
        check_pooling(pooling, features)
        if features is None and pooling is not None:  # the token means mu, pooled as asked
            out = sentence_features(
                self.model, self.tokenizer, batch, pooling, batch_size, bool(show_progress_bar)
            )
        else:  # the spec named, else the model's own (default_features, the one rule)
            out = self.feature_encoder(features)(
                batch, batch_size=batch_size, progress=bool(show_progress_bar)
            )
        if normalize_embeddings:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.where(norms == 0, 1.0, norms)  # a zero vector stays zero
        if single:
            out = out[0]
        if convert_to_tensor or (single and not convert_to_numpy):
            return torch.from_numpy(out).to(self.device)  # one sentence: its vector (d,)
        if not convert_to_numpy:
            return list(torch.from_numpy(out).to(self.device).unbind(0))
        return out

    @staticmethod
    def similarity(a: Any, b: Any) -> torch.Tensor:
        """(N, M) cosine similarities of the rows of `a` and `b`, as sentence-transformers'."""
        ta, tb = _vectors(a, "a"), _vectors(b, "b")
        if ta.shape[-1] != tb.shape[-1]:
            raise OptionError(
                "b", f"vectors of width {tb.shape[-1]} against a's width {ta.shape[-1]}"
            )
        ta, tb = ta.reshape(-1, ta.shape[-1]), tb.reshape(-1, tb.shape[-1])
        ta = torch.nn.functional.normalize(ta, dim=-1)
        tb = torch.nn.functional.normalize(tb.to(ta.device), dim=-1)
        return ta @ tb.T

    def feature_encoder(
        self,
        features: str | FeatureSpec | FittedFeatures | None = None,
        *,
        fit_files: Sequence[str] | str | os.PathLike | None = None,
        fit_sentences: Sequence[str] | None = None,
        count_files: Sequence[str] | str | os.PathLike | None = None,
        n_fit: int = DEFAULT_FIT_SENTENCES,
        seed: int = 0,
        save: bool = True,
    ) -> FeatureEncoder:
        """A FeatureEncoder for a spec (default: the model's own), fitted on the data named."""
        _check_features(features)
        if isinstance(features, FittedFeatures):
            return FeatureEncoder(self.loaded, features)
        fit = FitOptions(
            fit_files=fit_files,
            fit_sentences=fit_sentences,
            count_files=count_files,
            n_fit=n_fit,
            seed=seed,
        )
        if features is None and not fit.names_data:
            return FeatureEncoder(self.loaded, self.default_features.fitted)  # resolved once
        key = (str(features), repr(fit), save)
        if key not in self._feature_encoders:
            fitted = features_for(self.loaded, features, fit, save=save).fitted
            self._feature_encoders[key] = FeatureEncoder(self.loaded, fitted)
        return self._feature_encoders[key]

    def save_pretrained(
        self,
        directory: str | os.PathLike,
        *,
        overwrite: bool = False,
        features: str | FeatureSpec | None = None,
        evaluate: str | Sequence[str] | None = None,
        data_dir: str | os.PathLike | None = None,
        license: str | None = None,
        language: str | None = None,
        repo_id: str | None = None,
        fit_files: Sequence[str] | None = None,
        count_files: Sequence[str] | None = None,
        space: bool = False,
        show_progress_bar: bool = False,
        train_data_dir: str | os.PathLike | None = None,
    ) -> Path:
        """Export to a folder others load (`vat export`), written atomically; `evaluate` scores
        its vectors on SentEval tasks (data in `data_dir`) for the card."""
        check_path(directory, "directory")
        check_path(data_dir, "data_dir", optional=True)
        check_path(train_data_dir, "train_data_dir", optional=True)
        for name, value in (("license", license), ("language", language), ("repo_id", repo_id)):
            check_optional_text(value, name)
        spec = None if features is None else parse_spec(features)
        tasks = check_export(directory, overwrite=overwrite, evaluate=evaluate)
        folder = data_dir if data_dir is not None else default_senteval_dir()
        if tasks:  # the evaluation data is found before the fit, not after it
            # a group (sts, all) means its members present under the folder, as in evaluate
            choice = choose_tasks(evaluate if isinstance(evaluate, str) else tasks, folder)
            if choice.absent:
                print(
                    f"warning: skipping {', '.join(choice.absent)}: no data under {folder}; "
                    f"evaluating {', '.join(choice.tasks)}",
                    file=sys.stderr,
                )
            tasks = choice.tasks
        if show_progress_bar and (spec is None or spec.needs_fit):
            what = features if features is not None else "the model's default spec"
            print(f"vat: fitting the folder's sentence features ({what})", file=sys.stderr)
        fit = FitOptions(fit_files=fit_files, count_files=count_files)
        # the folder holds its statistics: nothing is stored beside the model
        chosen = features_for(self.loaded, spec, fit, save=False, quiet=True)
        if chosen.fallback:
            print(f"warning: exporting {chosen.why}", file=sys.stderr)
        fitted, evaluation = chosen.fitted, None
        if tasks:
            encoder = vat_encoder(self.loaded, features=fitted)
            if show_progress_bar:
                print(
                    f"vat: evaluating {', '.join(tasks)} on the sentence features {fitted.spec}",
                    file=sys.stderr,
                )
            settings = engine.EvalSettings(
                device=str(self.device), progress=bool(show_progress_bar)
            )
            results, _ = engine.evaluate(encoder, tasks, folder, settings)
            evaluation = list(task_scores(results, tasks).values())
        return export_model(
            self.loaded,
            directory,
            features=fitted,
            evaluation=evaluation,
            overwrite=overwrite,
            license=license,
            language=language,
            repo_id=repo_id,
            space=bool(space),
            train_data_dir=train_data_dir,
        )

    def push_to_hub(
        self,
        repo_id: str,
        *,
        private: bool | None = None,
        token: str | bool | None = None,
        revision: str | None = None,
        commit_message: str = "Upload VAT",
        api: Any = None,
    ) -> Any:
        """Export to a temporary folder (`save_pretrained`) and upload it to `repo_id`."""
        if not isinstance(repo_id, str) or not repo_id.strip():
            raise OptionError(
                "repo_id", f"expected a Hub repo id such as user/name, got {repo_id!r:.60}"
            )
        check_optional_text(revision, "revision")
        if not isinstance(commit_message, str):
            raise OptionError("commit_message", f"must be a string, got {commit_message!r:.60}")
        with tempfile.TemporaryDirectory(prefix="vat-push-") as tmp:
            folder = self.save_pretrained(Path(tmp) / "model", repo_id=repo_id)
            return upload(
                folder,
                repo_id,
                private=private,
                token=token,
                revision=revision,
                commit_message=commit_message,
                api=api,
            )

    def score(
        self,
        sentences: Sequence[str],
        samples: int = DEFAULT_SAMPLES,
        *,
        batch_size: int = 32,
        diversity_samples: int = 5,
        prior_samples: int = 100,
        seed: int = 0,
        sts_pairs: str | os.PathLike | None = None,
        data_dir: str | os.PathLike | None = None,
        representation: bool = True,
        show_progress_bar: bool = False,
    ) -> ScoreTable:
        """The row text-VAE papers report, as `vat score` gives it (docs/score.md)."""
        sentences, _ = check_sentences(sentences)
        check_path(sts_pairs, "sts_pairs", optional=True)
        check_path(data_dir, "data_dir", optional=True)
        settings = ScoreSettings(
            samples=samples,
            batch_size=batch_size,
            diversity_samples=diversity_samples,
            prior_samples=prior_samples,
            seed=seed,
            progress=bool(show_progress_bar),
        )
        pairs = representation_pairs(sts_pairs, data_dir) if representation else None
        return score_table(self.loaded, sentences, settings, pairs)

    @staticmethod
    def _options(options: dict[str, Any]) -> DecodeOptions:
        """DecodeOptions from the generation keywords; `beam` above 1 means beam search."""
        options = dict(options)
        if "beam_size" in options:  # DecodeOptions' field: the Python and CLI name is beam
            raise OptionError("beam_size", "is not an option here; use beam")
        known = [
            "beam",
            *(f.name for f in dataclasses.fields(DecodeOptions) if f.name != "beam_size"),
        ]
        for name in options:
            if name not in known:
                raise OptionError(
                    name, f"unknown decoding option; the options are {', '.join(known)}"
                )
        if "beam" in options:
            options["beam_size"] = beam = check_count(options.pop("beam"), "beam")
            if beam > 1:
                options.setdefault("strategy", "beam")
        return DecodeOptions(**options)

    def reconstruct(self, sentences: Sequence[str], **options: Any) -> list[str]:
        """Decode each sentence from its token means Z = mu."""
        return self.generator.reconstruct(sentences, self._options(options))

    def sample(
        self,
        sentences: Sequence[str],
        num_samples: int = 5,
        tau: float = 1.0,
        seed: int | None = 0,
        **options: Any,
    ) -> list[list[str]]:
        """num_samples decodings per sentence of z_t = mu_t + tau sigma_t eps (Table 1)."""
        return self.generator.sample(sentences, num_samples, tau, self._options(options), seed)

    def resample_token(
        self,
        sentences: Sequence[str],
        positions: Sequence[int],
        num_samples: int = 5,
        tau: float = 1.0,
        seed: int | None = 0,
        source: str = "posterior",
        **options: Any,
    ) -> list[list[str]]:
        """`sample` redrawing only the latents at 0-based `positions` (Table 2)."""
        return self.generator.resample_token(
            sentences, positions, num_samples, tau, self._options(options), seed, source=source
        )  # type: ignore[arg-type]

    def interpolate(
        self,
        a: str,
        b: str,
        alphas: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
        method: str = "linear",
        **options: Any,
    ) -> list[str]:
        """Decodings along the path between two sentences' token means (Table 3)."""
        return self.generator.interpolate(a, b, alphas, method, self._options(options))  # type: ignore[arg-type]

    def prior(
        self,
        num_samples: int = 10,
        length: int | None = None,
        seed: int | None = 0,
        prior_std: float | None = None,
        **options: Any,
    ) -> list[tuple[int, str]]:
        """num_samples decodings of Z ~ N(0, s^2 I); (latent length, text) pairs."""
        return self.generator.prior(num_samples, length, self._options(options), seed, prior_std)

    def __repr__(self) -> str:
        return (
            f"PretrainedVAT({str(self.loaded.source.location)!r}, d={self.dim}, "
            f"prior_std={self.prior_std:g})"
        )


def require_loaded(model: object, function: str) -> None:
    """Refuse a path where a loaded model is expected: vat.load reads a model once."""
    if not isinstance(model, PretrainedVAT):
        raise OptionError(
            "model",
            f"{function} takes a loaded model, got {type(model).__name__} {str(model)[:80]!r}: "
            f"load it once with vat.load(...) and pass that",
        )


def check_export(
    directory: str | os.PathLike,
    *,
    overwrite: bool = False,
    evaluate: str | Sequence[str] | None = None,
) -> list[str]:
    """Check the output folder and `evaluate` before any work; the task names, expanded."""
    tasks: list[str] = []
    if evaluate is not None and not isinstance(evaluate, str):
        names, _ = check_sentences(evaluate, "evaluate")  # a list of task names
        evaluate = ",".join(names)
    if evaluate is not None and not evaluate.strip(", "):
        raise OptionError("evaluate", f"names no task, got {evaluate!r}")
    if evaluate:
        try:
            tasks = expand_tasks(evaluate)
        except OptionError as e:  # the task names' problem, said of this argument
            raise OptionError("evaluate", e.problem) from None
    check_output_dir(directory, overwrite)
    return tasks
