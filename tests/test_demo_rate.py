"""The demo behaves like a VAE. configs/demo.yaml holds a rate with the KL controller, the
shipped demo's variational samples vary, vat says when a posterior is nearly deterministic
(vat.generate.variation: a pure criterion on decoded texts; the training summary and `vat
generate sample` / `resample-token`), and the perplexity given z is named for what it is."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml
from conftest import ROOT
from helpers import copy_folder

from vat.cli import main as vat_main
from vat.errors import OptionError
from vat.generate.variation import (
    MIN_SAMPLES,
    NEARLY_DETERMINISTIC,
    SampleAgreement,
    deterministic_note,
    sample_agreement,
)
from vat.share.pretrained import PACKAGE_SHIPPED_DIR

DEMO = "demo-wordnet-d64"
DEMO_DIR = PACKAGE_SHIPPED_DIR / DEMO
# validation sentences (data/demo_val.txt, lines 501-506; no run trained on them)
SENTENCES = [
    "The dishes were only sketchily washed.",
    "My dear little mother.",
    "A democratic scorn for bloated dukes and lords.",
    "He was dispatched to ask the enemy to surrender.",
    "The children spilled out of the classroom.",
    "She was sentenced to life imprisonment.",
]


# -- the criterion, closed form -------------------------------------------------------------
def test_agreement_counts_samples_equal_to_the_mean_decoding_of_reconstructed_sentences():
    a, b, c = "a cat sat.", "a dog ran.", "the end."
    # sentence 1 reconstructs (mean == input): 2 of its 3 samples repeat it
    # sentence 2 does not (mean != input): left out, whatever its samples are
    got = sample_agreement([[a, a, b], [c, c, c]], [a, "noise"], [a, b])
    assert got == SampleAgreement(2, 3) and got.fraction == pytest.approx(2 / 3)
    # outer white space does not make a sample differ
    assert sample_agreement([[" a cat sat. \n"] * 4], [a], [a + " "]) == (4, 4)
    # a collapsed decoder (every text the same, none the input) is not "deterministic"
    collapsed = sample_agreement([[c] * 5, [c] * 5], [c, c], [a, b])
    assert collapsed == (0, 0) and collapsed.fraction == 0.0
    assert not collapsed.nearly_deterministic


@pytest.mark.parametrize(
    ("identical", "total", "expected"),
    [
        (19, 20, True),  # exactly the threshold
        (18, 20, False),
        (9, 10, False),
        (50, 50, True),
        (MIN_SAMPLES, MIN_SAMPLES, True),
        (MIN_SAMPLES - 1, MIN_SAMPLES - 1, False),  # too few samples to say
        (0, 0, False),
    ],
)
def test_nearly_deterministic_threshold(identical, total, expected):
    assert NEARLY_DETERMINISTIC == 0.95
    assert SampleAgreement(identical, total).nearly_deterministic is expected


def test_agreement_needs_one_mean_and_input_per_sentence():
    with pytest.raises(OptionError, match="^means: has 1 texts for 2 sentences"):
        sample_agreement([["x"], ["y"]], ["x"], ["x", "y"])
    with pytest.raises(OptionError, match="^inputs: has 3 texts for 2 sentences"):
        sample_agreement([["x"], ["y"]], ["x", "y"], ["x", "y", "z"])


# -- the training summary ---------------------------------------------------------------------
def _trainer(**metrics):
    return SimpleNamespace(callback_metrics=metrics, checkpoint_callbacks=[], global_step=0)


def test_summary_names_the_perplexity_given_z_and_says_when_samples_repeat():
    from vat.callbacks.summary import summary_lines

    trainer = _trainer(**{"val/nll": 0.05, "val/ppl": 1.0513, "val/kl": 158.0})
    (line,) = summary_lines(trainer, None)
    assert line.startswith(
        "vat: final validation: NLL given z 0.0500 nats/token (reconstruction perplexity 1.051), "
        "KL 158.0000 nats/token"
    )
    varied = summary_lines(trainer, None, SampleAgreement(10, 20))
    assert not any("deterministic" in x for x in varied)
    lines = summary_lines(trainer, None, SampleAgreement(19, 20))
    assert lines[-1] == "vat: note: " + deterministic_note(SampleAgreement(19, 20), 1.0)
    assert "19 of 20 variational samples (tau 1)" in lines[-1]
    assert "model.loss.target_kl" in lines[-1] and "--" not in lines[-1]  # a config key, no flag


def test_the_card_names_the_perplexity_given_z():
    from vat.share.model_card import METRIC_NOTES

    assert METRIC_NOTES["val/ppl"].startswith("reconstruction perplexity (given z)")
    card = (DEMO_DIR / "README.md").read_text()
    assert "- val/ppl: " in card and "(reconstruction perplexity (given z):" in card


# -- the demo config and the shipped demo -----------------------------------------------------
def test_demo_config_holds_a_rate_and_the_shipped_demo_is_trained_at_it():
    config = yaml.safe_load((ROOT / "vat" / "configs" / "demo.yaml").read_text())
    target = config["model"]["loss"]["target_kl"]
    assert 0 < target <= 40
    metrics = json.loads((DEMO_DIR / "config.json").read_text())["training"]["metrics"]
    # the controller holds the rate (RESULTS.md: validation within 30 % of training)
    assert abs(metrics["train/kl"] - target) < 0.1 * target, metrics
    assert abs(metrics["val/kl"] - target) < 0.3 * target, metrics
    # ... and reconstruction stays near the first demo's (validation BLEU 92.6 at 158 nats)
    assert metrics["val/recon_bleu"] > 85, metrics
    assert "nearly deterministic" not in (DEMO_DIR / "README.md").read_text()


def test_shipped_demo_samples_vary_and_no_note(capsys, monkeypatch):
    """Before, `vat generate sample -n 5 --tau 1.0 --model demo-wordnet-d64` returned the
    input five times. Now most sentences get several different samples."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = ["generate", "sample", "-n", "5", "--tau", "1.0", "--model", DEMO, "--json"]
    assert vat_main([*argv, *SENTENCES]) == 0
    captured = capsys.readouterr()
    records = [json.loads(x) for x in captured.out.splitlines()]
    distinct = [len(set(r["samples"])) for r in records]
    assert sum(d > 1 for d in distinct) >= len(SENTENCES) // 2, distinct
    assert "nearly deterministic" not in captured.err


