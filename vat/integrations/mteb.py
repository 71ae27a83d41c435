"""A VAT as an MTEB (>= 2) encoder, mteb registry entry and `vat mteb`'s run of MTEB's English
STS tasks (docs/sharing.md, "MTEB")."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from vat.api import PretrainedVAT, load, require_loaded
from vat.errors import (
    OptionError,
    VatError,
    check_choice,
    check_count,
    check_number,
    check_optional_text,
    check_path,
    check_sentences,
    one_line,
)
from vat.features import POOLINGS
from vat.features.choice import check_pooling
from vat.share.folder import CONFIG_NAME


class VATMTEBEncoder(AbsEncoder):
    """A VAT's sentence features as an MTEB encoder: the model's own (the one rule of every
    loader), or the `features` or `pooling` named; `.spec` and `.why` say which and why."""

    def __init__(
        self,
        model_name: str,
        revision: str | None = None,
        *,
        model: PretrainedVAT | None = None,
        device: str | None = None,
        pooling: str | None = None,
        batch_size: int = 64,
        normalize: bool = False,
        features: str | None = None,
        **kwargs: Any,
    ) -> None:
        """`model` is the loaded VAT; without it, `model_name` is loaded here, as mteb's do."""
        check_count(batch_size, "batch_size")
        if pooling is not None:
            check_choice(pooling, "pooling", POOLINGS)
        check_optional_text(features, "features")
        check_pooling(pooling, features)  # before the model loads, not at the first batch
        check_optional_text(revision, "revision")
        if model is not None:
            require_loaded(model, "VATMTEBEncoder")
        self.model = model if model is not None else load(model_name, device=device)
        self.pooling, self.batch_size, self.normalize = pooling, batch_size, normalize
        self.features = features  # a feature spec (vat.feature_spec); None: the model's own
        if features is None and pooling is not None:  # the token means mu, pooled as named
            self.spec, self.why, dim = f"mu/{pooling}/none", "as named", self.model.dim
        else:  # the model's own vectors, or the spec named
            encoder = self.model.feature_encoder(features)
            self.spec, dim = str(encoder.spec), encoder.dim
            self.why = self.model.default_features.why if features is None else "as named"
        name = self.model.loaded.name
        self.mteb_model_meta = _meta(
            self.model,
            name=f"vat/{name}" if "/" not in name else name,
            revision=revision or "local",
            embed_dim=dim,
            # mteb's field for settings an experiment varies: result files name the spec
            experiment_kwargs={"features": self.spec},
        )

    def encode(
        self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None, **kwargs
    ) -> np.ndarray:
        """(N, d) features of the DataLoader's texts, in order (a VAT takes no prompts)."""
        texts = [text for batch in inputs for text in batch["text"]]
        return self.model.encode(
            texts,
            pooling=self.pooling,
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            features=self.features,
        )


def _meta(model: PretrainedVAT, **fields: Any) -> ModelMeta:
    return ModelMeta.create_empty(
        {
            "max_tokens": int(model.model.config.max_len),
            "n_parameters": int(sum(p.numel() for p in model.model.parameters())),
            "similarity_fn_name": ScoringFunction.COSINE,
            "framework": ["PyTorch"],
            "languages": ["eng-Latn"],
            "open_weights": True,
            **fields,
        }
    )


def model_meta(model: PretrainedVAT, name: str | None = None) -> ModelMeta:
    """mteb's ModelMeta of a loaded vat folder, loading a VATMTEBEncoder around the same model."""
    require_loaded(model, "model_meta")
    check_optional_text(name, "name")
    source = model.loaded.source
    if source.kind == "checkpoint":
        raise VatError(
            f"{source.location} is a training checkpoint; MTEB's model registry takes an "
            "exported folder (vat export CKPT DIR)"
        )
    local = source.kind == "folder"
    return _meta(
        model,
        loader=VATMTEBEncoder,
        loader_kwargs={"model": model},
        name=name or (source.location if source.kind == "hub" else f"vat/{source.name}"),
        revision="local" if local else None,
        embed_dim=model.embedding_dim,
        license=model.loaded.card.get("license"),
        reference=f"local folder {source.path / CONFIG_NAME}" if local else None,
    )


def register_model(model: PretrainedVAT, name: str | None = None) -> ModelMeta:
    """Put a loaded vat folder in mteb's registry under its meta's name and its path or id."""
    from mteb.models.model_implementations import MODEL_REGISTRY

    meta = model_meta(model, name)
    MODEL_REGISTRY[meta.name] = meta
    MODEL_REGISTRY[str(model.loaded.source.location)] = meta
    return meta


