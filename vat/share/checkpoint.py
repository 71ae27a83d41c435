"""The .ckpt format, read without Lightning or pickled code: a Lightning checkpoint whose
`state_dict` holds the model under `model.` and whose `vat` entry is all it needs alone:

    checkpoint["vat"] = {
        "format_version": 1,
        "model_config": {...},          # VATConfig fields
        "prior_std": float,             # s of the scaled prior N(0, s^2 I)
        "tokenizer": str,               # the tokenizers JSON
        "length_histogram": [int, ...], # counts of training sequence lengths (with </s>)
        "token_counts": [int, ...],     # optional: training subword counts (SIF weighting)
        "fit_sample": {"ids": int32 tensor, "lengths": int32 tensor},  # optional
    }
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import re
import warnings
import zipfile
from pathlib import Path

import torch

from vat.errors import CheckpointError, VatError, one_line
from vat.feature_spec import check_token_counts
from vat.io import atomic_write, regular_file
from vat.model import VAT, VATConfig, prior_std_problem
from vat.share.loaded import LoadedVAT, ModelSource
from vat.share.training_record import training_facts
from vat.tokenizer import VATTokenizer

FORMAT_VERSION = 1

# the largest position table a config may ask for beyond its weights' size: far past any sentence
POSITION_TABLE_BYTES = 1 << 28


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """torch.load with weights_only=True passed explicitly (no env var can turn it off)."""
    p = Path(path)
    try:
        os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise CheckpointError(f"checkpoint {p} does not exist") from None
    except OSError:
        pass  # a name too long, a link loop: regular_file says which
    regular_file(p, "checkpoint")  # a folder; a FIFO would block torch.load, /dev/zero fill memory
    try:
        with warnings.catch_warnings():
            # a plain pickle makes torch warn before it fails; the error below says it all
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            ckpt = torch.load(p, map_location=map_location, weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, OSError,
            ValueError) as e:  # fmt: skip
        raise CheckpointError(_load_failure(p, e)) from None
    if not isinstance(ckpt, dict) or "vat" not in ckpt or "state_dict" not in ckpt:
        raise CheckpointError(
            f"{p} is not a vat checkpoint (no 'vat' metadata; was it written by `vat train`?)"
        )
    return ckpt


def _load_failure(p: Path, e: BaseException) -> str:
    """One line for a failed torch.load, never passing on torch's advice of weights_only=False."""
    text = str(e)
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if "Weights only load failed" in text and found:  # a pickled global (code) weights_only refused
        return (
            f"checkpoint {p} holds pickled Python objects ({found.group(1)}), not only tensors and "
            f"plain data; vat loads checkpoints weights-only and refuses it"
        )
    if "WeightsUnpickler error:" in text:  # garbage bytes: keep the unpickler's reason only
        text = text.split("WeightsUnpickler error:", 1)[1]
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and "weights_only" not in ln]
    first = lines[0].strip() if lines else type(e).__name__
    return f"checkpoint {p} is truncated, corrupt or not a torch checkpoint ({first[:200]})"


_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "format_version": int, "model_config": dict, "prior_std": (int, float), "tokenizer": str
}  # fmt: skip


def _check_metadata(path: str | os.PathLike, meta: object) -> dict:
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"checkpoint {path}: its 'vat' metadata is a {type(meta).__name__}, expected a dict"
        )
    for key, types in _META_TYPES.items():
        if key not in meta:
            raise CheckpointError(
                f"checkpoint {path}: its 'vat' metadata lacks '{key}' "
                "(damaged or not written by vat)"
            )
        if not isinstance(meta[key], types) or isinstance(meta[key], bool):
            raise CheckpointError(
                f"checkpoint {path}: 'vat.{key}' is a {type(meta[key]).__name__} "
                f"({str(meta[key])[:40]!r})"
            )
    if meta["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path}: unsupported vat checkpoint format {meta['format_version']!r}"
        )
    check_prior_and_lengths(
        f"checkpoint {path}: 'vat.", meta["prior_std"], meta.get("length_histogram", [])
    )
    return meta


def check_prior_and_lengths(
    prefix: str, prior_std: object, hist: object
) -> tuple[float, list[int]]:
    """A recorded prior scale and length histogram, or one line naming the key after `prefix`."""
    if (problem := prior_std_problem(prior_std)) is not None:
        raise CheckpointError(f"{prefix}prior_std' {problem}")
    if not isinstance(hist, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in hist
    ):
        raise CheckpointError(f"{prefix}length_histogram' must be a list of counts")
    return float(prior_std), list(hist)


