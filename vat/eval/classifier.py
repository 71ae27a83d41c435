"""SentEval's validation schemes (senteval/tools/validation.py) around the batched classifier:
l2reg chosen from SentEval's pytorch grid on scores rounded to 2 decimals (ties: the smaller)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import numpy as np
import torch

from vat.eval.batched_classifier import ClassifierConfig, Fitted, Group, fit_batched

PYTORCH_REGS = np.array([1e-5, 1e-4, 1e-3, 1e-2])  # SentEval: [10**t for t in range(-5, -1)]

PRESETS: dict[str, ClassifierConfig] = {
    # SentEval README: "prototyping" and "default config (best performance)"
    "prototyping": ClassifierConfig(),  # rmsprop, batch 128, tenacity 3, epoch_size 2, kfold 5
    "full": ClassifierConfig(optim="adam", batch_size=64, tenacity=5, epoch_size=4, kfold=10),
}


def make_config(
    preset: str = "prototyping", classifier: str = "logreg", nhid: int = 50
) -> ClassifierConfig:
    """'mlp' is one hidden sigmoid layer of `nhid` units trained with Adam (the paper's)."""
    cfg = PRESETS[preset]
    return replace(cfg, nhid=nhid, optim="adam") if classifier == "mlp" else cfg


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run on `n` intra-op threads: with tiny matmuls, thread hand-offs cost more than they save."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class FoldError(ValueError):
    """Too few examples for a k-fold split (scikit-learn's StratifiedKFold ValueError)."""


def stratified_kfold(
    y: np.ndarray, n_splits: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's (>= 0.22) StratifiedKFold(shuffle=True) splits, which SentEval uses."""
    rng = np.random.RandomState(seed)
    y = np.asarray(y)
    _, y_idx, y_inv = np.unique(y, return_index=True, return_inverse=True)
    _, class_perm = np.unique(y_idx, return_inverse=True)  # classes in order of appearance
    y_enc = class_perm[y_inv.ravel()]
    n_classes = len(y_idx)
    if np.all(n_splits > np.bincount(y_enc)):
        raise FoldError(
            f"{n_splits}-fold cross-validation needs a class with at least {n_splits} examples; "
            f"the class sizes are {np.bincount(y_enc).tolist()}"
        )
    y_order = np.sort(y_enc)
    allocation = np.asarray(
        [np.bincount(y_order[i::n_splits], minlength=n_classes) for i in range(n_splits)]
    )
    test_folds = np.empty(len(y), dtype="i")
    for k in range(n_classes):
        folds_for_class = np.arange(n_splits).repeat(allocation[:, k])
        rng.shuffle(folds_for_class)
        test_folds[y_enc == k] = folds_for_class
    idx = np.arange(len(y))
    return [(idx[test_folds != i], idx[test_folds == i]) for i in range(n_splits)]


def _select(scores: np.ndarray) -> tuple[int, float]:
    """SentEval's choice: the first maximum of the rounded scores."""
    i = int(np.argmax(scores))
    return i, float(scores[i])


def _tensors(
    X: np.ndarray, y: np.ndarray, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
    return Xt.to(device), torch.from_numpy(np.asarray(y, dtype=np.int64)).to(device)


def _accuracy_and_pred(
    fitted: Fitted, X: torch.Tensor, y: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        pred = torch.cat([fitted.logits(x).argmax(-1) for x in X.split(8192)], -1)  # (G, R, N)
        acc = (pred == y).float().mean(-1)
    return acc.cpu().numpy(), pred.cpu().numpy()


def inner_kfold(
    X: np.ndarray,
    y: np.ndarray,
    nclasses: int,
    cfg: ClassifierConfig,
    seed: int,
    device: torch.device,
) -> tuple[float, float]:
    """SentEval's InnerKFoldClassifier (MR, CR, SUBJ, MPQA), folds seeded 1111 as SentEval's."""
    Xt, yt = _tensors(X, y, device)
    fit = partial(fit_batched, Xt, yt, nclasses=nclasses, cfg=cfg, seed=seed)
    outer = stratified_kfold(y, cfg.kfold, 1111)
    groups, owners = [], []
    for o, (tr, _) in enumerate(outer):
        for itr, ite in stratified_kfold(y[tr], cfg.kfold, 1111):
            groups.append(Group(train=tr[itr], dev=tr[ite]))
            owners.append(o)
    acc = fit(groups, np.tile(PYTORCH_REGS, (len(groups), 1))).dev_accuracy()  # (G, R)
    devresults, optregs = [], []
    for o in range(len(outer)):
        rows = [g for g, own in enumerate(owners) if own == o]
        scores = np.round(100 * acc[rows].mean(0), 2)  # (R,) mean over inner folds
        i, best = _select(scores)
        devresults.append(best)
        optregs.append(PYTORCH_REGS[i])
    final = fit(
        [Group(train=tr, validation_split=0.05) for tr, _ in outer], np.array(optregs)[:, None]
    )
    testresults = []
    for o, (_, te) in enumerate(outer):
        a, _ = _accuracy_and_pred(_slice(final, o), Xt[te], yt[te])
        testresults.append(round(100 * float(a[0, 0]), 2))
    return round(float(np.mean(devresults)), 2), round(float(np.mean(testresults)), 2)


def _slice(f: Fitted, g: int) -> Fitted:
    s = slice(g, g + 1)
    return Fitted([p[s] for p in f.params], f.dev_correct[s], f.dev_size[s], f.nhid)


def kfold(
    train_X: np.ndarray,
    train_y: np.ndarray,
    test_X: np.ndarray,
    test_y: np.ndarray,
    nclasses: int,
    cfg: ClassifierConfig,
    seed: int,
    device: torch.device,
) -> tuple[float, float, np.ndarray]:
    """SentEval's KFoldClassifier (TREC, MRPC): (devacc, testacc, yhat)."""
    Xt, yt = _tensors(train_X, train_y, device)
    fit = partial(fit_batched, Xt, yt, nclasses=nclasses, cfg=cfg, seed=seed)
    folds = stratified_kfold(train_y, cfg.kfold, seed)
    fitted = fit(
        [Group(train=tr, dev=te) for tr, te in folds], np.tile(PYTORCH_REGS, (len(folds), 1))
    )
    i, devacc = _select(np.round(100 * fitted.dev_accuracy().mean(0), 2))
    whole = Group(train=np.arange(len(train_y)), validation_split=0.05)
    final = fit([whole], PYTORCH_REGS[None, i : i + 1])
    Xs, ys = _tensors(test_X, test_y, device)
    acc, pred = _accuracy_and_pred(final, Xs, ys)
    return devacc, round(100 * float(acc[0, 0]), 2), pred[0, 0]


def split_classifier(
    X: dict[str, np.ndarray],
    y: dict[str, np.ndarray],
    nclasses: int,
    cfg: ClassifierConfig,
    seed: int,
    device: torch.device,
) -> tuple[float, float]:
    """SentEval's SplitClassifier (SST2, SST5, SICKEntailment): (devacc, testacc). SentEval
    retrains the chosen reg, which with the same seed and data is the grid's model, reused."""
    ntr, ndv = len(y["train"]), len(y["dev"])
    Xt, yt = _tensors(
        np.concatenate([X["train"], X["dev"]]), np.concatenate([y["train"], y["dev"]]), device
    )
    group = Group(train=np.arange(ntr), dev=np.arange(ntr, ntr + ndv))
    fitted = fit_batched(Xt, yt, [group], PYTORCH_REGS[None, :], nclasses, cfg, seed)
    i, devacc = _select(np.round(100 * fitted.dev_accuracy()[0], 2))
    Xs, ys = _tensors(X["test"], y["test"], device)
    acc, _ = _accuracy_and_pred(fitted, Xs, ys)
    return devacc, round(100 * float(acc[0, i]), 2)


def f1_binary(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """F1 of the positive class (sklearn's f1_score default), in %."""
    tp = float(np.sum((y_pred == 1) & (y_true == 1)))
    fp = float(np.sum((y_pred == 1) & (y_true == 0)))
    fn = float(np.sum((y_pred == 0) & (y_true == 1)))
    return round(100 * (2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0), 2)
