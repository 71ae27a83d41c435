"""Length-bucketed, resumable, DDP-sharded batches and their collation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from vat.tokenizer import BOS_ID, EOS_ID, PAD_ID

PAD_MULTIPLE = 8  # padded lengths for token budgets and compiled steps: few shapes


def padded_length(lengths: np.ndarray, multiple: int, max_len: int) -> np.ndarray:
    """`lengths` rounded up to a multiple of `multiple`, never beyond max_len."""
    return np.minimum(-(-lengths // multiple) * multiple, max_len)


def collate_ids(
    tokens: np.ndarray, offsets: np.ndarray, index: Sequence[int], max_len: int, multiple: int = 1
) -> dict[str, torch.Tensor]:
    """The batch of sentences `index` as `vat.tokenizer.make_batch` lays it out, (B, T) int64."""
    index = np.asarray(index, dtype=np.int64)
    starts = offsets[index]
    lengths = np.minimum(offsets[index + 1] - starts, max_len - 1)  # (B,) subwords, no </s>
    T = int(padded_length(np.asarray(lengths.max() + 1), multiple, max_len))
    pos = np.arange(T)[None, :]  # (1, T)
    inside = pos < lengths[:, None]  # (B, T) real subwords
    gathered = tokens[np.where(inside, starts[:, None] + pos, 0)]  # one gather, (B, T)
    src = np.where(inside, gathered, PAD_ID).astype(np.int64)
    rows = np.arange(len(index))
    src[rows, lengths] = EOS_ID
    tgt_in = np.full_like(src, PAD_ID)
    tgt_in[:, 0] = BOS_ID
    tgt_in[:, 1:] = np.where(inside[:, : T - 1], src[:, : T - 1], PAD_ID)
    src_t = torch.from_numpy(src)
    return {"src": src_t, "tgt_in": torch.from_numpy(tgt_in), "tgt_out": src_t.clone()}


def cut_token_batches(
    lengths: np.ndarray, max_tokens: int, num_replicas: int, multiple: int, max_len: int
) -> list[tuple[int, int]]:
    """Cut ascending `lengths` into [i, j) global batches whose per-rank share fits max_tokens.
    [i, j) fits iff h[j] = j - R * cap[j - 1] <= i (cap = max_tokens // padded length), and h
    increases strictly: one searchsorted per batch."""
    cap = max_tokens // padded_length(lengths, multiple, max_len)
    h = np.arange(1, len(lengths) + 1) - num_replicas * cap
    cuts = []
    i = 0
    while i < len(lengths):
        j = max(int(np.searchsorted(h, i, side="right")), i + 1)
        cuts.append((i, j))
        i = j
    return cuts


class BucketBatchSampler(Sampler[list[int]]):
    """Length-bucketed batches that shuffle, resume mid-epoch, and shard under DDP: every rank
    builds the same global batches (length-sorted within shuffled pools) and takes its
    interleaved share, so 1 process with batch 8 sees what 2 with batch 4 see together.
    `lengths` count the </s>."""

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        pool_batches: int = 100,
        num_replicas: int = 1,
        rank: int = 0,
        max_tokens: int | None = None,
        pad_multiple: int = PAD_MULTIPLE,
        max_len: int | None = None,
    ) -> None:
        # batch_size >= 1 and max_tokens >= max_len: checked with the data options
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.max_len = int(max_len if max_len is not None else (self.lengths.max(initial=1)))
        self.batch_size, self.max_tokens, self.pad_multiple = batch_size, max_tokens, pad_multiple
        self.shuffle, self.seed, self.pool_batches = shuffle, seed, pool_batches
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        self.start_batch = 0  # batches of the current epoch to skip (mid-epoch resume)
        self._memo: tuple[int, list[np.ndarray]] | None = None

    @property
    def sampler(self) -> BucketBatchSampler:
        # how a batch sampler receives Lightning's `batch_sampler.sampler.set_epoch(epoch)`
        return self

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.start_batch = 0
        self.epoch = epoch

    def _pools(self, order: np.ndarray) -> Iterator[np.ndarray]:
        n = len(order)
        if self.max_tokens is None:
            pool = self.batch_size * self.num_replicas * self.pool_batches
            yield from (order[s : s + pool] for s in range(0, n, pool))
            return
        budget = self.pool_batches * self.max_tokens * self.num_replicas
        ends = np.cumsum(self.lengths[order])
        cuts = np.searchsorted(ends, np.arange(budget, ends[-1] + budget, budget), side="right")
        start = 0
        for end in cuts:
            if end > start:
                yield order[start:end]
                start = end
        if start < n:
            yield order[start:]

    def global_batches(self) -> list[np.ndarray]:
        if self._memo is not None and self._memo[0] == self.epoch:
            return self._memo[1]
        n = len(self.lengths)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(n, generator=g).numpy() if self.shuffle else np.arange(n)
        size = self.batch_size * self.num_replicas
        batches: list[np.ndarray] = []
        for chunk in self._pools(order) if n else []:
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            if self.max_tokens is None:
                batches.extend(chunk[i : i + size] for i in range(0, len(chunk), size))
            else:
                lengths = self.lengths[chunk]
                cuts = cut_token_batches(
                    lengths, self.max_tokens, self.num_replicas, self.pad_multiple, self.max_len
                )
                batches.extend(chunk[i:j] for i, j in cuts)
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
        self._memo = (self.epoch, batches)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        for b in self.global_batches()[self.start_batch :]:
            if len(b) % self.num_replicas:
                b = np.resize(b, len(b) + self.num_replicas - len(b) % self.num_replicas)
            # interleaved shares: every rank gets all lengths, so ranks carry equal tokens
            yield b[self.rank :: self.num_replicas].tolist()

    def __len__(self) -> int:
        # the whole epoch even mid-epoch: Lightning's counter resumes at `start_batch`
        return len(self.global_batches())


class ResumableDataLoader(DataLoader):
    """A DataLoader whose position Lightning checkpoints, so a killed run resumes mid-epoch."""

    def __init__(self, dataset: Dataset, batch_sampler: BucketBatchSampler, **kwargs) -> None:
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        self._yielded = 0

    def __iter__(self):
        sampler: BucketBatchSampler = self.batch_sampler
        self._yielded = sampler.start_batch
        for batch in super().__iter__():
            self._yielded += 1
            yield batch
        sampler.start_batch = 0

    def state_dict(self) -> dict:
        return {"epoch": self.batch_sampler.epoch, "batches_consumed": self._yielded}

    def load_state_dict(self, state: dict) -> None:
        self.batch_sampler.epoch = int(state["epoch"])
        self.batch_sampler.start_batch = int(state["batches_consumed"])


def passthrough(batch):
    """collate_fn for datasets whose `__getitems__` already returns the collated batch."""
    return batch
