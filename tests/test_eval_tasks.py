"""Task loaders (vat.eval.tasks.registry): SentEval's file formats, quirks, and errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from eval_helpers import write_mini_senteval, write_sts

from vat.errors import VatError
from vat.eval.tasks.files import STS_SUBSETS, Pairs
from vat.eval.tasks.registry import ALL_TASKS, TASK_GROUPS, expand_tasks, load_task


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> Path:
    return write_mini_senteval(tmp_path_factory.mktemp("senteval"))


@pytest.mark.parametrize("task", list(STS_SUBSETS))
def test_sts_loader_reads_every_subset(mini, task):
    data = load_task(mini, task)
    assert data.kind == "sts"
    assert list(data.splits) == STS_SUBSETS[task]  # STS13: no SMT, although its gold file exists
    expected = 11 if task == "STS15" else 12  # STS15's files have one empty gold line per set
    assert all(len(p) == expected for p in data.splits.values())


def test_sts_skips_empty_gold_and_keeps_alignment(tmp_path):
    folder = tmp_path / "STS" / "STS16-en-test"
    folder.mkdir(parents=True)
    for s in STS_SUBSETS["STS16"]:
        # CRLF endings, a BOM, non-ASCII text, an empty gold line in the middle
        (folder / f"STS.input.{s}.txt").write_bytes(
            "\ufeffa  café\tb\r\nskip me\tno score\r\nc d\te f g\r\n".encode()
        )
        (folder / f"STS.gs.{s}.txt").write_bytes(b"4.5\r\n\r\n1.25\r\n")
    p = load_task(tmp_path, "STS16").splits["headlines"]
    assert p.a == ["a café", "c d"]  # BOM dropped, whitespace runs collapsed (SentEval's split())
    assert p.b == ["b", "e f g"]
    assert p.y.tolist() == [4.5, 1.25]


def test_sts_gold_and_input_must_align(tmp_path):
    write_sts(tmp_path, "STS12")
    gs = tmp_path / "STS" / "STS12-en-test" / "STS.gs.MSRpar.txt"
    gs.write_text("1.0\n2.0\n")
    with pytest.raises(VatError, match="STS.gs.MSRpar.txt has 2 lines"):
        load_task(tmp_path, "STS12")


def test_sick_crlf_header_and_labels(mini):
    rel = load_task(mini, "SICKRelatedness")
    ent = load_task(mini, "SICKEntailment")
    assert rel.kind == "relatedness" and ent.kind == "split" and ent.nclasses == 3
    assert set(rel.splits) == {"train", "dev", "test"}
    test = rel.splits["test"]  # the CRLF file: no '\r' may leak into sentences or scores
    assert not any("\r" in s for s in test.a + test.b)
    assert ((test.y >= 1) & (test.y <= 5)).all()
    # CONTRADICTION 0, NEUTRAL 1, ENTAILMENT 2 (SentEval's label2id); one third each here
    assert np.bincount(ent.splits["train"].y).tolist() == [40, 40, 40]


def test_stsb_ignores_extra_columns(mini):
    d = load_task(mini, "STSBenchmark")
    p = d.splits["dev"]
    assert len(p) == 40 and not any("extra" in s or "columns" in s for s in p.a + p.b)


def test_binary_latin1_and_empty_lines(tmp_path):
    (tmp_path / "MR").mkdir()
    (tmp_path / "MR" / "rt-polarity.pos").write_bytes(b"un film tr\xe8s bon\n\nsuperb\n")
    (tmp_path / "MR" / "rt-polarity.neg").write_bytes(b"bad\n")
    d = load_task(tmp_path, "MR")
    s = d.splits["all"]
    assert len(s) == 4  # the empty line is a sample, as in SentEval (CR has some)
    # SentEval's sort: (number of tokens, label); the empty sentence comes first
    assert s.x == ["", "bad", "superb", "un film très bon"]
    assert s.y.tolist() == [1, 0, 1, 1]


def test_cr_counts_empty_lines(mini):
    s = load_task(mini, "CR").splits["all"]
    assert len(s) == 80 and "" in s.x


def test_trec_latin1_and_coarse_labels(tmp_path):
    (tmp_path / "TREC").mkdir()
    (tmp_path / "TREC" / "train_5500.label").write_bytes(
        b"HUM:ind Who was Andr\xe9 ?\nNUM:date When ?\n"
    )
    (tmp_path / "TREC" / "TREC_10.label").write_bytes(b"LOC:city Where is it ?\n")
    d = load_task(tmp_path, "TREC")
    assert d.splits["train"].x == [
        "When ?",
        "Who was André ?",
    ]  # fine label dropped, sorted by length
    assert d.splits["train"].y.tolist() == [5, 3]
    assert d.splits["test"].y.tolist() == [4]


def test_mrpc_bom_header_skipped(mini):
    d = load_task(mini, "MRPC")
    assert len(d.splits["train"]) == 120 and len(d.splits["test"]) == 40
    assert not any("Quality" in s or "String" in s for s in d.splits["train"].a)


def test_sst_formats(mini):
    sst2, sst5 = load_task(mini, "SST2"), load_task(mini, "SST5")
    assert sst2.nclasses == 2 and sst5.nclasses == 5
    assert set(sst5.splits["train"].y.tolist()) == {0, 1, 2, 3, 4}
    assert all(not s.endswith(" ") for s in sst2.splits["dev"].x)


def test_pair_sort_matches_senteval(mini):
    p = load_task(mini, "STSBenchmark").splits["train"]
    keys = [(len(a.split()), len(b.split()), y) for a, b, y in zip(p.a, p.b, p.y)]
    assert keys == sorted(keys)


@pytest.mark.parametrize("task", ALL_TASKS)
def test_missing_data_names_path_and_layout(tmp_path, task):
    with pytest.raises(VatError) as e:
        load_task(tmp_path, task)
    msg = str(e.value)
    assert str(tmp_path) in msg and "expected SentEval layout" in msg and task in msg


def test_missing_single_file(mini, tmp_path):
    import shutil

    shutil.copytree(mini / "TREC", tmp_path / "TREC")
    (tmp_path / "TREC" / "TREC_10.label").unlink()
    with pytest.raises(VatError, match=r"missing file .*TREC_10\.label"):
        load_task(tmp_path, "TREC")


def test_missing_data_dir(tmp_path):
    with pytest.raises(VatError, match="does not exist"):
        load_task(tmp_path / "nope", "MR")


def test_expand_tasks_groups_and_unknown():
    assert expand_tasks("sts") == TASK_GROUPS["sts"]
    assert expand_tasks("MR,transfer,MR")[:2] == ["MR", "CR"]
    assert expand_tasks("all") == ALL_TASKS
    with pytest.raises(VatError) as e:
        expand_tasks("STS12,STS99")
    assert "STS99" in str(e.value) and all(t in str(e.value) for t in ALL_TASKS)


def test_real_data_sizes_match_senteval(senteval_dir, oracle_dir):
    """Sample counts on the shared data equal what SentEval reported (expected.json)."""
    expected = json.loads((oracle_dir / "expected.json").read_text())
    sts = load_task(senteval_dir, "STS12")
    for subset, p in sts.splits.items():
        assert len(p) == expected["STS12"][subset]["nsamples"]
    stsb = load_task(senteval_dir, "STSBenchmark")
    assert len(stsb.splits["dev"]) == expected["STSBenchmark"]["ndev"]
    assert len(stsb.splits["test"]) == expected["STSBenchmark"]["ntest"]
    for task in ("MR", "CR", "SUBJ", "MPQA"):
        assert len(load_task(senteval_dir, task).splits["all"]) == expected[task]["ntest"]
    for task, dev_key in (("SST2", "dev"), ("SST5", "dev"), ("TREC", "train"), ("MRPC", "train")):
        d = load_task(senteval_dir, task)
        assert len(d.splits[dev_key]) == expected[task]["ndev"]
        assert len(d.splits["test"]) == expected[task]["ntest"]
    assert isinstance(load_task(senteval_dir, "MRPC").splits["test"], Pairs)
