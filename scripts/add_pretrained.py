"""Add an exported folder to the models that ship with vat: a maintainer's step, run from a
checkout. The registry is package data (vat/shipped/NAME/), which vat itself only reads
(vat.share.pretrained).

    python scripts/add_pretrained.py DIR --name NAME [--summary ...] [--check-file FILE]

or from Python, in a checkout: `from scripts.add_pretrained import add_pretrained`, then
`add_pretrained(vat.load(DIR), NAME, summary=...)`. The weights are cast to float16 (or
bfloat16); `precision_match` measures how far they move encode and generate from float32, and
weights beyond the tolerance docs/sharing.md states are refused unless
--allow-outside-tolerance. The entry holds the export's files, the cast weights, config.json's
training record in its portable form, the card and shipped.json (every file's SHA-256 and
size). `--registry DIR` (or $VAT_SHIPPED_DIR) writes another registry.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_model

from vat.api import PretrainedVAT, load, require_loaded
from vat.cli.common import Parser, add_train_data_dir, read_text_lines
from vat.errors import (
    CheckpointError,
    OptionError,
    VatError,
    check_choice,
    check_optional_text,
    check_path,
    check_sentences,
    run_cli,
)
from vat.features.choice import features_for
from vat.features.encoder import FeatureEncoder
from vat.generate.generator import TruncationWarning, VATGenerator
from vat.io import remove_stale_temps, temp_prefix
from vat.share import CARD_NAME, CONFIG_NAME, SHIPPED_NAME, WEIGHTS_NAME
from vat.share.folder import ALL_FILES, FEATURES_NAME, is_export_file, is_model_folder, replace_dir
from vat.share.loaded import LoadedVAT, check_loaded, takes_loaded
from vat.share.model_card import model_card
from vat.share.pretrained import (
    DTYPES,
    NAME_PATTERN,
    ShippedModel,
    listing_facts,
    shipped_dir,
    shipped_model,
)
from vat.share.training_record import (
    check_portable,
    portable_fit,
    portable_name,
    portable_training,
)

SHIPPED_FORMAT = 1


def check_name(name: str, option: str = "name") -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise OptionError(
            option,
            f"{name!r} is not a shipped-model name (lowercase letters, digits, '.', '_', '-'; "
            "at most 64 characters; no slash, so that it is never a Hub repo id)",
        )
    return name


def default_summary(config: dict[str, Any]) -> str:
    """A one-line summary from the facts alone, for a model added without one."""
    f = listing_facts(config, 0, "")
    return f"A VAT ({f['shape']}) trained on {f['trained on']}, rate {f['rate']}."


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_sentences = check_sentences  # add_pretrained's argument `check_sentences` shadows the name

CHECK_SENTENCES = (
    "A man is playing a guitar.",
    "The children ran across the field after school.",
    "She poured the coffee and sat down by the window.",
    "He sequestered himself in his study to write a book.",
    "The committee will announce its decision next week.",
    "They said the car would break down and indeed it did.",
    "Prices rose sharply in the first quarter of the year.",
    "A dog is chasing a red ball in the park.",
    "The old bridge was closed for repairs all summer.",
    "Give me any peaches you don't want.",
    "The museum opens at nine and closes at five.",
    "Nobody expected the small team to win the final.",
    "The mastery of fire was a huge advance in human technology.",
    "Two women are talking on a bench near the river.",
    "The train was delayed by heavy snow in the mountains.",
    "Scientists found water ice in a crater near the pole.",
)
"""What `add_pretrained` compares the half-precision weights on when given no sentences:
short, everyday English of the kinds vat's models are trained on."""

MAX_ABS_FEATURE = 1e-3
MIN_COSINE = 0.9999
MIN_SAME_SHARE = 0.99
"""The tolerance docs/sharing.md states for a shipped model's stored weights against float32
(`precision_match`): sentence features within 1e-3, every cosine above 0.9999, and at least
99 % of greedy reconstructions identical."""


