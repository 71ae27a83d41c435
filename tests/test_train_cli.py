"""`vat train` end to end: fit, checkpoints, TensorBoard, configs, errors,
resume, DDP."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from conftest import ASSETS, ROOT
from helpers import TINY, fit_args, scalars, train_main
from train_fixtures import train_once

from vat.features import token_vectors
from vat.share.resolve import load_model


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("fit") / "run"
    code, err = train_once(fit_args(run, run.parent / "cache"))
    assert code == 0, err[-20:]
    return run


def test_fit_writes_checkpoint_tensorboard_config_and_tokenizer(fitted):
    assert (fitted / "checkpoints" / "last.ckpt").is_file()
    assert list((fitted / "checkpoints").glob("best-*.ckpt"))
    assert (fitted / "config.yaml").is_file() and (fitted / "tokenizer.json").is_file()
    logged = scalars(fitted)
    for tag in [
        "train/loss",
        "train/nll",
        "train/ppl",
        "train/kl",
        "train/kl_weight",
        "train/kl_weighted",
        "train/lr",
        "train/tokens_per_s",
        "train/nonpad_frac",
        "val/loss",
        "val/nll",
        "val/ppl",
        "val/kl",
        "val/kl_weighted",
    ]:
        assert tag in logged, tag
    assert [s for s, _ in logged["train/loss"]] == [0, 1]
    # model TFLOP/s = tokens/s x 6 x the matmul weights (lm_head included), per logged step
    model = load_model(fitted / "checkpoints" / "last.ckpt").model
    linear = {id(m.weight): m.weight.numel() for m in model.modules() if hasattr(m, "in_features")}
    (step, rate), (step2, tflops) = (
        logged["train/tokens_per_s"][-1],
        logged["train/model_tflops"][-1],
    )
    assert step == step2 and tflops == pytest.approx(
        rate * 6 * sum(linear.values()) / 1e12, rel=1e-5
    )
    # perplexity is exp(nll): torchmetrics' Perplexity must agree with the NLL mean
    assert logged["val/ppl"][-1][1] == pytest.approx(
        torch.tensor(logged["val/nll"][-1][1]).exp().item(), rel=1e-4
    )


def test_checkpoint_roundtrip_gives_same_mu(fitted, tiny_sentences):
    from vat.tokenizer import VATTokenizer
    from vat.train.system import VATSystem

    loaded = load_model(fitted / "checkpoints" / "last.ckpt")
    assert loaded.tokenizer.to_str() == VATTokenizer.from_file(fitted / "tokenizer.json").to_str()
    mu1 = token_vectors(loaded.model, loaded.tokenizer, tiny_sentences).vectors
    system = VATSystem.load_from_checkpoint(fitted / "checkpoints" / "last.ckpt", weights_only=True)
    mu2 = token_vectors(system.model, loaded.tokenizer, tiny_sentences).vectors
    assert mu1.shape[0] > 0 and (mu1 == mu2).all()
    assert sum(loaded.length_histogram) == 12  # 16 sentences, 25% held out


def test_validate_and_test_subcommands(fitted, capsys):
    from vat.cli.train import main

    # fit_args with "fit" swapped for the subcommand
    args = fit_args(fitted, fitted.parent / "cache")[1:]
    last = ["--ckpt_path", str(fitted / "checkpoints" / "last.ckpt")]
    assert main(["validate", *args, *last]) == 0
    out, err = capsys.readouterr()
    assert "val/loss" in out, err[-2000:]
    assert main(["test", *args, "--data.test_files", f"[{ASSETS / 'sentences.txt'}]", *last]) == 0
    out, err = capsys.readouterr()
    assert "test/nll" in out, err[-2000:]


def test_every_config_parses(tmp_path):
    """Each YAML in configs/ opens with its purpose and command, and LightningCLI accepts it."""
    from vat.cli.train import VATCLI, _OneLineErrorParser, build, trainer_defaults
    from vat.data.datamodule import VATDataModule
    from vat.train.system import VATSystem

    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(configs) >= 3
    for cfg in configs:
        text = cfg.read_text()
        assert text.startswith("#") and "vat train -c" in text[:1500], cfg
        yaml.safe_load(text)
        cli = VATCLI(
            VATSystem,
            VATDataModule,
            run=False,
            parser_class=_OneLineErrorParser,
            trainer_defaults=trainer_defaults(),
            args=["-c", str(cfg), "--trainer.accelerator", "cpu", "--trainer.precision", "32-true"],
        )
        build(cli)
        assert cli.model.arch.vocab_size == cli.datamodule.hparams.vocab_size
        assert cli.model.arch.max_len == cli.datamodule.hparams.max_len


def test_config_typo_is_one_line_error(tmp_path, capsys):
    code, err = train_main(fit_args(tmp_path, None, "--model.loss.prior_stdd", "0.5"), capsys)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error:") and "prior_stdd" in err[0]


@pytest.mark.parametrize("case", ["missing", "empty", "directory"])
def test_bad_corpus_is_one_line_error(tmp_path, case, capsys):
    path = tmp_path / "corpus.txt"
    if case == "empty":
        path.write_text("\n \n")
    if case == "directory":
        path.mkdir()
    code, err = train_main(
        fit_args(tmp_path / "run", tmp_path / "cache", "--data.train_files", f"[{path}]"), capsys
    )
    assert code == 2
    assert err[-1].startswith("error: data.train_files") and str(path) in err[-1]
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_checkpoint_with_other_corpus_or_tokenizer_is_rejected(fitted, tmp_path, capsys):
    other = tmp_path / "other.txt"
    other.write_text("\n".join(f"completely different words number {i} here" for i in range(40)))
    code, err = train_main(
        fit_args(
            tmp_path / "run",
            tmp_path / "cache",
            "--data.train_files",
            f"[{other}]",
            "--trainer.max_steps",
            "4",
            "--ckpt_path",
            str(fitted / "checkpoints" / "last.ckpt"),
        ),
        capsys,
    )
    assert code == 2
    assert err[-1].startswith("error: --data.train_files: a resume cannot change it")
    # Same options, but the corpus file changed under them: the retrained tokenizer differs.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text((ASSETS / "sentences.txt").read_text())
    args = fit_args(tmp_path / "run2", tmp_path / "cache", "--data.train_files", f"[{corpus}]")
    assert train_main(args, capsys)[0] == 0
    corpus.write_text(other.read_text())
    code, err = train_main([*args, "--trainer.max_steps", "4", "--ckpt_path", "last"], capsys)
    assert code == 2
    assert "tokenizer differs" in err[-1]


def test_unwritable_run_dir_and_too_many_devices(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = train_main(fit_args(blocker / "run"), capsys)
    assert code == 2 and err[-1].startswith("error: --run_dir") and str(blocker / "run") in err[-1]
    code, err = train_main(
        fit_args(tmp_path / "r", None, "--trainer.accelerator", "gpu", "--trainer.devices", "64"),
        capsys,
    )
    expected = (
        "error: --trainer.devices 64 asks for more GPUs than exist"
        if torch.cuda.is_available()
        else "error: --trainer.accelerator gpu: no GPU is visible to torch"
    )
    assert code == 2 and err[-1].startswith(expected)


def test_last_checkpoint_holds_the_final_step_between_periodic_saves(tmp_path, capsys):
    """Lightning 2.6 alone keeps last.ckpt from the last periodic save (step 4 here) when fit
    stops at step 7; vat's FinalLastCheckpoint rewrites it at the end of fit."""
    run = tmp_path / "run"
    code, err = train_main(
        fit_args(
            run,
            tmp_path / "cache",
            "--trainer.max_steps",
            "7",
            "--checkpoint.every_n_train_steps",
            "4",
        ),
        capsys,
    )
    assert code == 0, err[-20:]
    from vat.share.checkpoint import read_checkpoint

    assert read_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 7