def english_sts_tasks() -> list:
    """The STS tasks of MTEB's English benchmark, MTEB(eng, v2)."""
    import mteb

    return [t for t in mteb.get_benchmark("MTEB(eng, v2)").tasks if t.metadata.type == "STS"]


def select_tasks(tasks: str | Sequence[str] | None = None) -> list:
    """None: `english_sts_tasks()`, else names (a list or one comma-separated string); none
    named (to mteb: every task), a blank or an unknown name is an OptionError."""
    import mteb

    if tasks is None:
        return english_sts_tasks()
    if isinstance(tasks, str):
        names = [t.strip() for t in tasks.split(",")]
        if not any(names):
            raise OptionError("tasks", f"names no task, got {tasks!r}")
        names = [t for t in names if t]  # "STS12," is STS12
    else:
        names, _ = check_sentences(tasks, "tasks")
        names = [t.strip() for t in names]
        if not names:
            raise OptionError("tasks", "names no task, got an empty list")
        if not all(names):
            raise OptionError("tasks", f"has an empty task name, got {names!r:.80}")
    try:
        return list(mteb.get_tasks(tasks=names))
    except (KeyError, ValueError) as e:
        raise OptionError("tasks", one_line(e).strip("'\"")[:300]) from None


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hub cannot be reached now (offline mode, or one HEAD request's error), or None."""
    from huggingface_hub import constants, get_session

    check_number(timeout, "timeout", low=0, low_open=True)
    if constants.is_offline_mode():
        return "offline mode: HF_HUB_OFFLINE is set"
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout, follow_redirects=False)
    except Exception as e:  # httpx's ConnectError, a timeout, a proxy error: not reachable
        return f"{constants.ENDPOINT}: {type(e).__name__}: {one_line(e)[:120]}"
    return None


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """The Hub offline for the block (datasets reads HF_HUB_OFFLINE at import: its config too)."""
    import datasets.config
    from huggingface_hub import constants

    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    with (
        mock.patch.dict(os.environ, offline),
        mock.patch.object(constants, "HF_HUB_OFFLINE", True),
        mock.patch.object(datasets.config, "HF_HUB_OFFLINE", True),
        mock.patch.object(datasets.config, "HF_DATASETS_OFFLINE", True),
    ):
        yield


def check_no_links(output_dir: str | os.PathLike) -> None:
    """Refuse a link under `output_dir/results/`: MTEB's plain opens would write through it."""
    check_path(output_dir, "output_dir")
    results = Path(output_dir) / "results"
    inside = () if results.is_symlink() else results.rglob("*")  # rglob follows no link
    found = next((p for p in (results, *inside) if p.is_symlink()), None)
    if found is not None:
        raise OptionError(
            "output_dir",
            f"{output_dir} holds a symbolic link, {found}; MTEB writes its result files "
            "through links, and vat does not write into what it did not create: remove the "
            "link or choose another folder",
        )


def evaluate(encoder: Any, tasks: str | Sequence, output_dir: str | os.PathLike) -> Any:
    """`mteb.evaluate` writing into `output_dir`; tasks or `select_tasks`' names. An unreachable
    Hub runs offline at once: cached data works, missing data is one VatError."""
    import datasets.config
    import mteb
    from mteb.cache import ResultCache

    check_no_links(output_dir)  # a path, with no link where MTEB writes
    if not isinstance(tasks, list | tuple) or any(isinstance(t, str) for t in tasks):
        tasks = select_tasks(tasks)  # names (or None: the English STS tasks), checked
    unreachable = hub_unreachable()
    with _hub_offline() if unreachable else contextlib.nullcontext():
        try:
            return mteb.evaluate(
                encoder, list(tasks), cache=ResultCache(output_dir), overwrite_strategy="always"
            )
        except ConnectionError as e:  # datasets' OfflineModeIsEnabled, or the network
            first = one_line(e)[:200]
            if unreachable is None:
                raise VatError(
                    f"cannot fetch MTEB task data from the Hugging Face Hub ({first})"
                ) from None
            named = re.search(r"'([\w.-]+/[\w.-]+)'", first)  # "Couldn't reach 'mteb/x' ..."
            data = named[1] if named else "the task data"
            raise VatError(
                f"cannot fetch MTEB task data: the Hugging Face Hub cannot be reached "
                f"({unreachable}) and {data} is not in the datasets cache "
                f"{datasets.config.HF_DATASETS_CACHE}; run once with network, or set HF_HOME "
                "to a cache that has it"
            ) from None