def _outside_tolerance(match: dict[str, Any]) -> list[str]:
    """What of a `precision_match` measurement lies outside the stated tolerance, each with
    its bar, in words (empty: within it)."""
    same, n = match["same_reconstructions"], match["sentences"]
    found = []
    if same < MIN_SAME_SHARE * n:
        found.append(
            f"{same} of {n} greedy reconstructions identical ({100 * same / n:.1f} %; the bar "
            f"is at least {100 * MIN_SAME_SHARE:g} %)"
        )
    if not match["max_abs_feature"] <= MAX_ABS_FEATURE:  # NaN is outside too
        found.append(
            f"sentence features within {match['max_abs_feature']:.2e} (the bar is "
            f"{MAX_ABS_FEATURE:g})"
        )
    if not match["min_cosine"] > MIN_COSINE:
        found.append(f"lowest cosine {match['min_cosine']:.6f} (the bar is above {MIN_COSINE:g})")
    return found


def add_pretrained(
    model: PretrainedVAT,
    name: str,
    *,
    summary: str | None = None,
    good_for: str | None = None,
    not_for: str | None = None,
    rebuild: str | None = None,
    dtype: str = "float16",
    check_sentences: Sequence[str] | None = None,
    check_from: str | None = None,
    registry: str | os.PathLike | None = None,
    overwrite: bool = False,
    train_data_dir: str | os.PathLike | None = None,
    allow_outside_tolerance: bool = False,
) -> ShippedModel:
    """Add an exported folder (`vat.load(DIR)`) to the shipped models as `name`: its weights
    stored in `dtype`, with what it is (`summary`, `good_for`, `not_for`; without a summary the
    card states shape, data and rate), how to rebuild it, and how far the stored weights move
    encode and generate from float32 on `check_sentences` (named `check_from` on the card;
    default CHECK_SENTENCES). `registry` defaults to $VAT_SHIPPED_DIR, else the package's
    vat/shipped/; training files are named by their path inside `train_data_dir` (default
    $VAT_DATA_DIR) or by name. Weights beyond the stated tolerance are refused, nothing
    written, unless `allow_outside_tolerance` (one's own registry, recorded as measured)."""
    require_loaded(model, "add_pretrained")
    if summary is not None and (not isinstance(summary, str) or not summary.strip()):
        raise OptionError("summary", "must be one non-empty line saying what the model is")
    for option, value in (
        ("good_for", good_for),
        ("not_for", not_for),
        ("rebuild", rebuild),
        ("check_from", check_from),
    ):
        check_optional_text(value, option)
    if not isinstance(name, str):
        raise OptionError("name", f"must be a string, got {type(name).__name__} {name!r:.60}")
    check_path(registry, "registry", optional=True)
    check_path(train_data_dir, "train_data_dir", optional=True)
    if check_sentences is None:
        sentences, origin = list(CHECK_SENTENCES), "vat's built-in check sentences"
    else:  # a single string is one sentence (vat.errors.check_sentences)
        given, _ = _sentences(check_sentences, "check_sentences")
        sentences = [s for s in given if s.strip()]
        origin = check_from or "given sentences"
        if not sentences:
            raise OptionError("check_sentences", "holds no non-empty sentence to compare on")
    info = {
        "summary": summary.strip() if summary else None,
        "good_for": good_for,
        "not_for": not_for,
        "rebuild": rebuild,
        "fp32_match": {"from": origin},
    }
    # before the measurement, which takes minutes for a long check file
    check_shipping(model.loaded, name, dtype, registry, info, train_data_dir, overwrite)
    info["fp32_match"] = precision_match(model.loaded, dtype, sentences, origin)
    outside = _outside_tolerance(info["fp32_match"])
    if outside and not allow_outside_tolerance:
        raise OptionError(
            "allow_outside_tolerance",
            f"is off, and the {dtype} weights of {name} move its outputs from float32 beyond "
            f"the tolerance of shipped models (docs/sharing.md): {'; '.join(outside)}; nothing "
            "was written (turn it on to add the model anyway, as measured)",
        )
    return write_shipped(
        model.loaded,
        name,
        {k: v for k, v in info.items() if v},
        dtype=dtype,
        registry=None if registry is None else Path(registry),
        overwrite=overwrite,
        train_data_dir=train_data_dir,
    )