@pytest.fixture(scope="module")
def narrow_demo(tmp_path_factory):
    """The shipped demo with its posterior narrowed to sigma <= exp(-15) = 3e-7 (s = 0.4):
    every sample decodes to the mean's text. (At sigma = exp(-5) = 0.0067 a greedy decoding
    that sits on a near-tie still flips now and then.)"""
    folder = copy_folder(DEMO_DIR, tmp_path_factory.mktemp("narrow"))
    (folder / "shipped.json").unlink()  # an ordinary exported folder now
    config = json.loads((folder / "config.json").read_text())
    config["model_config"].update(logvar_min=-32.0, logvar_max=-30.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_summary_measures_the_trained_model(narrow_demo):
    """What the end of `vat train` runs on the first validation batch: the narrowed demo is
    nearly deterministic, the shipped one is not."""
    import vat
    from vat.callbacks.summary import posterior_agreement
    from vat.tokenizer import make_batch

    found = {}
    for name, model in (("narrow", narrow_demo), ("shipped", DEMO)):
        loaded = vat.load(model, device="cpu").loaded
        src = make_batch(loaded.tokenizer.encode_batch(SENTENCES))["src"]
        trainer = SimpleNamespace(val_dataloaders=[[{"src": src}]])  # one loader, one batch
        module = SimpleNamespace(
            model=loaded.model, tokenizer=loaded.tokenizer, prior_std=loaded.prior_std
        )
        found[name] = posterior_agreement(trainer, module)
    assert found["narrow"].nearly_deterministic and found["narrow"].total >= 4 * 4, found
    assert not found["shipped"].nearly_deterministic, found


def test_generate_notes_a_nearly_deterministic_posterior(narrow_demo, capsys, monkeypatch):
    """The narrowed demo: every sample decodes to the mean's text, and `vat generate` says
    so once on stderr."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = narrow_demo
    argv = ["generate", "sample", "-n", "5", "--model", str(folder), *SENTENCES]
    assert vat_main(argv) == 0
    captured = capsys.readouterr()
    notes = [x for x in captured.err.splitlines() if "nearly deterministic" in x]
    assert len(notes) == 1 and notes[0].startswith("note: the posterior is nearly deterministic: ")
    assert "variational samples (tau 1)" in notes[0]
    # resampling one token says it too; token sampling and the prior are not the latent's case
    resample = ["generate", "resample-token", "--positions", "1", "--model", str(folder)]
    assert vat_main([*resample, *SENTENCES]) == 0
    assert "nearly deterministic" in capsys.readouterr().err
    assert vat_main([*resample, "--source", "prior", *SENTENCES]) == 0
    assert "nearly deterministic" not in capsys.readouterr().err
    assert vat_main([*argv, "--quiet"]) == 0
    assert "nearly deterministic" not in capsys.readouterr().err
