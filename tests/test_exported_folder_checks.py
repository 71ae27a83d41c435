"""An exported folder gets the checks a .ckpt gets (finite weights, a valid prior_std, a
tokenizer within the vocabulary), from vat.load and from every command; and the tokenized
cache is keyed on content, so an edit that keeps size and mtime is seen."""

from __future__ import annotations

import json
import os

import pytest
import torch
from helpers import copy_folder
from safetensors.torch import load_file, save_file

import vat
from vat.data.datamodule import VATDataModule
from vat.share import folder as fmt
from vat.share.checkpoint import CheckpointError


def _with_inf_weight(folder):
    path = folder / fmt.WEIGHTS_NAME
    tensors = load_file(path)
    key = next(k for k, v in tensors.items() if v.is_floating_point())
    tensors[key] = tensors[key].clone().fill_(float("inf"))
    save_file(tensors, path, metadata={"format": "pt"})
    return "non-finite weights"


def _with_int32_weight(folder):
    """A weight stored as int32: before, load_state_dict cast it to float without a word."""
    path = folder / fmt.WEIGHTS_NAME
    tensors = load_file(path)
    key = next(k for k, v in tensors.items() if v.is_floating_point())
    tensors[key] = tensors[key].to(torch.int32)
    save_file(tensors, path, metadata={"format": "pt"})
    return f"{path}: {key} is int32, not floating point"


def _with_prior_std(value):
    def damage(folder):
        path = folder / fmt.CONFIG_NAME
        config = json.loads(path.read_text())
        config["prior_std"] = value
        path.write_text(json.dumps(config))  # json writes NaN for float("nan")
        return "'prior_std' must be a positive number"

    return damage


DAMAGES = {
    "inf weights": _with_inf_weight,
    "int32 weight": _with_int32_weight,
    "prior_std nan": _with_prior_std(float("nan")),
    "prior_std negative": _with_prior_std(-0.4),
    "prior_std zero": _with_prior_std(0),
    "prior_std a string": _with_prior_std("0.4"),
}


@pytest.mark.parametrize("case", DAMAGES)
def test_vat_load_checks_a_folder_like_a_checkpoint(tiny_export, tmp_path, case):
    folder = copy_folder(tiny_export, tmp_path)
    needle = DAMAGES[case](folder)
    with pytest.raises(CheckpointError) as e:
        vat.load(str(folder))
    assert needle in str(e.value) and str(folder) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["inf weights", "prior_std nan"])
def test_generate_refuses_a_damaged_folder_in_one_line(tiny_export, tmp_path, case, capsys):
    from vat.cli.generate import main as generate

    folder = copy_folder(tiny_export, tmp_path)
    needle = DAMAGES[case](folder)
    for argv in (
        ["reconstruct", "--ckpt", str(folder), "a sentence"],
        ["prior", "--ckpt", str(folder)],
    ):
        code = generate(argv)
        out = capsys.readouterr()
        err = out.err.strip().splitlines()
        assert code == 2 and len(err) == 1 and needle in err[0], (argv, err)
        assert out.out == ""  # no empty lines printed as if they were sentences


def test_the_cache_sees_an_edit_that_keeps_size_and_mtime(tmp_path, tiny_sentences):
    train = tmp_path / "train.txt"
    text = "\n".join(tiny_sentences * 4) + "\n"
    train.write_text(text)
    kw = dict(vocab_size=300, max_len=24, batch_size=4, val_fraction=0.0, progress=False)
    dm = VATDataModule(train_files=[str(train)], cache_dir=str(tmp_path / "cache"), **kw)
    dm.setup("fit")
    before = list(dm.splits["train"].ids)
    st = os.stat(train)
    edited = text.replace("a", "e")  # same size
    assert edited != text and len(edited) == len(text)
    train.write_text(edited)
    os.utime(train, ns=(st.st_atime_ns, st.st_mtime_ns))  # `touch -r`: the old mtime
    assert os.stat(train).st_size == st.st_size and os.stat(train).st_mtime_ns == st.st_mtime_ns
    dm = VATDataModule(train_files=[str(train)], cache_dir=str(tmp_path / "cache"), **kw)
    dm.setup("fit")
    fresh = VATDataModule(train_files=[str(train)], cache_dir=str(tmp_path / "fresh"), **kw)
    fresh.setup("fit")
    assert list(dm.splits["train"].ids) == list(fresh.splits["train"].ids) != before
    assert len(list((tmp_path / "cache").glob("data-*"))) == 2  # a second cache, not the old one


def test_a_tampered_modules_json_runs_nothing_without_trust_remote_code(tiny_export, tmp_path):
    """docs/sharing.md: `trust_remote_code=True` trusts the folder (a modules.json naming
    evil.Evil runs evil.py from it); without the flag sentence-transformers refuses it, and
    vat's to_sentence_transformer builds the model from the installed class around what
    vat.load read (config.json, tokenizer.json, model.safetensors, the feature spec)."""
    from sentence_transformers import SentenceTransformer

    from vat.integrations.sentence_transformers import to_sentence_transformer

    folder = copy_folder(tiny_export, tmp_path)
    marker = tmp_path / "ran"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Evil: pass\n")
    modules = json.loads((folder / fmt.ST_MODULES_NAME).read_text())
    modules[0]["type"] = "evil.Evil"
    (folder / fmt.ST_MODULES_NAME).write_text(json.dumps(modules))
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(folder))
    st = to_sentence_transformer(vat.load(str(folder)))
    emb = st.encode(["a sentence", "another one"])
    assert emb.shape == (2, vat.load(str(folder)).loaded.model.config.d_model)
    assert not marker.exists()