@takes_loaded
def precision_match(
    loaded: LoadedVAT, dtype: str, sentences: Sequence[str], origin: str
) -> dict[str, Any]:
    """How far weights stored in `dtype` (and computed in float32, as a shipped model is
    loaded) move `loaded`'s outputs on `sentences`: the folder's sentence features (largest
    absolute difference, lowest cosine), the token means mu (largest absolute difference),
    and how many greedy reconstructions stay identical."""
    check_choice(dtype, "dtype", ("float16", "bfloat16"))
    sentences, _ = _sentences(sentences, "sentences")
    if not sentences:
        raise OptionError("sentences", "holds no sentence to compare on")
    check_optional_text(origin, "origin")
    # the stored tensors (the state dict: not the buffers a model rebuilds, such as its
    # positions) rounded to `dtype` and loaded into float32, as a shipped model is loaded
    rounded = {
        k: v.to(getattr(torch, dtype)).to(v.dtype) if v.is_floating_point() else v
        for k, v in loaded.model.state_dict().items()
    }
    half_model = type(loaded.model)(loaded.config).to(loaded.device)
    half_model.load_state_dict(rounded)
    half = dataclasses.replace(loaded, model=half_model.eval())
    fitted = features_for(loaded, quiet=True).fitted  # the vectors encode gives
    full_features = FeatureEncoder(loaded, fitted)(sentences, progress=False)
    half_features = FeatureEncoder(half, fitted)(sentences, progress=False)
    norms = np.linalg.norm(full_features, axis=1) * np.linalg.norm(half_features, axis=1)
    cosines = (full_features * half_features).sum(1) / np.where(norms == 0, 1.0, norms)
    gens = [VATGenerator.from_loaded(x) for x in (loaded, half)]
    with warnings.catch_warnings():  # long lines are cut alike in both: no note per line
        warnings.simplefilter("ignore", TruncationWarning)
        mus = [g.posteriors(sentences) for g in gens]
        texts = [g.reconstruct(sentences) for g in gens]
    max_mu = max(float((a[0] - b[0]).abs().max()) for a, b in zip(*mus))
    return {
        "sentences": len(sentences),
        "from": origin,
        "max_abs_feature": float(np.abs(full_features - half_features).max()),
        "min_cosine": float(cosines.min()),
        "max_abs_mu": max_mu,
        "same_reconstructions": sum(a == b for a, b in zip(*texts)),
    }


