"""Token-budget batches (data.max_tokens) and the vectorised collation."""

import numpy as np
import pytest
import torch

from vat.data.sampler import BucketBatchSampler, ResumableDataLoader, collate_ids, passthrough
from vat.data.token_cache import SplitWriter, TokenizedDataset, token_dtype
from vat.tokenizer import make_batch


def _store(tmp_path, seqs, max_len, pad_multiple=8):
    """A split on disk, written the way the cache writes it."""
    w = SplitWriter(tmp_path / "split", token_dtype(1000), max_len, "truncate")
    w.add(seqs)
    w.close()
    return TokenizedDataset(tmp_path / "split", "uint16", max_len, pad_multiple)


def _random_seqs(n, max_sub, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(4, 1000, size=rng.integers(1, max_sub + 1)).tolist() for _ in range(n)]


def test_collate_ids_equals_make_batch_and_pads_to_a_multiple_of_8(tmp_path):
    seqs = _random_seqs(50, 40) + [list(range(4, 70))]  # the last one is truncated to 47
    ds = _store(tmp_path, seqs, max_len=48)
    tokens, offsets = ds._open()
    index = [3, 50, 0, 17, 9]
    exact = collate_ids(tokens, offsets, index, max_len=48)
    ref = make_batch([seqs[i] for i in index], max_len=48)
    for key in ("src", "tgt_in", "tgt_out"):
        assert torch.equal(exact[key], ref[key])
    short = [0, 3]  # T = 1 + longest, rounded up to 8
    padded = collate_ids(tokens, offsets, short, max_len=48, multiple=8)
    ref = make_batch([seqs[i] for i in short], max_len=48)
    T = ref["src"].shape[1]
    assert padded["src"].shape[1] == -(-T // 8) * 8
    assert torch.equal(padded["src"][:, :T], ref["src"]) and (padded["src"][:, T:] == 0).all()
    assert (
        torch.equal(padded["tgt_in"][:, :T], ref["tgt_in"]) and (padded["tgt_in"][:, T:] == 0).all()
    )
    # never beyond max_len (the model's positions): 47 subwords + </s> = 48, not 48 rounded to 56
    assert collate_ids(tokens, offsets, [50], max_len=50, multiple=8)["src"].shape[1] == 48


def _token_loader(ds, max_tokens, **kw):
    sampler = BucketBatchSampler(
        ds.lengths + 1, 1, max_tokens=max_tokens, max_len=ds.max_len, pool_batches=4, seed=5, **kw
    )
    return sampler, ResumableDataLoader(ds, sampler, collate_fn=passthrough)


def test_max_tokens_batches_fit_the_budget_and_cover_the_epoch(tmp_path):
    seqs = _random_seqs(600, 60, seed=1)
    ds = _store(tmp_path, seqs, max_len=64)
    sampler, loader = _token_loader(ds, max_tokens=512)
    batches = list(loader)
    assert len(batches) == len(sampler)
    sizes = [b["src"].numel() for b in batches]
    assert max(sizes) <= 512
    assert all(b["src"].shape[1] % 8 == 0 for b in batches)
    # every sentence exactly once, as its own ids
    index = [i for b in sampler for i in b]
    assert sorted(index) == list(range(600))
    seen = sorted(tuple(row[row > 2].tolist()) for b in batches for row in b["tgt_out"])
    assert seen == sorted(tuple(s[:63]) for s in seqs)
    # length bucketing fills the budget: far fewer pad tokens than random batching would give
    assert np.mean(sizes) > 0.75 * 512


def test_max_tokens_resumes_mid_epoch_with_the_same_remaining_batches(tmp_path):
    ds = _store(tmp_path, _random_seqs(400, 30, seed=2), max_len=32)
    sampler, loader = _token_loader(ds, max_tokens=256)
    sampler.set_epoch(3)
    full = [b["src"] for b in loader]
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    assert state == {"epoch": 3, "batches_consumed": 5}
    sampler2, loader2 = _token_loader(ds, max_tokens=256)
    loader2.load_state_dict(state)
    rest = [b["src"] for b in loader2]
    assert len(rest) == len(full) - 5
    assert all(torch.equal(a, b) for a, b in zip(rest, full[5:], strict=True))


@pytest.mark.parametrize("world", [2, 3])
def test_max_tokens_ranks_partition_each_global_batch(world):
    rng = np.random.default_rng(3)
    lengths = rng.integers(2, 40, size=500)
    kw = dict(max_tokens=200, max_len=40, seed=7, pool_batches=3, num_replicas=world)
    ranks = [list(BucketBatchSampler(lengths, 1, rank=r, **kw)) for r in range(world)]
    glob = BucketBatchSampler(lengths, 1, rank=0, **kw).global_batches()
    assert len({len(r) for r in ranks}) == 1 == len({len(glob), len(ranks[0])})  # same step count
    for step, g in enumerate(glob):
        parts = [ranks[r][step] for r in range(world)]
        assert len({len(p) for p in parts}) == 1  # equal shares
        together = [i for p in parts for i in p]
        assert set(together) == set(g.tolist())  # the ranks split the global batch
        assert len(together) - len(g) < world  # repeated only to fill a remainder
        for p in parts:  # each rank's padded batch fits its budget
            T = min(-(-max(lengths[p]) // 8) * 8, 40)
            assert len(p) * T <= 200


def test_sentence_batches_are_unchanged_by_the_token_cache(tmp_path):
    """batch_size mode: the same batches as the list-based loader gave (no padding to 8)."""
    seqs = _random_seqs(100, 20, seed=4)
    ds = _store(tmp_path, seqs, max_len=24, pad_multiple=1)
    sampler = BucketBatchSampler(ds.lengths + 1, 8, seed=1, pool_batches=2, max_len=24)
    for index, batch in zip(
        sampler, ResumableDataLoader(ds, sampler, collate_fn=passthrough), strict=True
    ):
        ref = make_batch([seqs[i] for i in index], max_len=24)
        assert torch.equal(batch["src"], ref["src"]) and torch.equal(batch["tgt_in"], ref["tgt_in"])


def test_a_spawned_worker_maps_the_files_itself(tmp_path):
    seqs = _random_seqs(64, 10, seed=6)
    ds = _store(tmp_path, seqs, max_len=16, pad_multiple=1)
    sampler = BucketBatchSampler(ds.lengths + 1, 16, shuffle=False)
    ref = [b["src"] for b in ResumableDataLoader(ds, sampler, collate_fn=passthrough)]
    loader = ResumableDataLoader(
        ds, sampler, collate_fn=passthrough, num_workers=1, multiprocessing_context="spawn"
    )
    got = [b["src"] for b in loader]
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
