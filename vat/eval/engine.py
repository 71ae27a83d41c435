"""Run SentEval tasks on any sentence encoder `f(list[str]) -> (n, d)`, encoding each distinct
sentence once, into SentEval's result layout (plus the cosine protocol of STS-B and SICK-R)."""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr
from tqdm.auto import tqdm

from vat.errors import OptionError, VatError, check_choice, check_count, check_path
from vat.eval import classifier as clf
from vat.eval.batched_classifier import ClassifierConfig
from vat.eval.sts import RelatednessRegressor, correlations, cosine_scores, sts_results
from vat.eval.tasks.files import Pairs, Singles, TaskData
from vat.eval.tasks.registry import choose_tasks, load_task
from vat.runtime import resolve_device

# What the harness scores (SentEval's batcher); vat_encoder wraps a FeatureEncoder as one.
SentenceEncoder = Callable[[list[str]], np.ndarray]
RELATEDNESS_MODES = ("cosine", "regressor", "both")


@dataclass(frozen=True)
class EvalSettings:
    """What SentEval calls `params`, minus the task path."""

    preset: str = "prototyping"  # or 'full' (SentEval README's configs, classifier.PRESETS)
    classifier: str = "logreg"  # or 'mlp' (one sigmoid hidden layer of `nhid` units, Adam)
    nhid: int = 50
    seed: int = 1111  # SentEval's seed (classifier init and data order)
    relatedness: str = "cosine"  # STS-B / SICK-R protocol: 'cosine', 'regressor' or 'both'
    batch_size: int = 128  # sentences per encoder call
    device: str = "cpu"  # where classifiers train
    progress: bool = True

    def __post_init__(self) -> None:
        # numpy's legacy seeding, which SentEval's protocol uses, takes 32-bit seeds
        try:
            seed = operator.index(self.seed)
        except TypeError:
            seed = None
        if seed is None or not 0 <= seed < 2**32:
            raise OptionError(
                "seed",
                f"SentEval's seed must be a whole number in 0..{2**32 - 1}, got {self.seed!r}",
            )
        check_choice(self.preset, "preset", tuple(clf.PRESETS))
        check_choice(self.classifier, "classifier", ("logreg", "mlp"))
        check_choice(self.relatedness, "relatedness", RELATEDNESS_MODES)
        if self.classifier == "mlp":  # SentEval's nhid 0 is its logreg: not checked there
            check_count(self.nhid, "nhid")
        check_count(self.batch_size, "batch_size")

    def classifier_config(self) -> ClassifierConfig:
        return clf.make_config(self.preset, self.classifier, self.nhid)

    def torch_device(self) -> torch.device:
        return torch.device(resolve_device(self.device))


@dataclass
class FeatureCache:
    """Encodes each distinct sentence once and checks what the encoder returns."""

    encoder: SentenceEncoder
    batch_size: int = 128
    progress: bool = True
    cache: dict[str, np.ndarray] = field(default_factory=dict)
    dim: int | None = None

    def encode_new(self, sentences: Sequence[str], task: str) -> None:
        todo = sorted(
            {s for s in sentences if s not in self.cache}, key=lambda s: (len(s.split()), s)
        )
        if not todo:
            return
        quiet = not self.progress
        bar = tqdm(total=len(todo), desc=f"encode {task}", unit="sent", disable=quiet, leave=False)
        for i in range(0, len(todo), self.batch_size):
            batch = todo[i : i + self.batch_size]
            # SentEval's example batchers turn an empty sentence into '.'
            self._store(batch, self.encoder([s if s else "." for s in batch]), task)
            bar.update(len(batch))
        bar.close()

    def _store(self, batch: list[str], out: object, task: str) -> None:
        if isinstance(out, torch.Tensor):
            out = out.detach().cpu().numpy()
        try:
            arr = np.asarray(out)
        except (ValueError, TypeError) as e:
            raise VatError(
                f"task {task}: the encoder returned something that is not an array ({e})"
            ) from None
        if arr.ndim != 2 or arr.shape[0] != len(batch) or arr.shape[1] == 0:
            raise VatError(
                f"task {task}: the encoder returned shape {tuple(arr.shape)} "
                f"for {len(batch)} sentences; expected ({len(batch)}, d)"
            )
        if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
            raise VatError(
                f"task {task}: the encoder returned dtype {arr.dtype}; expected real numbers"
            )
        if self.dim is None:
            self.dim = arr.shape[1]
        elif arr.shape[1] != self.dim:
            raise VatError(
                f"task {task}: the encoder returned {arr.shape[1]}-d vectors "
                f"after {self.dim}-d ones"
            )
        if not np.all(np.isfinite(arr)):
            bad = int(np.where(~np.all(np.isfinite(arr), axis=1))[0][0])
            raise VatError(
                f"task {task}: the encoder returned NaN or inf for the sentence {batch[bad]!r}"
            )
        # keep float64 if the encoder gives it; SentEval computes in the encoder's dtype
        arr = arr.astype(np.float64 if arr.dtype == np.float64 else np.float32, copy=False)
        self.cache.update(zip(batch, arr))

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        """(n, d) features of sentences (already encoded; the loaders refuse empty splits)."""
        return np.stack([self.cache[s] for s in sentences])


def pair_cosines(pairs: Pairs, feats: FeatureCache) -> np.ndarray:
    """(N,) cosine of each pair's two sentence vectors (already in the cache)."""
    return cosine_scores(feats(pairs.a), feats(pairs.b))


