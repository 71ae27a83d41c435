"""Reading corpora, caching, bucketing, and the data module's bad-input errors."""

import gzip

import numpy as np
import pytest

from vat.data.datamodule import BucketBatchSampler, ResumableDataLoader, VATDataModule, read_lines
from vat.errors import VatError


def _write(path, lines, gz=False):
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_read_plain_gz_and_bad_bytes(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"one line\n   \n\xff\xfe broken\nlast line\n")
    lines, bad = read_lines(p)
    assert lines == ["one line", "last line"] and bad == 1
    with pytest.raises(VatError, match=r"a\.txt:3: bytes that are not UTF-8"):
        read_lines(p, on_bad_bytes="error")
    g = _write(tmp_path / "b.txt.gz", ["x y", "z"], gz=True)
    assert read_lines(g) == (["x y", "z"], 0)


def test_truncated_gzip_and_binary(tmp_path):
    g = _write(tmp_path / "c.txt.gz", [f"sentence number {i}" for i in range(2000)], gz=True)
    g.write_bytes(g.read_bytes()[: len(g.read_bytes()) // 2])
    with pytest.raises(VatError, match="truncated or corrupt gzip"):
        read_lines(g)
    b = tmp_path / "bin.dat"
    b.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(VatError, match="binary file"):
        read_lines(b)


def test_bucket_sampler_groups_lengths_and_covers_everything():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=1000)
    s = BucketBatchSampler(lengths, batch_size=16, seed=1, pool_batches=10)
    batches = list(s)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert len(batches) == len(s)
    spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
    random_spread = np.mean(
        [lengths[b].max() - lengths[b].min() for b in np.array_split(rng.permutation(1000), 63)]
    )
    assert spread < random_spread / 4
    s.set_epoch(1)
    assert list(s) != batches  # reshuffled each epoch


def test_bucket_sampler_shards_global_batches_across_ranks():
    lengths = list(range(1, 101))
    shards = [
        list(BucketBatchSampler(lengths, 4, seed=3, num_replicas=3, rank=r, shuffle=False))
        for r in range(3)
    ]
    assert len({len(x) for x in shards}) == 1  # equal step counts on every rank
    assert all(
        len(b) == 4 for shard in shards for b in shard[:-1]
    )  # only the last batch may be short
    assert set(i for shard in shards for b in shard for i in b) == set(range(100))
    # the global batches do not depend on the number of processes
    single = list(BucketBatchSampler(lengths, 12, seed=3))
    two = [list(BucketBatchSampler(lengths, 6, seed=3, num_replicas=2, rank=r)) for r in range(2)]
    assert [sorted(a + b) for a, b in zip(*two)][:-1] == [sorted(x) for x in single][:-1]


def test_resumable_loader_state_accounts_for_prefetch():
    lengths = [5] * 40
    s = BucketBatchSampler(lengths, 4, seed=0)
    dl = ResumableDataLoader(list(range(40)), s, collate_fn=lambda b: b)
    full = list(dl)
    it = iter(dl)
    for _ in range(3):
        next(it)
    state = dl.state_dict()
    assert state == {"epoch": 0, "batches_consumed": 3}
    s2 = BucketBatchSampler(lengths, 4, seed=0)
    dl2 = ResumableDataLoader(list(range(40)), s2, collate_fn=lambda b: b)
    dl2.load_state_dict(state)
    assert list(dl2) == full[3:]
    assert list(dl2) == full  # the next epoch starts from the beginning again


def _dm(tmp_path, **kw):
    args = dict(vocab_size=300, max_len=16, batch_size=4, cache_dir=str(tmp_path / "cache"))
    args.update(kw)
    return VATDataModule(**args)


def test_datamodule_caches_and_truncates(tmp_path, tiny_sentences):
    train = _write(tmp_path / "train.txt", tiny_sentences * 3 + ["word " * 60])
    dm = _dm(tmp_path, train_files=[str(train)], val_fraction=0.2, max_len=48)
    dm.prepare_data()
    dm.setup("fit")
    assert (
        dm.overlength_stats["train"]["overlength"] + dm.overlength_stats["val"]["overlength"] == 1
    )
    assert max(len(x) for x in [*dm.splits["train"].ids, *dm.splits["val"].ids]) == 47
    n_train, n_val = len(dm.splits["train"]), len(dm.splits["val"])
    assert n_train + n_val == 49 and n_val == 10
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert any(n.startswith("tokenizer-") for n in cached) and any(
        n.startswith("data-") for n in cached
    )
    dm2 = _dm(tmp_path, train_files=[str(train)], val_fraction=0.2, max_len=48)
    dm2.setup("fit")  # from the cache: same tokenizer, same ids
    assert dm2.tokenizer.to_str() == dm.tokenizer.to_str()
    assert list(dm2.splits["train"].ids) == list(dm.splits["train"].ids)
    filt = _dm(tmp_path, train_files=[str(train)], overlength="filter", max_len=48)
    filt.setup("fit")
    assert len(filt.splits["train"]) == 48


def test_datamodule_reads_a_local_datasets_folder(tmp_path, tiny_sentences):
    """The hub code path (datasets.load_dataset) on a local folder with WMT19's nested layout."""
    import json

    folder = tmp_path / "wmt_like"
    folder.mkdir()
    for split, lines in [("train", tiny_sentences), ("validation", tiny_sentences[:4])]:
        with open(folder / f"{split}.jsonl", "w") as f:
            for s in lines:
                f.write(json.dumps({"translation": {"de": "x", "en": s}}) + "\n")
    dm = _dm(tmp_path, hf_dataset=str(folder), hf_text_field="translation.en", hf_test_split=None)
    dm.setup("fit")
    assert len(dm.splits["train"]) == len(tiny_sentences) and len(dm.splits["val"]) == 4
    assert dm.tokenizer.decode(dm.splits["val"].ids[0]) == tiny_sentences[0]
    bad = _dm(tmp_path, hf_dataset=str(folder), hf_text_field="text")
    with pytest.raises(VatError, match="no column 'text'"):
        bad.setup("fit")


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "glob"])
def test_datamodule_bad_files(tmp_path, case):
    target = {
        "missing": str(tmp_path / "nope.txt"),
        "directory": str(tmp_path),
        "glob": str(tmp_path / "*.none"),
    }.get(case)
    if case == "empty":
        target = str(_write(tmp_path / "empty.txt", ["", "   "]))
    dm = _dm(tmp_path, train_files=[target])
    expected = {
        "missing": "does not exist",
        "directory": "is a directory",
        "empty": "no non-empty lines",
        "glob": "no file matches",
    }[case]
    with pytest.raises(VatError, match=expected):
        dm.prepare_data()