def check_shipping(
    loaded: LoadedVAT,
    name: str,
    dtype: str,
    registry: str | os.PathLike | None,
    info: dict[str, Any] | None = None,
    train_data_dir: str | os.PathLike | None = None,
    overwrite: bool | None = None,
) -> Path:
    """What `write_shipped` refuses, checked before any work: a training checkpoint (a shipped
    model is an exported folder), a bad name or dtype, a registry that is no folder, an export
    file that is no regular file, anything that would name a place on this machine
    (`check_portable`), and, given `overwrite`, an entry it may not replace. Returns the
    registry folder."""

    check_loaded(loaded, "write_shipped")
    check_name(name)
    if dtype not in DTYPES:
        raise OptionError("dtype", f"must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if loaded.source.kind == "checkpoint":
        raise OptionError(
            "model",
            f"{loaded.source.location} is a training checkpoint; a shipped model is an "
            "exported folder: export it first (vat export MODEL DIR)",
        )
    root = shipped_dir() if registry is None else Path(registry)
    if (root.exists() or root.is_symlink()) and not root.is_dir():
        raise OptionError("registry", f"{root} exists and is not a folder")
    _files_to_copy(loaded.source.path)
    if overwrite is not None:
        _check_replaceable(root / name, name, overwrite)
    stats = _shipped_stats(loaded, train_data_dir)
    check_portable(
        {
            CONFIG_NAME: _shipped_config(loaded.source.path / CONFIG_NAME, train_data_dir),
            SHIPPED_NAME: info or {},
            FEATURES_NAME: {"fit": stats.fit} if stats is not None else {},
        },
        f"cannot add {name} to the shipped models",
        "rewrite it in the exported folder (or the text given) first",
    )
    return root


def _shipped_config(path: Path, train_data_dir: str | os.PathLike | None) -> dict[str, Any]:
    """An exported folder's config.json as it ships: its training record in the portable
    form (a shipped model goes to every machine: the builder's paths stay behind)."""

    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    config["training"] = portable_training(config.get("training") or {}, train_data_dir)
    return config


def _shipped_stats(loaded: LoadedVAT, train_data_dir: str | os.PathLike | None):
    """The folder's feature statistics with their fit record as it ships, or None."""

    stats = loaded.feature_stats
    if stats is not None and portable_fit(stats.fit, train_data_dir) != stats.fit:
        stats = dataclasses.replace(stats, fit=portable_fit(stats.fit, train_data_dir))
    return stats


def _files_to_copy(folder: Path) -> tuple[list[Path], list[str]]:
    """The files of the exported `folder` an entry copies as they are, and the names of what
    it leaves out (the user's own files, links, folders). A file under an export file's name
    that is no regular file is refused: following a link would copy a file from elsewhere."""

    copied, left_out = [], []
    for p in sorted(folder.iterdir()):
        if p.name in (WEIGHTS_NAME, SHIPPED_NAME, CARD_NAME, CONFIG_NAME):
            continue  # written anew: the weights cast, config.json made portable, the card
        if is_export_file(p):
            copied.append(p)
        elif p.name in ALL_FILES:
            what = "a symbolic link" if p.is_symlink() else "not a regular file"
            raise VatError(
                f"{p} is {what}; vat copies only regular files into the shipped models: "
                "put the file itself there (or export the model again)"
            )
        else:
            left_out.append(p.name)
    return copied, left_out


def _check_replaceable(out: Path, name: str, overwrite: bool) -> None:
    """An existing entry is replaced only with `overwrite`, and only when vat wrote all of it
    (a shipped.json, damaged or not, and only files an export writes or it lists)."""

    if not (out.exists() or out.is_symlink()):
        return
    if not overwrite:
        raise VatError(
            f"{out} exists: vat already ships a model named {name} (overwrite replaces it)"
        )
    record = out / SHIPPED_NAME
    if out.is_symlink() or not out.is_dir() or record.is_symlink() or not record.is_file():
        raise VatError(f"{out} exists and is not a shipped model; vat replaces only its entries")
    try:
        listed = set(json.loads(record.read_text(encoding="utf-8")).get("sha256") or {})
    except (OSError, ValueError, RecursionError, AttributeError, TypeError):
        listed = set()  # damaged: the names an export writes still tell vat's files
    foreign = sorted(
        p.name
        for p in out.iterdir()
        if p.name != SHIPPED_NAME
        and not is_export_file(p)
        and not (p.name in listed and p.is_file() and not p.is_symlink())
    )
    if foreign:
        raise VatError(
            f"{out} holds files vat did not write ({', '.join(foreign[:3])}); overwrite "
            "replaces only a shipped model's own files: move them out first"
        )


def write_shipped(
    loaded: LoadedVAT,
    name: str,
    info: dict[str, Any],
    *,
    dtype: str = "float16",
    registry: Path | None = None,
    overwrite: bool = False,
    train_data_dir: str | os.PathLike | None = None,
) -> ShippedModel:
    """Write the exported folder `loaded` was read from into the registry as `name`: its
    export files as they are (a warning names what is left out), the weights cast to `dtype`,
    config.json's training record in its portable form, a card (README.md) saying what the
    model is (`info`: summary, good_for, not_for, rebuild, fp32_match), and shipped.json
    (`info`, the dtype, each file's SHA-256 and size). Written into a temp folder and renamed
    into place; an existing entry needs `overwrite` (`_check_replaceable`)."""

    record = {"format": SHIPPED_FORMAT, "name": name, **info, "dtype": dtype}
    root = check_shipping(loaded, name, dtype, registry, record, train_data_dir, overwrite)
    half = copy.deepcopy(loaded.model).to("cpu", getattr(torch, dtype))
    for key, tensor in half.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise VatError(f"{key} does not fit in {dtype} (inf after the cast): use bfloat16")
    folder = loaded.source.path
    copied, left_out = _files_to_copy(folder)
    if left_out:
        names = ", ".join(left_out)
        print(
            f"warning: left out of {name}, as no part of an exported folder: {names}",
            file=sys.stderr,
        )
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(root)  # the temp folders of killed adds
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=temp_prefix(root / name)))
    try:
        for p in copied:
            shutil.copyfile(p, tmp / p.name, follow_symlinks=False)
        save_model(half, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        config = _shipped_config(folder / CONFIG_NAME, train_data_dir)
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        record.setdefault("summary", default_summary(config))
        stats = _shipped_stats(loaded, train_data_dir)
        if stats is not loaded.feature_stats:
            stats.save(tmp / FEATURES_NAME)
        own = stats if loaded.own_features is loaded.feature_stats else loaded.own_features
        card = model_card(config, loaded.tokenizer.vocab_size, own, record)
        (tmp / CARD_NAME).write_text(card, encoding="utf-8")
        files = sorted(tmp.iterdir())
        record["sha256"] = {p.name: file_sha256(p) for p in files}
        record["bytes"] = {p.name: p.stat().st_size for p in files}
        (tmp / SHIPPED_NAME).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o755)  # package data: readable by all, like the code beside it
        if overwrite:
            replace_dir(tmp, root / name)
        else:  # a rename never replaces a folder that holds files: two adds write it once
            try:
                os.rename(tmp, root / name)
            except OSError:
                _check_replaceable(root / name, name, overwrite)
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    entry = shipped_model(name, root)
    assert entry is not None
    return entry