# -- the `vat train` command ----------------------------------------------------------------
# `python -m vat train fit ARGS` in a fresh interpreter: test_hints.py's
# test_training_data_that_is_not_utf8_is_one_warning_line (exit 0), and the DDP tests (exit 2,
# test_non_finite.py, test_outside_failures.py); its usage error in one line:
# test_config_typo_is_one_line_error.


def test_predict_is_not_offered(capsys):
    from vat.cli.train import VATCLI

    assert "predict" not in VATCLI.subcommands() and "fit" in VATCLI.subcommands()
    code, err = train_main(["predict", "-c", TINY], capsys)
    assert code == 2 and len(err) == 1 and "predict" in err[0]


def test_packaged_config_by_name(capsys):
    from vat.cli.config import find_config, resolve_config_args
    from vat.cli.train import vat_train

    demo = find_config("demo")
    assert demo is not None and demo == find_config("configs/demo.yaml") == find_config("demo.yaml")
    assert resolve_config_args(["-c", "demo", "--x", "1"]) == ["-c", str(demo), "--x", "1"]
    assert resolve_config_args(["--config=demo"]) == [f"--config={demo}"]
    assert resolve_config_args(["-c", TINY]) == ["-c", TINY]  # a file wins over a name
    with pytest.raises(SystemExit) as e:
        vat_train(["-c", "demo", "--print_config"])
    assert e.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    expected = yaml.safe_load(demo.read_text())["model"]["arch"]
    assert {k: printed["model"]["arch"][k] for k in expected} == expected


def test_progress_bar_counts_steps_not_epochs(tmp_path, capsys):
    from vat.cli.train import vat_train

    def with_bar(run: str, *extra: str) -> int:
        # `vat train` takes no subcommand: fit_args without its "fit"; a fresh cache each, so
        # the data module tokenizes (and shows its bar) every time
        bar = ["--trainer.enable_progress_bar", "true"]
        return vat_train([*fit_args(tmp_path / run, tmp_path / f"cache-{run}")[1:], *bar, *extra])

    code = with_bar("run", "--trainer.max_steps", "3")
    out, err = capsys.readouterr()  # every bar on stderr: stdout is for results
    assert code == 0 and "training" in err and "3/3" in err and "Epoch" not in err
    assert "vat: tokenizing" in err and "training:" not in out
    code = with_bar("run2", "--no-progress")
    out, err = capsys.readouterr()
    assert code == 0 and "training:" not in out + err and "vat: tokenizing" not in err


def test_a_callback_error_inside_the_config_is_one_line(tmp_path, capsys):
    """jsonargparse wraps a callback's own VatError ("Does not validate against any of the
    Union subtypes", a traceback); `vat train` shows the VatError itself, as one line."""
    from vat.cli.train import vat_train

    missing = tmp_path / "missing.txt"
    code = vat_train(
        [
            "-c", TINY, "--run_dir", str(tmp_path / "r"),
            "--trainer.callbacks", "vat.callbacks.SamplesCallback",
            "--trainer.callbacks.sentences_file", str(missing),
        ]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"error: SamplesCallback: sentences_file {missing} does not exist"], err
