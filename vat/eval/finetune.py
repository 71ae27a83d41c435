"""Fine-tuning mode (the paper's Table 5, bottom): a fresh copy of the encoder and a linear layer on
pooled mu, trained per task; pairs are one input, A </s> B; `task_splits` says the splits."""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from vat.errors import OptionError, VatError, check_count, check_number, did_you_mean
from vat.eval.tasks.files import Pairs, Singles, TaskData
from vat.eval.tasks.registry import TRANSFER_TASKS, choose_tasks, load_task
from vat.features import POOLINGS, pool
from vat.share.loaded import LoadedVAT, takes_loaded
from vat.tokenizer import EOS_ID, make_batch


@dataclass(frozen=True)
class FinetuneSettings:
    epochs: int = 5
    lr: float = 1e-4  # Adam learning rate for encoder and head
    batch_size: int = 32
    pooling: str = "mean"
    seed: int = 1111
    device: str = "cpu"
    progress: bool = True

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise OptionError(  # a command shows --pooling
                "pooling",
                f"for fine-tuning must be one of {', '.join(POOLINGS)}, "
                f"got {self.pooling!r}{did_you_mean(self.pooling, POOLINGS)}",
            )
        check_count(self.epochs, "epochs")
        check_count(self.batch_size, "batch_size")
        check_number(self.lr, "lr", low=0, low_open=True)


def _split_ids(n: int, fractions: tuple[float, ...], seed: int) -> list[np.ndarray]:
    perm = np.random.RandomState(seed).permutation(n)
    cuts = np.cumsum([int(round(f * n)) for f in fractions[:-1]])
    return np.split(perm, cuts)


def _examples(split: Pairs | Singles, tokenizer, max_len: int) -> list[list[int]]:
    """Subword ids per example; a pair is A </s> B (truncated to the model's max_len)."""
    if isinstance(split, Pairs):
        a, b = tokenizer.encode_batch(split.a), tokenizer.encode_batch(split.b)
        ids = [x + [EOS_ID] + y for x, y in zip(a, b)]
    else:
        ids = tokenizer.encode_batch(split.x)
    return [s[: max_len - 1] for s in ids]


def task_splits(data: TaskData, seed: int) -> dict[str, Pairs | Singles]:
    """train/dev/test for fine-tuning."""
    if data.kind == "split":
        return dict(data.splits)
    if data.kind == "traintest":
        tr = data.splits["train"]
        dev_i, train_i = _split_ids(len(tr), (0.1, 0.9), seed)
        return {
            "train": _subset(tr, train_i),
            "dev": _subset(tr, dev_i),
            "test": data.splits["test"],
        }
    s = data.splits["all"]  # "kfold": finetune_tasks refuses the tasks that are not classification
    train_i, dev_i, test_i = _split_ids(len(s), (0.8, 0.1, 0.1), seed)
    return {"train": _subset(s, train_i), "dev": _subset(s, dev_i), "test": _subset(s, test_i)}


def _subset(s: Pairs | Singles, idx: np.ndarray) -> Pairs | Singles:
    if isinstance(s, Pairs):
        return Pairs([s.a[i] for i in idx], [s.b[i] for i in idx], s.y[idx])
    return Singles([s.x[i] for i in idx], s.y[idx])


class _Classifier(torch.nn.Module):
    """vat encoder -> pooled mu (B, d) -> linear (B, C)."""

    def __init__(self, model, nclasses: int, pooling: str) -> None:
        super().__init__()
        self.model, self.pooling = model, pooling
        self.head = torch.nn.Linear(model.config.d_model, nclasses)

    def forward(self, ids: list[list[int]]) -> torch.Tensor:
        device = self.head.weight.device
        src = make_batch(ids)["src"].to(device)  # (B, T)
        post = self.model.encode(src)  # mu, logvar (B, T, d)
        lengths = torch.tensor([len(x) for x in ids], device=device)
        return self.head(pool(post.mu, lengths, self.pooling, post.logvar))  # (B, C)


def _accuracy(net: _Classifier, ids: list[list[int]], y: np.ndarray, batch_size: int) -> float:
    net.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(ids), batch_size):
            pred = net(ids[i : i + batch_size]).argmax(-1).cpu().numpy()
            correct += int((pred == y[i : i + batch_size]).sum())
    return 100.0 * correct / max(1, len(ids))


def finetune_task(loaded: LoadedVAT, data: TaskData, settings: FinetuneSettings) -> dict:
    """Fine-tune a copy of `loaded`'s model on one task (the loaded weights stay as they were)."""
    torch.manual_seed(settings.seed)
    model = copy.deepcopy(loaded.model).to(settings.device)
    splits = task_splits(data, settings.seed)
    ids = {k: _examples(v, loaded.tokenizer, model.config.max_len) for k, v in splits.items()}
    ys = {k: np.asarray(v.y) for k, v in splits.items()}
    net = _Classifier(model, data.nclasses, settings.pooling).to(settings.device)
    opt = torch.optim.Adam(net.parameters(), lr=settings.lr)
    rng = np.random.RandomState(settings.seed)
    best = (-1.0, 0.0, 0)  # dev acc, test acc, epoch
    n = len(ids["train"])
    steps, quiet = range(0, n, settings.batch_size), not settings.progress
    for epoch in range(1, settings.epochs + 1):
        net.train()
        perm = rng.permutation(n)
        bar = tqdm(steps, desc=f"finetune {data.name} epoch {epoch}", disable=quiet, leave=False)
        for i in bar:
            idx = perm[i : i + settings.batch_size]
            logits = net([ids["train"][j] for j in idx])
            loss = torch.nn.functional.cross_entropy(
                logits, torch.as_tensor(ys["train"][idx], device=logits.device)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
        dev = _accuracy(net, ids["dev"], ys["dev"], 64)
        if dev > best[0]:
            best = (dev, _accuracy(net, ids["test"], ys["test"], 64), epoch)
    return {
        "devacc": round(best[0], 2),
        "acc": round(best[1], 2),
        "ndev": len(ys["dev"]),
        "ntest": len(ys["test"]),
        "best_epoch": best[2],
        "epochs": settings.epochs,
    }


@takes_loaded
def finetune_tasks(
    loaded: LoadedVAT,
    tasks: str | list[str],
    data_dir: str | os.PathLike,
    settings: FinetuneSettings,
) -> tuple[dict, dict[str, float]]:
    """Fine-tune on each classification task; STS tasks are refused (nothing to train)."""
    names = choose_tasks(tasks, data_dir).tasks  # a group: its members present
    if bad := [t for t in names if t not in TRANSFER_TASKS]:
        raise VatError(f"fine-tuning covers {', '.join(TRANSFER_TASKS)}; not {', '.join(bad)}")
    task_data = [load_task(data_dir, t) for t in names]
    results, seconds = {}, {}
    for data in task_data:
        t0 = time.perf_counter()
        results[data.name] = finetune_task(loaded, data, settings)
        seconds[data.name] = round(time.perf_counter() - t0, 3)
    return results, seconds