def build_parser() -> Parser:
    p = Parser(
        prog="python scripts/add_pretrained.py",
        description="Copy an exported folder into the registry of shipped models with "
        "half-precision weights, SHA-256 sums, and a card that says what the model is and how "
        "far the stored weights move its outputs from float32.",
    )
    add = p
    add.add_argument("folder", metavar="DIR", help="an exported folder (vat export MODEL DIR)")
    add.add_argument("--name", required=True, help="the name it loads by (no slash)")
    add.add_argument("--summary", default=None, help="one line: what the model is")
    add.add_argument("--good-for", default=None, help="one line: what it is good for")
    add.add_argument("--not-for", default=None, help="one line: what it is not for")
    add.add_argument("--rebuild", default=None, help="the commands that rebuild it")
    add.add_argument(
        "--dtype",
        default="float16",
        choices=("float16", "bfloat16"),
        help="how the weights are stored (default float16: 10 mantissa bits against "
        "bfloat16's 7; bfloat16 for weights beyond float16's range)",
    )
    add.add_argument(
        "--check-file",
        default=None,
        metavar="FILE",
        help="sentences (one per line) to compare the stored weights with float32 on "
        "(default: vat's built-in check sentences)",
    )
    add.add_argument(
        "--registry",
        default=None,
        metavar="DIR",
        help="the registry folder (default: $VAT_SHIPPED_DIR, else the package's vat/shipped)",
    )
    add_train_data_dir(add)  # the records it ships name files by their path inside it
    add.add_argument("--overwrite", action="store_true", help="replace a shipped model")
    add.add_argument(
        "--allow-outside-tolerance",
        action="store_true",
        help="add it even when its stored weights move its outputs from float32 beyond the "
        "tolerance docs/sharing.md states for shipped models (refused without)",
    )
    add.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return p


def _add(args) -> int:

    if not is_model_folder(args.folder):
        raise VatError(
            f"DIR: {args.folder} is not an exported folder (no config.json); export a "
            "checkpoint or run folder first: vat export MODEL DIR"
        )
    sentences = None
    if args.check_file is not None:
        sentences = read_text_lines(args.check_file, "--check-file")
        if not any(s.strip() for s in sentences):
            raise VatError(f"--check-file {args.check_file} holds no non-empty line")
    entry = add_pretrained(
        load(args.folder, "cpu"),
        args.name,
        summary=args.summary,
        good_for=args.good_for,
        not_for=args.not_for,
        rebuild=args.rebuild,
        dtype=args.dtype,
        check_sentences=sentences,
        # the card names the file as the training records do: no path of this machine
        check_from=None
        if args.check_file is None
        else portable_name(args.check_file, args.train_data_dir),
        registry=args.registry,
        overwrite=args.overwrite,
        train_data_dir=args.train_data_dir,
        allow_outside_tolerance=args.allow_outside_tolerance,
    )
    m = entry.info["fp32_match"]
    print(
        f"wrote {entry.folder} ({entry.size_bytes / 2**20:.1f} MiB, {entry.info['dtype']}); "
        f"against float32 on {m['sentences']} sentences: features within "
        f"{m['max_abs_feature']:.2e} (lowest cosine {m['min_cosine']:.6f}), "
        f"{m['same_reconstructions']}/{m['sentences']} reconstructions identical"
    )
    print(f"load it with vat.load({entry.name!r}) or --model {entry.name}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(lambda a: _add(build_parser().parse_args(a)), argv)


if __name__ == "__main__":
    sys.exit(main())
