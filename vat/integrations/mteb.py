"""A VAT as an MTEB encoder, and a command for MTEB's English STS tasks.

`VATMTEBEncoder` implements mteb's `EncoderProtocol` (mteb >= 2): `encode(DataLoader of
BatchedInput, *, task_metadata, hf_split, hf_subset, prompt_type, **kwargs)` returning an
(N, d) array of `vat.load(model).encode` features, and cosine `similarity` /
`similarity_pairwise` (from mteb's `AbsEncoder`, with the model meta's similarity set to
cosine, the score vat's own STS harness uses).

    vat mteb --model EXPORTED_DIR_OR_CKPT --output-dir mteb-results

(the command, `vat.cli.mteb`) runs the STS tasks of MTEB's English benchmark (the task
data is downloaded from the Hugging Face Hub, or read from a local HF datasets cache) and
prints each task's main score (cosine Spearman). `evaluate` asks the Hub once first: when
it cannot be reached, the tasks run offline (cached data only), and a task whose data is not
cached fails at once instead of after datasets' retried requests.
`register_model(vat.load(DIR))` puts a vat folder in mteb's model registry, so that
`mteb.get_model(DIR)` / `mteb.get_model_meta(DIR)` work.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

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
    """The sentence features of a VAT as an MTEB encoder: `vat.load(...).encode`'s, the
    model's own by the one rule of every loader (vat.features.choice.features_for), or
    the `features` or `pooling` named. `.features` names the spec it gives, `.why` how it
    was chosen (the command prints both)."""

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
        """`model` is the loaded VAT (from `vat.load`, or a registered ModelMeta's); without
        it, `model_name` is loaded here, as mteb's loaders do (the one read)."""
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
        elif features is None:
            chosen = self.model.default_features
            self.spec, self.why = str(chosen.spec), chosen.why
            dim = self.model.feature_encoder().dim
        else:
            encoder = self.model.feature_encoder(features)
            self.spec, self.why, dim = str(encoder.spec), "as named", encoder.dim
        n_params = sum(p.numel() for p in self.model.model.parameters())
        name = self.model.loaded.name
        self.mteb_model_meta = ModelMeta.create_empty(
            {
                "name": f"vat/{name}" if "/" not in name else name,
                "revision": revision or "local",
                "embed_dim": dim,
                # mteb's field for settings an experiment varies: result files name the spec
                "experiment_kwargs": {"features": self.spec},
                "max_tokens": int(self.model.model.config.max_len),
                "n_parameters": int(n_params),
                "similarity_fn_name": ScoringFunction.COSINE,
                "framework": ["PyTorch"],
                "languages": ["eng-Latn"],
                "open_weights": True,
            }
        )

    def encode(
        self,
        inputs,
        *,
        task_metadata,
        hf_split: str,
        hf_subset: str,
        prompt_type=None,
        **kwargs: Any,
    ) -> np.ndarray:
        """(N, d) features of every text in the DataLoader's batches (`batch["text"]`), in order.
        VAT has no prompts or instructions, so task_metadata / prompt_type change nothing."""
        texts = [text for batch in inputs for text in batch["text"]]
        return self.model.encode(
            texts,
            pooling=self.pooling,
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            features=self.features,
        )


def model_meta(model: PretrainedVAT, name: str | None = None) -> ModelMeta:
    """The mteb ModelMeta of a loaded vat folder (local or a Hub id), with VATMTEBEncoder as
    its loader around that same loaded model: so `meta.load_model()` and, once registered,
    `mteb.get_model(name)` give it without reading the folder again."""
    require_loaded(model, "model_meta")
    check_optional_text(name, "name")
    source = model.loaded.source
    if source.kind == "checkpoint":
        raise VatError(
            f"{source.location} is a training checkpoint; MTEB's model registry takes an "
            "exported folder (vat export CKPT DIR)"
        )
    n_params = sum(p.numel() for p in model.model.parameters())
    label = name or (source.location if source.kind == "hub" else f"vat/{source.name}")
    return ModelMeta.create_empty(
        {
            "loader": VATMTEBEncoder,
            "loader_kwargs": {"model": model},
            "name": label,
            "revision": "local" if source.kind == "folder" else None,
            "embed_dim": model.embedding_dim,
            "max_tokens": int(model.model.config.max_len),
            "n_parameters": int(n_params),
            "similarity_fn_name": ScoringFunction.COSINE,
            "framework": ["PyTorch"],
            "languages": ["eng-Latn"],
            "open_weights": True,
            "license": model.loaded.card.get("license"),
            "reference": f"local folder {source.path / CONFIG_NAME}"
            if source.kind == "folder"
            else None,
        }
    )


def register_model(model: PretrainedVAT, name: str | None = None) -> ModelMeta:
    """Add a loaded vat folder to mteb's model registry under its ModelMeta's name
    ("vat/FOLDER", or the Hub id) and under the path or id it was loaded from:
    `mteb.get_model(...)` and `mteb.get_model_meta(...)` then work with either."""
    from mteb.models.model_implementations import MODEL_REGISTRY

    meta = model_meta(model, name)
    MODEL_REGISTRY[meta.name] = meta
    MODEL_REGISTRY[str(model.loaded.source.location)] = meta
    return meta


ENGLISH_BENCHMARK = "MTEB(eng, v2)"


def english_sts_tasks() -> list:
    """The STS tasks of MTEB's English benchmark, MTEB(eng, v2): BIOSSES, SICK-R, STS12-15,
    STSBenchmark, STS17 (en-en) and STS22.v2 (en)."""
    import mteb

    return [t for t in mteb.get_benchmark(ENGLISH_BENCHMARK).tasks if t.metadata.type == "STS"]


def select_tasks(tasks: str | Sequence[str] | None = None) -> list:
    """The MTEB tasks to run: None for the STS tasks of MTEB(eng, v2) (`english_sts_tasks`),
    else task names, as a list or one comma-separated string ("STS12,STSBenchmark"). Names
    that are blank, a string with no name in it ("", ",,,": mteb would read an empty list
    as every task it has) and unknown names are an OptionError naming `tasks`."""
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


# -- running tasks: the Hub asked once, offline at once when it cannot be reached ----------
def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face Hub cannot be reached now ("offline mode": HF_HUB_OFFLINE is set,
    or the error of one HEAD request to its endpoint, waiting `timeout` seconds at most);
    None when it answers. Any HTTP answer counts: only reaching it matters."""
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
    """huggingface_hub and datasets in offline mode for the block (cached data only, no
    request is sent), as HF_HUB_OFFLINE=1 at start-up does; the settings are restored after.
    datasets reads the variable once, at import, into its own config, so both are set."""
    import datasets.config
    from huggingface_hub import constants

    saved_env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    saved = (constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE)
    saved_datasets = datasets.config.HF_DATASETS_OFFLINE
    os.environ.update({k: "1" for k in saved_env})
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    datasets.config.HF_DATASETS_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved
        datasets.config.HF_DATASETS_OFFLINE = saved_datasets
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_no_links(output_dir: str | os.PathLike) -> None:
    """MTEB writes its result files (and merges run_settings.jsonl) under
    `output_dir/results/` with plain opens, which follow symbolic links: a link there would
    have them written into the file or folder it points to, which vat did not create. Such a
    folder is refused in one line before any work. Only `results/` is walked: the folder
    itself is the user's to name, and may be a large one."""
    check_path(output_dir, "output_dir")
    results = Path(output_dir) / "results"
    found = [results] if results.is_symlink() else []
    for here, dirs, files in os.walk(results):  # does not descend into linked folders
        found += [Path(here) / n for n in (*dirs, *files) if (Path(here) / n).is_symlink()]
        if found:
            break
    if found:
        raise OptionError(
            "output_dir",
            f"{output_dir} holds a symbolic link, {found[0]}; MTEB writes its result files "
            "through links, and vat does not write into what it did not create: remove the "
            "link or choose another folder",
        )


def evaluate(encoder: Any, tasks: str | Sequence, output_dir: str | os.PathLike) -> Any:
    """`mteb.evaluate(encoder, tasks)` with its result files in `output_dir` (replaced), and
    its ModelResult; `tasks` are mteb tasks, or what `select_tasks` takes. The Hub is
    asked once first (`hub_unreachable`): when it cannot be reached the tasks run offline
    (`_hub_offline`), so cached task data still works and a task whose data is not cached
    is one VatError at once, not after datasets' retries."""
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