def test_datamodule_loads_a_tokenizer_file(tmp_path, tiny_sentences, tiny_tokenizer):
    train = _write(tmp_path / "train.txt", tiny_sentences)
    tok_path = tmp_path / "tok.json"
    tiny_tokenizer.save(tok_path)
    dm = _dm(
        tmp_path, train_files=[str(train)], tokenizer_path=str(tok_path), max_len=48, vocab_size=400
    )
    dm.setup("fit")
    assert dm.tokenizer.to_str() == tiny_tokenizer.to_str()
    assert not list((tmp_path / "cache").glob("tokenizer-*.json"))  # nothing trained
    small = _dm(tmp_path, train_files=[str(train)], tokenizer_path=str(tok_path), vocab_size=100)
    with pytest.raises(VatError, match="data.vocab_size is 100"):
        small.setup("fit")


def test_a_one_megabyte_line_is_truncated_not_fatal(tmp_path, tiny_sentences):
    big = " ".join(["word"] * 200_000)  # 1 MB on one line
    train = _write(tmp_path / "train.txt", tiny_sentences + [big])
    dm = _dm(tmp_path, train_files=[str(train)], max_len=32)
    dm.setup("fit")
    assert dm.overlength_stats["train"]["overlength"] >= 1
    assert max(len(x) for x in dm.splits["train"].ids) == 31