def cosine_correlations(
    encoder: SentenceEncoder, pairs: Pairs, batch_size: int = 128, name: str = "pairs"
) -> dict:
    """The cosine protocol's correlations on one split of pairs, as `evaluate` reports them."""
    feats = FeatureCache(encoder, batch_size, progress=False)
    feats.encode_new(pairs.a + pairs.b, name)
    return correlations(pair_cosines(pairs, feats), pairs.y)


def run_task(data: TaskData, feats: FeatureCache, settings: EvalSettings) -> dict[str, dict]:
    """Results of one loaded task (features already in the cache), keyed by result name."""
    cfg, device = settings.classifier_config(), settings.torch_device()
    seed, name = settings.seed, data.name
    if data.kind == "sts":
        per = {k: (pair_cosines(p, feats), p.y) for k, p in data.splits.items()}
        return {name: sts_results(per)}
    X = {k: _features(v, feats) for k, v in data.splits.items()}
    y = {k: v.y for k, v in data.splits.items()}
    if data.kind == "relatedness":
        out: dict[str, dict] = {}
        if settings.relatedness in ("cosine", "both"):
            per = {k: (pair_cosines(p, feats), p.y) for k, p in data.splits.items() if k != "train"}
            out[f"{name}-cosine"] = {k: correlations(s, g) for k, (s, g) in per.items()}
        if settings.relatedness in ("regressor", "both"):
            out[name] = _relatedness_regressor(X, y, seed)
        return out
    if data.kind == "kfold":
        devacc, acc = clf.inner_kfold(X["all"], y["all"], data.nclasses, cfg, seed, device)
        n = len(y["all"])
        return {name: {"devacc": devacc, "acc": acc, "ndev": n, "ntest": n}}
    if data.kind == "traintest":
        devacc, acc, yhat = clf.kfold(
            X["train"], y["train"], X["test"], y["test"], data.nclasses, cfg, seed, device
        )
        res = {"devacc": devacc, "acc": acc}
        if name == "MRPC":
            res["f1"] = clf.f1_binary(y["test"], yhat)
        return {name: {**res, "ndev": len(y["train"]), "ntest": len(y["test"])}}
    devacc, acc = clf.split_classifier(X, y, data.nclasses, cfg, seed, device)  # "split"
    return {name: {"devacc": devacc, "acc": acc, "ndev": len(y["dev"]), "ntest": len(y["test"])}}


def _features(split: Pairs | Singles, feats: FeatureCache) -> np.ndarray:
    """A split's classifier inputs; pairs as SentEval's [|u - v|, u * v] (MRPC, SICK, STS-B)."""
    if isinstance(split, Pairs):
        u, v = feats(split.a), feats(split.b)
        return np.c_[np.abs(u - v), u * v]
    return feats(split.x)


def _relatedness_regressor(X: dict, y: dict, seed: int) -> dict:
    """SentEval's SICKRelatednessEval.run / STSBenchmarkEval: regressor on pair features."""
    devpr, yhat = RelatednessRegressor(seed=seed).fit_predict(
        X["train"], y["train"], X["dev"], y["dev"], X["test"]
    )
    # SentEval maps an undefined correlation (constant predictions) to 0
    pr, sr = (fn(yhat, y["test"])[0] if np.ptp(yhat) > 0 else 0.0 for fn in (pearsonr, spearmanr))
    return {
        "devpearson": float(devpr),
        "pearson": float(np.nan_to_num(pr)),
        "spearman": float(np.nan_to_num(sr)),
        "mse": float(np.mean((yhat - y["test"]) ** 2)),
        "ndev": len(y["dev"]),
        "ntest": len(y["test"]),
    }


def evaluate(
    encoder: SentenceEncoder,
    tasks: str | Sequence[str],
    data_dir: str | Path,
    settings: EvalSettings | None = None,
    on_result: Callable[[str, dict, float], None] | None = None,
) -> tuple[dict, dict[str, dict[str, float]]]:
    """(results in SentEval's layout, {task: {"encode": s, "total": s}}) of `encoder` on SentEval
    tasks or groups; every task is loaded before any encoding, so a missing file fails fast."""
    settings = EvalSettings() if settings is None else settings  # checked when made
    if not isinstance(settings, EvalSettings):
        raise OptionError("settings", f"expected an EvalSettings, got {type(settings).__name__}")
    if not callable(encoder):
        raise OptionError(
            "encoder", f"expected a function of a list of sentences, got {type(encoder).__name__}"
        )
    check_path(data_dir, "data_dir")
    names = choose_tasks(tasks, data_dir).tasks
    loaded = [load_task(data_dir, t) for t in names]
    feats = FeatureCache(encoder, settings.batch_size, settings.progress)
    results: dict = {}
    seconds: dict[str, dict[str, float]] = {}
    bar = tqdm(loaded, desc="SentEval tasks", unit="task", disable=not settings.progress)
    # classifiers are loops of tiny ops: one CPU thread is faster (encoders keep all threads)
    threads = 1 if settings.torch_device().type == "cpu" else torch.get_num_threads()
    for data in bar:
        bar.set_postfix_str(data.name)
        t0 = time.perf_counter()
        feats.encode_new(data.sentences(), data.name)
        t1 = time.perf_counter()
        with clf.torch_threads(threads):
            try:
                res = run_task(data, feats, settings)
            except clf.FoldError as e:  # SentEval's folds need more examples than the files hold
                raise VatError(  # the data's fault, so the folder is named, not an option
                    f"{data.name}: too few examples in {data.path} for the {settings.preset} "
                    f"preset's folds: {e}"
                ) from None
        t2 = time.perf_counter()
        seconds[data.name] = {"encode": round(t1 - t0, 3), "total": round(t2 - t0, 3)}
        results.update(res)
        if on_result:
            for k, v in res.items():
                on_result(k, v, t2 - t0)
    return results, seconds
