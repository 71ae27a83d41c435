"""Fitted feature statistics are checked like model weights.

Every statistics file (SIF weights; the mean and components of pcK; the mean and matrix of
whitening) must hold finite float32 values in the shapes the spec and the model imply (SIF
weights (V,) in (0, 1], mean (D,), components (K, D), matrix (D, K or D), D = d_model), on
every path that loads one: an exported folder (`vat.load`, sentence-transformers, `vat
export`), the file beside a checkpoint (`vat.load(...).encode`, MTEB, `vat evaluate`), and a
FittedFeatures a user builds. A bad file is one line naming the file and what is wrong. A
statistics file or sentence_vat_config.json that is a FIFO or a folder is named as such (and
never blocks), a broken sentence_vat_config.json is an error rather than "no spec", and a
folder exported with any spec can be exported over again with overwrite.

The folders are the tiny checkpoint exported with a SIF spec (token counts from the tiny
sentences) and with fitted post-processing, their features.safetensors rewritten with
safetensors.numpy.save_file, keeping its metadata.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import vat
from vat.errors import CheckpointError, VatError
from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.features.choice import stats_path_for

D = 32  # tiny_config's d_model


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_ckpt, tiny_sentences):
    """{spec name: exported folder} of the tiny checkpoint, and its vocabulary size."""
    root = tmp_path_factory.mktemp("statistics")
    text = root / "train.txt"
    text.write_text("\n".join(tiny_sentences) + "\n")
    model = vat.load(str(tiny_ckpt), device="cpu")
    fit = {"fit_files": [str(text)], "count_files": [str(text)]}
    out = {
        # the default spec, layer0/sif/none: SIF weights only
        "sif": model.save_pretrained(root / "sif", count_files=[str(text)]),
        "whiten8": model.save_pretrained(root / "whiten8", features="mu/sif/whiten8", **fit),
        "pc1": model.save_pretrained(root / "pc1", features="mu/mean/pc1", fit_files=[str(text)]),
        "plain": model.save_pretrained(root / "plain", features="mu/mean/none"),
    }
    return out, model.model.config.vocab_size


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _read(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    with safe_open(str(path), framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def _rewrite(path: Path, change) -> None:
    """features.safetensors with `change(arrays, metadata)` applied, its metadata kept."""
    arrays, meta = _read(path)
    change(arrays, meta)
    save_file(arrays, str(path), metadata=meta)


def _set(name, make):
    def change(arrays, meta):
        arrays[name] = make(arrays[name])

    return change


def _renamed(name, to):
    def change(arrays, meta):
        arrays[to] = arrays.pop(name)

    return change


def _nan_at_3(a):
    a = a.copy()
    a[[1, 5, 7]] = np.nan
    return a


def _one_line(e: BaseException, *needles: str) -> None:
    text = str(e)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)


# (folder, change, what the message says); V is filled in from the tiny vocabulary
DAMAGES = {
    "sif NaN": ("sif", _set("sif_weights", _nan_at_3), "sif_weights has NaN at 3 entries"),
    "sif inf": (
        "sif",
        _set("sif_weights", lambda a: np.where(np.arange(a.size) == 2, np.inf, a)),
        "sif_weights has inf at 1 entry",
    ),
    "sif -1e30": (
        "sif",
        _set("sif_weights", lambda a: np.full_like(a, -1e30)),
        "outside (0, 1] (e.g. -1e+30)",
    ),
    "sif zero": ("sif", _set("sif_weights", np.zeros_like), "entries outside (0, 1]"),
    "sif above one": ("sif", _set("sif_weights", lambda a: a + 1), "entries outside (0, 1]"),
    "sif too many": (
        "sif",
        _set("sif_weights", lambda a: np.ones(100_000, np.float32)),
        "sif_weights has shape (100000,), the spec layer0/sif/none and this model need ({V},)",
    ),
    "sif too few": (
        "sif",
        _set("sif_weights", lambda a: a[:-1]),
        "the spec layer0/sif/none and this model need ({V},)",
    ),
    "sif float64": (
        "sif",
        _set("sif_weights", lambda a: a.astype(np.float64)),
        "sif_weights has dtype float64, expected float32",
    ),
    "sif int32": (
        "sif",
        _set("sif_weights", lambda a: np.ones(a.shape, np.int32)),
        "sif_weights has dtype int32, expected float32",
    ),
    "sif removed": ("sif", _renamed("sif_weights", "x"), "needs sif_weights, which it lacks"),
    "whiten mean 100000": (
        "whiten8",
        _set("mean", lambda a: np.zeros(100_000, np.float32)),
        f"mean has shape (100000,), the spec mu/sif/whiten8 and this model need ({D},)",
    ),
    "whiten8 matrix square": (
        "whiten8",
        _set("matrix", lambda a: np.eye(D, dtype=np.float32)),
        f"matrix has shape ({D}, {D}), the spec mu/sif/whiten8 and this model need ({D}, 8)",
    ),
    "whiten matrix NaN": (
        "whiten8",
        _set("matrix", lambda a: np.full_like(a, np.nan)),
        f"matrix has NaN at {D * 8} entries",
    ),
    "pc1 two components": (
        "pc1",
        _set("components", lambda a: np.zeros((2, D), np.float32)),
        f"components has shape (2, {D}), the spec mu/mean/pc1 and this model need (1, {D})",
    ),
    "pc1 wide components": (
        "pc1",
        _set("components", lambda a: np.zeros((1, 2 * D), np.float32)),
        f"components has shape (1, {2 * D}), the spec mu/mean/pc1 and this model need (1, {D})",
    ),
    "pc1 mean inf": (
        "pc1",
        _set("mean", lambda a: np.full_like(a, -np.inf)),
        f"mean has inf at {D} entries",
    ),
    "no spec metadata": (
        "pc1",
        lambda arrays, meta: meta.pop("spec"),
        "its metadata names no feature spec",
    ),
    "fit metadata a list": (
        "pc1",
        lambda arrays, meta: meta.update(fit="[1, 2]"),
        "its 'fit' metadata is not a JSON object",
    ),
}


@pytest.mark.parametrize("case", DAMAGES)
def test_vat_load_checks_a_folders_statistics_like_its_weights(folders, tmp_path, case):
    """Before: NaN or -1e30 SIF weights loaded and encoded silently (NaN vectors), wrong
    shapes gave 100000-wide vectors or 32 dimensions for whiten8."""
    kind, change, needle = DAMAGES[case]
    found, vocab = folders
    folder = _copy(found[kind], tmp_path / "model")
    _rewrite(folder / "features.safetensors", change)
    with pytest.raises(CheckpointError) as e:
        vat.load(str(folder))
    _one_line(e.value, f"{folder / 'features.safetensors'}: ", needle.replace("{V}", str(vocab)))


def test_sound_folders_load_and_give_the_widths_of_their_specs(folders):
    found, _ = folders
    widths = {"sif": D, "whiten8": 8, "pc1": D, "plain": D}
    for kind, folder in found.items():
        out = vat.load(str(folder)).encode(["a man plays", "the dog runs"])
        assert out.shape == (2, widths[kind]) and np.isfinite(out).all(), kind


def test_sentence_transformers_and_export_refuse_bad_statistics(folders, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    from vat.cli import command

    found, _ = folders
    folder = _copy(found["sif"], tmp_path / "model")
    _rewrite(folder / "features.safetensors", _set("sif_weights", _nan_at_3))
    with pytest.raises(CheckpointError) as e:  # before: NaN vectors
        SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    _one_line(e.value, "features.safetensors: sif_weights has NaN at 3 entries")
    assert command("export")([str(folder), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sif_weights has NaN at 3 entries" in err[0], err
    assert not (tmp_path / "out").exists()


# -- statistics beside a checkpoint, and statistics a user builds --------------------------
@pytest.fixture
def ckpt(tmp_path, tiny_ckpt) -> Path:
    """A copy of the tiny checkpoint: files written beside it stay in this test."""
    dst = tmp_path / "run" / "tiny.ckpt"
    dst.parent.mkdir()
    shutil.copy(tiny_ckpt, dst)
    return dst


def _bad_pc1() -> FittedFeatures:
    spec = FeatureSpec.parse("mu/mean/pc1")
    return FittedFeatures(spec, {"mean": np.zeros(D, np.float32), "components": np.eye(2, D)})


def test_statistics_beside_a_checkpoint_are_checked_on_every_path(ckpt, tmp_path, capsys):
    """The file `stats_path_for` names, read by encode, MTEB and `vat evaluate` (which
    printed a traceback for wrong-shaped statistics)."""
    from eval_helpers import write_sts

    from vat.cli.evaluate import main as evaluate
    from vat.integrations.mteb import VATMTEBEncoder

    bad = _bad_pc1()
    path = stats_path_for(ckpt, bad.spec)
    save_file(bad.arrays | {"components": np.eye(2, D, dtype=np.float32)}, str(path),
              metadata={"format": "vat-features", "version": "1", "spec": "mu/mean/pc1",
                        "fit": "{}"})  # fmt: skip
    needle = f"{path}: components has shape (2, {D}), the spec mu/mean/pc1 and this model need"
    model = vat.load(str(ckpt))
    with pytest.raises(CheckpointError) as e:
        model.encode(["a man plays"], features="mu/mean/pc1")
    _one_line(e.value, needle)
    with pytest.raises(CheckpointError) as e:
        VATMTEBEncoder(str(ckpt), model=model, features="mu/mean/pc1")
    _one_line(e.value, needle)
    write_sts(tmp_path / "senteval", "STS12", n=12)
    args = ["--model", str(ckpt), "--tasks", "STS12", "--data-dir", str(tmp_path / "senteval")]
    # statistics stored beside the checkpoint are read before its training files are asked
    # for (this checkpoint records none, which said "names no training files" before)
    capsys.readouterr()
    assert evaluate([*args, "--features", "mu/mean/pc1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    # SIF weights of the wrong length: (100000,) for (V,)
    sif = stats_path_for(ckpt, FeatureSpec.parse("mu/sif"))
    save_file({"sif_weights": np.ones(100_000, np.float32)}, str(sif),
              metadata={"format": "vat-features", "version": "1", "spec": "mu/sif/none",
                        "fit": "{}"})  # fmt: skip
    capsys.readouterr()
    assert evaluate([*args, "--features", "mu/sif"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{sif}: sif_weights has shape (100000,)" in err[0], err


def test_export_never_falls_back_past_damaged_statistics(ckpt, tmp_path, capsys):
    """`vat export CKPT DIR` with the default spec's statistics beside CKPT holding NaN: one
    line naming the file (before: a warning, and the folder exported as mean of mu)."""
    from vat.cli import command

    spec = FeatureSpec.parse("layer0/sif/none")
    path = stats_path_for(ckpt, spec)
    save_file({"sif_weights": np.full(10, np.nan, np.float32)}, str(path),
              metadata={"format": "vat-features", "version": "1", "spec": str(spec),
                        "fit": "{}"})  # fmt: skip
    assert command("export")([str(ckpt), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: sif_weights has shape (10,)" in err[0], err
    assert not (tmp_path / "out").exists()


def test_statistics_a_user_builds_are_checked_against_the_model(ckpt):
    model = vat.load(str(ckpt))
    bad = _bad_pc1()
    for call in (
        lambda: model.encode(["a man plays"], features=bad),
        lambda: model.feature_encoder(bad),
    ):
        with pytest.raises(VatError) as e:
            call()
        _one_line(e.value, "feature statistics for mu/mean/pc1: components has shape (2, 32)")
    # whiten8 with a (D, D) matrix gave 32 dimensions
    square = FittedFeatures(
        FeatureSpec.parse("mu/mean/whiten8"),
        {"mean": np.zeros(D, np.float32), "matrix": np.eye(D, dtype=np.float32)},
    )
    with pytest.raises(VatError, match=r"matrix has shape \(32, 32\).*need \(32, 8\)"):
        model.encode(["a man plays"], features=square)
    # the same arrays with the right shapes (float64 accepted in memory) give vectors
    good = FittedFeatures(
        square.spec, {"mean": np.zeros(D), "matrix": np.eye(D, 8, dtype=np.float64)}
    )
    assert model.encode(["a man plays"], features=good).shape == (1, 8)


def test_nan_statistics_are_never_written(tmp_path):
    bad = FittedFeatures(FeatureSpec.parse("mu/sif"), {"sif_weights": np.full(5, np.nan)})
    with pytest.raises(VatError, match="sif_weights has NaN at 5 entries"):
        bad.save(tmp_path / "f.safetensors")
    assert not (tmp_path / "f.safetensors").exists()


# -- a statistics file that is a FIFO or a folder -------------------------------------------
class _Hang(Exception):
    pass


def _no_hang(call, limit: int = 10):
    """call() with an alarm: a read that blocks on a FIFO fails the test instead of hanging."""

    def alarm(*_):
        raise _Hang

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(limit)
    try:
        return call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_statistics_file_that_is_a_fifo_or_folder_is_named(ckpt, folders, tmp_path, kind):
    """Before: 'stores no token frequencies' (a checkpoint) or the folder's statistics
    ignored (a folder)."""
    what = "a named pipe (FIFO)" if kind == "fifo" else "a folder"

    def make(path: Path) -> None:
        os.mkfifo(path) if kind == "fifo" else path.mkdir()

    beside = stats_path_for(ckpt, FeatureSpec.parse("mu/sif"))
    make(beside)
    with pytest.raises(VatError) as e:
        _no_hang(lambda: vat.load(str(ckpt)).encode(["a man plays"], features="mu/sif"))
    _one_line(e.value, f"feature statistics file {beside} is {what}")
    assert "token frequencies" not in str(e.value)
    fitted = FittedFeatures(FeatureSpec.parse("mu/sif"), {"sif_weights": np.ones(3, np.float32)})
    with pytest.raises(VatError, match="expected a file path to write"):
        _no_hang(lambda: fitted.save(beside))
    folder = _copy(folders[0]["sif"], tmp_path / "model")
    (folder / "features.safetensors").unlink()
    make(folder / "features.safetensors")
    with pytest.raises(CheckpointError) as e:
        _no_hang(lambda: vat.load(str(folder)))
    _one_line(e.value, f"{folder / 'features.safetensors'} is {what}")


# -- sentence_vat_config.json ------------------------------------------------------------------
def _config_text(text: str):
    def damage(path: Path) -> None:
        path.write_text(text)

    return damage


def _config_kind(kind: str):
    def damage(path: Path) -> None:
        path.unlink()
        os.mkfifo(path) if kind == "fifo" else path.mkdir()

    return damage


CONFIG_DAMAGES = {
    "not JSON": (_config_text("{oops"), "is not valid JSON"),
    "a list": (_config_text('["layer0/sif/none"]'), "is a JSON list; expected a JSON object"),
    "empty": (_config_text(""), "is empty; expected a JSON object"),
    "a FIFO": (_config_kind("fifo"), "is a named pipe (FIFO), expected a regular file"),
    "a folder": (_config_kind("folder"), "is a folder, expected a regular file"),
    "deeply nested": (_config_text("[" * 100_000 + "]" * 100_000), "JSON nested too deeply"),
    "features a number": (_config_text('{"features": 5}'), "'features' must be a feature spec"),
    "features not a spec": (_config_text('{"features": "mu/xyz"}'), "feature weighting"),
    "no spec beside statistics": (_config_text('{"pooling": "mean"}'), "names no feature spec"),
    "missing beside statistics": (lambda p: p.unlink(), "but no sentence_vat_config.json"),
}


@pytest.mark.parametrize("case", CONFIG_DAMAGES)
def test_a_broken_module_config_is_an_error_not_mean_of_mu(folders, tmp_path, case):
    """Before: a FIFO or folder there silently dropped the folder's spec to mu/mean/none
    (ignoring features.safetensors); deep nesting was a RecursionError."""
    damage, needle = CONFIG_DAMAGES[case]
    folder = _copy(folders[0]["sif"], tmp_path / "model")
    path = folder / "sentence_vat_config.json"
    damage(path)
    with pytest.raises(CheckpointError) as e:
        _no_hang(lambda: vat.load(str(folder)))
    where = str(path) if "missing" not in case else str(folder)
    _one_line(e.value, where, needle)


def test_sentence_transformers_never_blocks_on_a_fifo_module_config(folders, tmp_path):
    from sentence_transformers import SentenceTransformer

    folder = _copy(folders[0]["sif"], tmp_path / "model")
    _config_kind("fifo")(folder / "sentence_vat_config.json")
    with pytest.raises(CheckpointError, match="named pipe"):
        _no_hang(lambda: SentenceTransformer(str(folder), trust_remote_code=True, device="cpu"))


def test_a_folder_without_statistics_or_spec_still_loads(folders, tmp_path):
    """A folder from before feature specs: no features.safetensors, no 'features' entry."""
    folder = _copy(folders[0]["plain"], tmp_path / "model")
    (folder / "sentence_vat_config.json").write_text(json.dumps({"pooling": "mean"}))
    assert vat.load(str(folder)).loaded.feature_spec is None
    (folder / "sentence_vat_config.json").unlink()
    assert vat.load(str(folder)).loaded.feature_spec is None


# -- the SIF constant --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["mu/sif=inf", "mu/sif=nan", "mu/sif=0", "mu/sif=-1", "mu/sif=1e400"]
)
def test_the_sif_constant_must_be_finite_and_positive(text):
    """Before: sif=inf was accepted and wrote NaN statistics."""
    with pytest.raises(VatError, match="the SIF constant a must be a finite number > 0"):
        FeatureSpec.parse(text)


def test_the_sif_constant_refuses_a_bool():
    with pytest.raises(VatError, match="finite number > 0"):
        FeatureSpec(weighting="sif", sif_a=True)
    assert FeatureSpec.parse("mu/sif=0.01").sif_a == 0.01


# -- overwrite over an earlier export ----------------------------------------------------------
@pytest.mark.parametrize("kind", ["sif", "whiten8", "pc1", "plain"])
def test_export_overwrites_an_earlier_export_of_every_spec(folders, tmp_path, kind):
    """Before (914d78f): an export with the default spec (layer0/sif/none, which writes
    features.safetensors) was refused as "not an earlier vat export"."""
    found, _ = folders
    folder = _copy(found[kind], tmp_path / "model")
    vat.load(str(folder)).save_pretrained(folder, overwrite=True)
    assert (
        vat.load(str(folder)).loaded.feature_spec == vat.load(str(found[kind])).loaded.feature_spec
    )


def test_export_overwrites_statistics_vat_fitted_inside_the_folder(
    folders, tiny_ckpt, tmp_path, capsys
):
    """`vat.load(folder).encode(features=...)` stores what it fits in the folder
    (features-<spec>.safetensors); the folder is still an earlier export. A file of that
    name that vat did not write is still refused."""
    from vat.cli import command

    found, _ = folders
    folder = _copy(found["plain"], tmp_path / "model")
    text = tmp_path / "fit.txt"
    text.write_text("a man plays\nthe dog runs\na woman sings\n")
    vat.load(str(folder)).feature_encoder("mu/mean/pc1", fit_files=[str(text)])
    assert (folder / "features-mu-mean-pc1.safetensors").is_file()
    assert command("export")([str(tiny_ckpt), str(folder), "--overwrite"]) == 0, capsys.readouterr()
    assert not (folder / "features-mu-mean-pc1.safetensors").exists()
    (folder / "features-mu-mean-pc1.safetensors").write_bytes(b"user data")
    with pytest.raises(VatError, match=r"not an earlier vat export \(features-mu-mean-pc1"):
        vat.load(str(folder)).save_pretrained(folder, overwrite=True)
    assert (folder / "features-mu-mean-pc1.safetensors").read_bytes() == b"user data"


@pytest.mark.parametrize(
    "counts",
    [[1, -2, 3], ["7"], "1,2,3", [1.5], [True], "too many"],
    ids=["negative", "strings", "a string", "floats", "bools", "too many"],
)
def test_token_counts_in_a_folder_are_checked(folders, tmp_path, counts):
    """The counts SIF weights are fitted from are checked when the folder loads (before: a
    traceback at the fit, or float counts silently cut to integers)."""
    found, vocab = folders
    folder = _copy(found["plain"], tmp_path / "model")
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["token_counts"] = [1] * (vocab + 1) if counts == "too many" else counts
    path.write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as e:
        vat.load(str(folder))
    _one_line(e.value, f"{path}: 'token_counts'")
    config["token_counts"] = [2] * vocab  # sound counts load, and feed the SIF weights
    path.write_text(json.dumps(config))
    fitted = vat.load(str(folder)).feature_encoder("mu/sif", save=False).fitted
    np.testing.assert_allclose(fitted.arrays["sif_weights"], 1e-3 / (1e-3 + 1 / vocab), rtol=1e-5)
