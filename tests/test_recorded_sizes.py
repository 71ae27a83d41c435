"""Sizes a model's files record are trusted only once its weights agree (a tampered
`n_encoder_layers: 1000000` is refused before anything is allocated), JSON nested too deeply
is one line, and an export onto a full disk is one line that leaves nothing behind.
"""

from __future__ import annotations

import json
import resource
import time

import pytest
import torch
from helpers import copy_folder

import vat
from vat.errors import CheckpointError, VatError
from vat.model import VATConfig
from vat.share import folder as fmt
from vat.share.checkpoint import check_weight_shapes


def _set_config(folder, **changes):
    path = folder / fmt.CONFIG_NAME
    config = json.loads(path.read_text())
    config["model_config"].update(changes)
    path.write_text(json.dumps(config))


TAMPERED = {
    "a million encoder layers": ({"n_encoder_layers": 10**6}, "1000000 encoder layers"),
    "decoder layers": ({"n_decoder_layers": 3}, "3 decoder layers, its weights hold 2"),
    "a huge vocabulary": ({"vocab_size": 10**12}, "embed.weight has shape"),
    "a wider model": ({"d_model": 64, "n_heads": 2}, "has shape"),
    "a wider feed-forward": ({"d_ff": 10**9}, "ff.net.0.weight has shape"),
    "max_len beyond memory": ({"max_len": 10**13}, "position table"),
}


@pytest.mark.parametrize("case", TAMPERED)
def test_config_sizes_are_checked_against_the_weights_before_building(tiny_export, tmp_path, case):
    folder = copy_folder(tiny_export, tmp_path)
    changes, needle = TAMPERED[case]
    _set_config(folder, **changes)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as e:
        vat.load(str(folder))
    assert time.perf_counter() - t0 < 10  # before: memory grew by 100 MB/s until killed
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200, grown_mb
    message = str(e.value)
    assert needle in message and fmt.WEIGHTS_NAME in message and "\n" not in message, message


def test_a_checkpoint_with_tampered_sizes_is_refused_before_building(tiny_ckpt, tmp_path):
    ckpt = torch.load(tiny_ckpt, weights_only=True, map_location="cpu")
    ckpt["vat"]["model_config"]["n_encoder_layers"] = 10**6
    bad = tmp_path / "bad.ckpt"
    torch.save(ckpt, bad)
    with pytest.raises(CheckpointError) as e:
        vat.load(str(bad))
    assert f"{10**6} encoder layers" in str(e.value) and str(bad) in str(e.value)


def test_the_shape_check_accepts_every_true_model_and_names_a_stray_tensor():
    from vat.model import VAT

    for cfg in (
        VATConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=3),
        VATConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, tie_embeddings=False),
        VATConfig(vocab_size=50, d_model=8, n_heads=1, d_ff=8, norm_first=True),
    ):
        shapes = {k: tuple(v.shape) for k, v in VAT(cfg).state_dict().items()}
        check_weight_shapes("w", cfg, shapes)  # the model's own state dict passes
        if cfg.tie_embeddings:  # safetensors stores a tied pair once
            check_weight_shapes(
                "w", cfg, {k: v for k, v in shapes.items() if k != "lm_head.weight"}
            )
        with pytest.raises(CheckpointError, match="hold extra.weight, which its config lacks"):
            check_weight_shapes("w", cfg, {**shapes, "extra.weight": (1,)})
        missing = {k: v for k, v in shapes.items() if k != "mu_head.bias"}
        with pytest.raises(CheckpointError, match="lack mu_head.bias"):
            check_weight_shapes("w", cfg, missing)


def test_deeply_nested_config_json_is_one_line(tiny_export, tmp_path):
    folder = copy_folder(tiny_export, tmp_path)
    (folder / fmt.CONFIG_NAME).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError) as e:
        vat.load(str(folder))
    assert "nested too deeply" in str(e.value) and fmt.CONFIG_NAME in str(e.value)


def test_an_export_onto_a_full_disk_is_one_line_and_leaves_nothing(
    tiny_export, tmp_path, monkeypatch
):
    import safetensors.torch
    from safetensors import SafetensorError

    model = vat.load(str(tiny_export))

    def full_disk(*args, **kwargs):  # what safetensors raises on ENOSPC (seen on a tmpfs)
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(safetensors.torch, "save_model", full_disk)
    out = tmp_path / "out"
    with pytest.raises(VatError) as e:
        model.save_pretrained(out, features="mu/mean/none")
    assert str(e.value) == (
        f"cannot write {out}: no space left on device; nothing was written there "
        "(the temporary folder was removed)"
    )
    assert list(tmp_path.iterdir()) == []  # neither `out` nor a temp folder beside it


@pytest.mark.parametrize("where", [".", "..", "cwd absolute"])
def test_an_export_never_replaces_the_current_folder_or_its_parent(
    tiny_export, tmp_path, monkeypatch, capsys, where
):
    from vat.cli.export import main as export

    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    target = str(cwd) if where == "cwd absolute" else where
    code = export([str(tiny_export), target, "--overwrite"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "is the current folder or contains it" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # no temp folder beside it
    assert list(cwd.iterdir()) == []


def test_an_export_into_a_new_folder_inside_the_current_one_works(
    tiny_export, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    vat.load(str(tiny_export)).save_pretrained("model", features="mu/mean/none")
    assert (tmp_path / "model" / fmt.CONFIG_NAME).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    with pytest.raises(VatError, match="^overwrite: output model exists and is not empty"):
        vat.load(str(tiny_export)).save_pretrained("model")


@pytest.mark.parametrize(
    "counts,needle",
    [("many", "must be a list of counts"), ([-1, 2], "must be a list of counts"),
     ([1] * 10**5, "holds 100000 counts for a")],
    ids=["a string", "negative", "longer than the vocabulary"],
)  # fmt: skip
def test_a_checkpoints_token_counts_are_checked(tiny_ckpt, tmp_path, counts, needle):
    ckpt = torch.load(tiny_ckpt, weights_only=True, map_location="cpu")
    ckpt["vat"]["token_counts"] = counts
    bad = tmp_path / "bad.ckpt"
    torch.save(ckpt, bad)
    with pytest.raises(CheckpointError) as e:
        vat.load(str(bad))
    assert needle in str(e.value) and str(bad) in str(e.value), str(e.value)