def check_finite(path: str | os.PathLike, state: dict) -> None:
    """Refuse weights that are not floating point (load_state_dict casts silently) or not finite."""
    tensors = {k: v for k, v in state.items() if torch.is_tensor(v)}
    for k, v in tensors.items():
        if not v.is_floating_point():
            raise CheckpointError(
                f"{path}: {k} is {str(v.dtype).removeprefix('torch.')}, not floating point; "
                "a model's weights are floating point"
            )
    bad = [k for k, v in tensors.items() if not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(
            f"checkpoint {path} has non-finite weights (NaN or inf in {len(bad)} of {len(state)} "
            f"tensors, e.g. {bad[0]}); refusing to load it"
        )


def check_weight_shapes(
    path: str | os.PathLike, config: VATConfig, shapes: dict[str, tuple[int, ...]]
) -> None:
    """Refuse, before allocating, a config whose sizes disagree with `shapes` (name -> shape)."""
    layers = {"encoder": config.n_encoder_layers, "decoder": config.n_decoder_layers}
    stored = {part: 0 for part in layers}
    for name in shapes:
        if m := re.match(r"(encoder|decoder)\.(\d+)\.", name):
            stored[m[1]] = max(stored[m[1]], int(m[2]) + 1)
    for part, n in layers.items():
        if stored[part] != n:
            raise CheckpointError(
                f"{path}: its config says {n} {part} layers, its weights hold {stored[part]}"
            )
    # one layer of each stack on the meta device (no memory) gives every shape the config implies
    one = VATConfig.from_dict({**config.to_dict(), "n_encoder_layers": 1, "n_decoder_layers": 1})
    with torch.device("meta"):
        small = VAT(dataclasses.replace(one, max_len=2)).state_dict()
    expected: dict[str, tuple[int, ...]] = {}
    for name, tensor in small.items():
        m = re.match(r"(encoder|decoder)\.0\.(.*)", name)
        names = [f"{m[1]}.{i}.{m[2]}" for i in range(layers[m[1]])] if m else [name]
        expected.update(dict.fromkeys(names, tuple(tensor.shape)))
    # tied embeddings are stored once (safetensors' save_model keeps one of the two names)
    tied = {"embed.weight", "lm_head.weight"} if config.tie_embeddings else set()
    for name, shape in expected.items():
        got = shapes.get(name)
        if got is None and not (name in tied and tied & shapes.keys()):
            raise CheckpointError(f"{path}: its weights lack {name}, which its config implies")
        if got is not None and tuple(got) != shape:
            raise CheckpointError(
                f"{path}: {name} has shape {tuple(got)}, its config implies {shape}"
            )
    unknown = sorted(set(shapes) - set(expected))
    if unknown:
        raise CheckpointError(f"{path}: its weights hold {unknown[0]}, which its config lacks")
    # a real model's positions cost a fraction of its weights: more is a tampered max_len
    table = 4.0 * (config.max_len + 1) * config.d_model  # float32 sinusoid table
    weights = 4.0 * sum(math.prod(shape) for shape in shapes.values())
    if table > max(weights, POSITION_TABLE_BYTES):
        raise CheckpointError(
            f"{path}: its config's max_len {config.max_len} needs a {table / 1e6:.0f} MB "
            f"position table, more than its weights or {POSITION_TABLE_BYTES / 1e6:.0f} MB allow"
        )


def load_checkpoint(source: ModelSource, device: str | torch.device = "cpu") -> LoadedVAT:
    """The model a training checkpoint holds, with what it records, read once onto the CPU."""
    path = source.location
    ckpt = read_checkpoint(path)
    meta = _check_metadata(path, ckpt["vat"])
    if not isinstance(ckpt["state_dict"], dict):
        raise CheckpointError(
            f"checkpoint {path}: 'state_dict' is a {type(ckpt['state_dict']).__name__}, "
            "expected a dict"
        )
    state = {k[len("model.") :]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    model, tokenizer = _model_and_tokenizer(path, meta, state)
    check_finite(path, state)
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        raise CheckpointError(
            f"{path}: weights do not match its model config ({one_line(e)[:160]})"
        ) from None
    counts = check_token_counts(meta.get("token_counts"), f"checkpoint {path}", model.config)
    training = training_facts(ckpt, path)
    return LoadedVAT(
        model.to(device).eval(), tokenizer, float(meta["prior_std"]),
        list(meta.get("length_histogram", [])), source, training=training, token_counts=counts,
        fit_sample=_fit_sample(path, meta.get("fit_sample"), model.config.vocab_size),
    )  # fmt: skip


def _fit_sample(path: str | os.PathLike, sample: object, vocab_size: int) -> list[list[int]] | None:
    """The checkpoint's fitting sample as one list of subword ids per sentence, or None."""
    if sample is None:
        return None
    ids = sample.get("ids") if isinstance(sample, dict) else None
    lengths = sample.get("lengths") if isinstance(sample, dict) else None
    ok = all(
        torch.is_tensor(t) and t.dim() == 1 and not t.is_floating_point() for t in (ids, lengths)
    )
    if ok and len(ids):
        ok = int(ids.min()) >= 0 and int(ids.max()) < vocab_size
    if not ok or int(lengths.sum()) != len(ids) or (len(lengths) and int(lengths.min()) < 0):
        raise CheckpointError(
            f"checkpoint {path}: 'vat.fit_sample' is damaged (expected 'ids' and 'lengths', "
            f"1-D integer tensors whose lengths add up to the ids, each id below {vocab_size})"
        )
    # one tolist and list slices, not a tensor split: this runs on every checkpoint load
    flat, ends = ids.tolist(), lengths.cumsum(0).tolist()
    return [flat[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def _model_and_tokenizer(
    path: str | os.PathLike, meta: dict, state: dict
) -> tuple[VAT, VATTokenizer]:
    try:
        config = VATConfig.from_dict(meta["model_config"])
    except (TypeError, ValueError, KeyError, RuntimeError, VatError) as e:
        raise CheckpointError(
            f"checkpoint {path}: bad 'vat.model_config' ({one_line(e)[:160]})"
        ) from None
    shapes = {k: tuple(v.shape) for k, v in state.items() if torch.is_tensor(v)}
    check_weight_shapes(path, config, shapes)  # then the model can be built
    try:
        tokenizer = VATTokenizer.from_str(meta["tokenizer"])
    except Exception as e:  # tokenizers raises plain Exception subclasses
        raise CheckpointError(
            f"checkpoint {path}: 'vat.tokenizer' is not a valid tokenizer ({one_line(e)[:160]})"
        ) from None
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"{path}: its tokenizer has {tokenizer.vocab_size} tokens "
            f"but the model only {config.vocab_size}"
        )
    return VAT(config), tokenizer


def check_same_model_config(recorded: dict, now: dict) -> None:
    """A resume's model must be the checkpoint's: a one-line error listing what differs."""
    if recorded != now:
        diff = {k: (v, now.get(k)) for k, v in recorded.items() if now.get(k) != v}
        raise CheckpointError(
            "--ckpt_path: the checkpoint's model config differs from this run's: "
            f"{diff} (checkpoint, config)"
        )


def vat_metadata(
    model: VAT,
    tokenizer: VATTokenizer,
    prior_std: float,
    length_histogram: list[int],
    token_counts: list[int] | None = None,
    fit_sample: dict | None = None,
) -> dict:
    """The `checkpoint["vat"]` entry (plain types only, so weights_only loading works)."""
    meta = {
        "format_version": FORMAT_VERSION,
        "model_config": model.config.to_dict(),
        "prior_std": float(prior_std),
        "tokenizer": tokenizer.to_str(),
        "length_histogram": [int(c) for c in length_histogram],
    }
    if token_counts:
        meta["token_counts"] = [int(c) for c in token_counts]
    if fit_sample is not None:
        meta["fit_sample"] = fit_sample
    return meta


def save_vat(
    path: str | os.PathLike,
    model: VAT,
    tokenizer: VATTokenizer,
    prior_std: float,
    length_histogram: list[int] | None = None,
) -> None:
    """Write a minimal vat checkpoint (no trainer state) atomically: temp file, then rename."""
    meta = vat_metadata(model, tokenizer, prior_std, length_histogram or [])
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    atomic_torch_save({"state_dict": state, "vat": meta}, path)


def atomic_torch_save(obj: object, path: str | os.PathLike) -> None:
    """torch.save through `vat.io.atomic_write`, so a killed write never truncates `path`."""
    atomic_write(path, lambda f: torch.save(obj, f), binary=True)
