"""The model card says what its folder does (vat.share.model_card).

Each card is checked against facts taken from the folder itself (its sentence_vat_config.json,
its features.safetensors, its config.json), not against a copy of the card's text: the spec's
source, weighting and post-processing in words, where each statistic came from, and no
sentence that another spec would need."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import checkpoint_with_counts, export_folder

import vat
from vat.errors import OptionError
from vat.feature_spec import DEFAULT_EXPORT_SPEC, FeatureSpec, FittedFeatures
from vat.features.choice import features_for
from vat.features.fitting import FitOptions
from vat.share.export import export_model
from vat.share.folder import record_measurements
from vat.share.model_card import (
    _SOURCES,
    DEFAULT_SPEC_REASON,
    describe_features,
    folder_features,
    model_card,
)

# words that belong to one weighting / post-processing: a card of another one never says them
WEIGHTING_MARKS = {
    "sif": "SIF weight",
    "sum": "summed over",
    "start": "first subword",
    "precision": "precision weighting",
    "mean": "mean pooling",  # the old contradiction: a SIF card said "mean pooling"
}
POST_MARKS = {"pc": "principal components", "whiten": "whitened"}
SCORE = {"task": "STS12", "type": "sentence-similarity", "metric": "spearman", "split": "test",
         "value": 50.0, "unit": "percent", "field": "STS12.all.spearman.mean"}  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_ckpt, tiny_sentences):
    """The tiny checkpoint as `vat train` leaves it: token counts in its `vat` entry and its
    training file recorded (absolute), plus a second text file to fit or count on."""
    root = tmp_path_factory.mktemp("card")
    lines = tiny_sentences + [s.lower() + " again" for s in tiny_sentences]
    path, train, counts = checkpoint_with_counts(tiny_ckpt, root, lines)
    other = root / "other.txt"
    other.write_text("\n".join(s.upper() for s in lines[:20]) + "\n")
    return path, train, other, lines


def _sections(card: str) -> str:
    """The card's sentences about the vectors: its opening paragraph and its Sentence
    features section (the metrics' own notes may name mu: they describe the model)."""
    body = card.split("\n---\n", 1)[1]
    opening = body.split("## ", 1)[0]
    features = body.split("## Sentence features", 1)[1].split("\n## ", 1)[0]
    return opening + features


def _check_card(card: str, spec: FeatureSpec, d_model: int, root: Path) -> None:
    """What every card must say of `spec`, made from the spec: its name, its source,
    weighting and post-processing in words, the vectors' width, nothing of other specs, and
    nothing the folder's users lack (vat's RESULTS.md, the exporting machine's folders)."""
    about = _sections(card)
    assert f"`{spec}`" in about and describe_features(spec, named=False) in about
    for source, words in _SOURCES.items():
        assert (words in about) == (source == spec.source), (source, spec)
    if spec.source.startswith("layer") and spec.source != "layer0":
        assert f"hidden states after layer {spec.source[5:]}" in about
    for weighting, mark in WEIGHTING_MARKS.items():
        assert (mark in about) == (weighting == spec.weighting != "mean"), (weighting, spec)
    for post, mark in POST_MARKS.items():
        assert (mark in about) == spec.post.startswith(post), (post, spec)
    dim = spec.whiten_dim or d_model
    assert f"# (2, {dim})" in card and f"{dim}-dimensional vectors" in about
    assert (DEFAULT_SPEC_REASON in card) == (spec == FeatureSpec.parse(DEFAULT_EXPORT_SPEC))
    assert "RESULTS.md" not in card and str(root) not in card
    assert not re.search(r"\b0 (unlabeled )?sentences", card)
    if not spec.needs_fit:
        assert "It needs no fitted statistics" in about and "fitted on" not in about


def _fit_of(folder: Path) -> dict:
    return FittedFeatures.load(folder / "features.safetensors").fit


# -- one card per kind of spec -----------------------------------------------------------------
def test_plain_spec_card(trained, tmp_path):
    ckpt, *_ = trained
    folder = export_folder(ckpt, tmp_path / "plain", features="mu/mean/none")
    card = (folder / "README.md").read_text()
    _check_card(card, FeatureSpec.parse("mu/mean/none"), 32, ckpt.parent.parent)
    assert "SIF" not in card and "features.safetensors" not in card


def test_default_sif_card_and_what_it_says_of_the_loaders(trained, tmp_path, tiny_sentences):
    """The default spec: SIF weights from the recorded training counts, nothing fitted on
    sentences, the reason for the default in the card's own words; and the loaders the card
    names give the vectors it says (AutoModel's encode, sentence-transformers)."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    ckpt, *_ = trained
    folder = export_folder(ckpt, tmp_path / "default")
    spec = FeatureSpec.parse(
        json.loads((folder / "sentence_vat_config.json").read_text())["features"]
    )
    assert spec == FeatureSpec.parse(DEFAULT_EXPORT_SPEC)
    card = (folder / "README.md").read_text()
    _check_card(card, spec, 32, ckpt.parent.parent)
    about = _sections(card)
    tokens = _fit_of(folder)["count_tokens"]
    assert tokens == int(vat.load(str(ckpt)).loaded.token_counts.sum())
    sif = (
        "The SIF weights (`features.safetensors`) come from the subword counts of the model's "
        f"training text ({tokens:,} subwords), recorded during training."
    )
    assert sif in about
    assert "were fitted on" not in about and "pool the token means" not in card
    assert "exported from: model.ckpt" in card and "- data: train.txt" in card
    ours = vat.load(folder, device="cpu").encode(tiny_sentences[:4])
    np.testing.assert_array_equal(
        AutoModel.from_pretrained(str(folder)).encode(tiny_sentences[:4]), ours
    )
    st = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(st.encode(tiny_sentences[:4]), ours, atol=1e-6)


@pytest.mark.parametrize("how", ["fitting sample", "named files", "counted"])
def test_fitted_specs_say_where_their_statistics_came_from(trained, tmp_path, how):
    """whiten8 fitted on the checkpoint's fitting sample or on named files, and a pc spec
    whose SIF weights come from named count files: the card gives the count, where the
    sentences came from and the seconds that features.safetensors records."""
    ckpt, train, other, lines = trained
    options = {
        "fitting sample": {"features": "mu/mean/whiten8"},
        "named files": {"features": "mu/mean/whiten8", "fit_files": [str(other)]},
        "counted": {"features": "layer1/sif/pc1", "count_files": [str(other)]},
    }[how]
    folder = export_folder(ckpt, tmp_path / "f", **options)
    spec, fit = FeatureSpec.parse(options["features"]), _fit_of(folder)
    card = (folder / "README.md").read_text()
    _check_card(card, spec, 32, ckpt.parent.parent)
    about = _sections(card)
    n = 20 if how == "named files" else len(lines)
    assert fit["sentences"] == n  # every line (fewer than the sample size) was used
    what = "mean and principal components" if spec.pcs else "whitening mean and matrix"
    where = (
        "sampled (seed 0) from other.txt"
        if how == "named files"
        else "from the checkpoint's fitting sample"
    )
    assert f"The {what} (`features.safetensors`) were fitted on {n:,} sentences " \
        f"{where} in {fit['seconds']:g} s." in about  # fmt: skip
    if how == "counted":
        assert fit["counts_from"] == "count_files"
        assert "The SIF weights (`features.safetensors`) come from the subword counts of " \
            f"other.txt ({fit['count_tokens']:,} subwords)." in about  # fmt: skip
    else:
        assert "SIF" not in about


def test_fit_on_given_sentences_and_a_transductive_fit(trained, tiny_sentences):
    """Statistics fitted on sentences handed to the fit (no file) are said to be that; a fit
    on evaluation data says it is transductive."""
    ckpt, *_ = trained
    loaded = vat.load(ckpt, device="cpu").loaded
    config = {"model_config": loaded.config.to_dict(), "prior_std": 0.4, "training": {}}
    given = features_for(
        loaded, "mu/mean/whiten8", FitOptions(fit_sentences=tiny_sentences), save=False
    ).fitted
    card = model_card(config, loaded.tokenizer.vocab_size, given)
    _check_card(card, given.spec, 32, ckpt.parent.parent)
    n = len(tiny_sentences)
    assert f"fitted on {n:,} sentences given to the fit directly, not read from files" in card
    assert "transductive" not in card
    info = {"from": "evaluation tasks STS12", "transductive": True}
    tasks = features_for(
        loaded, "mu/mean/pc2", FitOptions(fit_sentences=tiny_sentences, info=info), save=False
    ).fitted
    card = model_card(config, loaded.tokenizer.vocab_size, tasks)
    _check_card(card, tasks.spec, 32, ckpt.parent.parent)
    assert f"fitted on {n:,} sentences from evaluation tasks STS12" in card
    assert "fitted transductively" in card
    # a statistics file that records nothing of its fit never becomes "0 sentences"
    bare = FittedFeatures(tasks.spec, tasks.arrays, {})
    card = model_card(config, loaded.tokenizer.vocab_size, bare)
    assert "sentences (how many is not recorded) given to the fit directly" in card


@pytest.mark.parametrize(
    "spec", ["firstlast/sif=0.01/whiten16", "layer2/mean/pc1", "mu/precision/none", "mu/start/none"]
)
def test_every_source_weighting_and_post_in_words(spec, tmp_path):
    """Cards rendered straight from a fit record: the other sources (firstlast, layerK), the
    other weightings, a SIF constant, and scores said to measure the folder's own spec."""
    spec = FeatureSpec.parse(spec)
    fit = {"sentences": 2000, "from": "named files", "files": ["/d/a.txt", "/d/b.txt"],
           "seconds": 1.5, "seed": 3, "count_files": ["/d/counts.txt"]}  # fmt: skip
    config = {
        "model_config": {"d_model": 32},
        "prior_std": 0.4,
        "training": {"data": {"train_files": ["/d/train.txt"]}, "metrics": {"val/ppl": 1.1}},
        "evaluation": [dict(SCORE)],
    }
    card = model_card(config, 10, FittedFeatures(spec, {}, fit))
    _check_card(card, spec, 32, Path("/d"))
    assert f"this folder's sentence features (`{spec}`)" in card
    assert "not a language model's perplexity" in card  # a perplexity given z, named for it
    if spec.weighting == "sif":
        assert f"a = {spec.sif_a:g}" in card and "subword counts of counts.txt" in card
    if spec.post != "none":
        assert "fitted on 2,000 sentences sampled (seed 3) from a.txt, b.txt in 1.5 s" in card


# -- a spec changed after export ---------------------------------------------------------------
def test_spec_changed_after_export_rerenders_a_true_card(trained, tmp_path):
    """An export with recorded scores, its sentence_vat_config.json then changed: the card
    record_measurements renders names the new spec, says the folder lacks its statistics
    and how vat gets them (and vat does), and says the scores measured the old spec, which
    the model-index no longer claims. A re-export drops those scores."""
    from huggingface_hub import ModelCard

    ckpt, train, *_ = trained
    loaded = vat.load(ckpt, device="cpu").loaded
    fitted = features_for(loaded, DEFAULT_EXPORT_SPEC, save=False).fitted
    folder = export_model(loaded, tmp_path / "m", features=fitted, evaluation=[dict(SCORE)])
    recorded = json.loads((folder / "config.json").read_text())["evaluation"]
    assert [s["features"] for s in recorded] == [DEFAULT_EXPORT_SPEC]  # scores name their spec
    assert len(ModelCard.load(folder / "README.md").data.eval_results) == 1

    settings = folder / "sentence_vat_config.json"
    for new in ("mu/mean/whiten8", "mu/sum/none"):
        settings.write_text(json.dumps({"pooling": "mean", "features": new}))
        record_measurements(folder, "Measured elsewhere", "On a GPU.", [("BLEU", "12.00")])
        card, spec = (folder / "README.md").read_text(), FeatureSpec.parse(new)
        _check_card(card, spec, 32, ckpt.parent.parent)
        assert "| BLEU | 12.00 |" in card
        assert f"for the feature spec `{DEFAULT_EXPORT_SPEC}`, which this folder no longer " \
            f"uses (it now gives `{new}`, not scored)" in card  # fmt: skip
        assert f"this folder's sentence features (`{new}`)" not in card
        assert ModelCard.load(folder / "README.md").data.eval_results is None
        if spec.needs_fit:
            about = _sections(card)
            assert "This folder does not hold the statistics this spec needs" in about
            assert "an exported folder carries no training text (`--fit-files`" in about
            assert "SIF weights (`features.safetensors`) come from" not in about
            # and vat does what the card says: the vectors are refused, in one line saying
            # how to fit them; naming the spec and files fits whiten8 on them and stores it
            # in the folder, whose vectors then follow its spec
            with pytest.raises(OptionError) as e:  # a command shows --features
                vat.load(folder, device="cpu").encode(["a man plays"])
            assert len(str(e.value).splitlines()) == 1 and e.value.name == "features"
            held = f"(features.safetensors holds {DEFAULT_EXPORT_SPEC}'s)"
            assert f"names the feature spec {new}, whose statistics" in str(e.value)
            assert f"the folder does not hold {held}" in str(e.value)
            assert f"name {new} here to fit them" in str(e.value)
            assert f'`vat.load(DIR).feature_encoder("{new}")`' in about
            vat.load(folder, device="cpu").feature_encoder(new, fit_files=train)
            assert vat.load(folder, device="cpu").encode(["a man plays"]).shape == (1, 8)

    again = export_folder(folder, tmp_path / "again")  # mu/sum/none now: the scores are not its
    assert json.loads((again / "config.json").read_text()).get("evaluation") is None
    assert "## Evaluation" not in (again / "README.md").read_text()


def test_reexport_keeps_scores_only_for_the_same_vectors(trained, tmp_path):
    """Scores travel with a re-export only while it gives the same vectors: the same spec with
    the same statistics; refitting the spec on other sentences drops them."""
    ckpt, _, other, _ = trained
    loaded = vat.load(ckpt, device="cpu").loaded
    fitted = features_for(loaded, "mu/mean/whiten8", save=False).fitted
    folder = export_model(loaded, tmp_path / "m", features=fitted, evaluation=[dict(SCORE)])
    same = export_folder(folder, tmp_path / "same")
    kept = json.loads((same / "config.json").read_text())["evaluation"]
    assert kept == [{**SCORE, "features": "mu/mean/whiten8"}]
    assert "this folder's sentence features (`mu/mean/whiten8`)" in (same / "README.md").read_text()
    refit = export_folder(folder, tmp_path / "refit", fit_files=[str(other)])
    assert json.loads((refit / "config.json").read_text()).get("evaluation") is None


def test_folder_features_gives_the_folders_own_spec(trained, tmp_path):
    ckpt, *_ = trained
    loaded = vat.load(ckpt, device="cpu").loaded
    stats = features_for(loaded, DEFAULT_EXPORT_SPEC, save=False).fitted.save(tmp_path / "f.st")
    held = folder_features(FeatureSpec.parse(DEFAULT_EXPORT_SPEC), stats)
    assert isinstance(held, FittedFeatures) and "sif_weights" in held.arrays
    other = FeatureSpec.parse("mu/mean/whiten8")
    assert folder_features(other, stats) == other  # another spec's statistics: not its own
    assert folder_features(other, tmp_path / "absent") == other
    assert folder_features(FeatureSpec(), tmp_path / "absent") == FittedFeatures(FeatureSpec())
    assert folder_features(None, stats) is None
