"""The Hugging Face Hub: an exported folder's files (ALL_FILES) downloaded or uploaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vat.errors import VatError, one_line
from vat.feature_spec import FittedFeatures
from vat.share.folder import ALL_FILES, CONFIG_NAME, FEATURES_NAME, read_config
from vat.share.training_record import check_portable


def looks_like_repo_id(text: str) -> bool:
    """user/name: one slash, not a relative or absolute path, not a file name."""
    return (
        text.count("/") == 1
        and not text.startswith((".", "/", "~"))
        and not text.endswith((".ckpt", "/"))
        and all(text.split("/"))
    )


def download(
    repo_id: str,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """The local folder (in the Hub cache) of the exported model at `repo_id`."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id, revision=revision, token=token, cache_dir=cache_dir,
                                   allow_patterns=list(ALL_FILES))  # fmt: skip
    except (OSError, ValueError) as e:  # network, offline mode, missing repo, a malformed id
        raise VatError(
            f"cannot download {repo_id} from the Hugging Face Hub ({_download_failure(e)})"
        ) from None
    return Path(folder)


def _download_failure(e: BaseException) -> str:
    """Why a download failed, in a few words."""
    from huggingface_hub import constants
    from huggingface_hub.errors import OfflineModeIsEnabled, RepositoryNotFoundError

    if constants.HF_HUB_OFFLINE or isinstance(e, OfflineModeIsEnabled):
        return "offline (HF_HUB_OFFLINE is set) and not in the Hub cache"
    if isinstance(e, RepositoryNotFoundError):
        return "no such repo, or a private one without a token"
    cause = e.__cause__ or e.__context__
    if cause is not None and type(e).__name__ == "LocalEntryNotFoundError":
        # snapshot_download found no cached copy after a network error: name that error
        return f"the Hub cannot be reached: {type(cause).__name__}: {one_line(cause)[:200]}"
    return one_line(e)[:200]


def check_pushable(folder: str | os.PathLike, repo_id: str) -> None:
    """Refuse a folder whose config.json or statistics' fit record names a place on this machine."""
    folder = Path(folder)
    values: dict[str, Any] = {CONFIG_NAME: read_config(folder)}
    if (folder / FEATURES_NAME).is_file():
        values[FEATURES_NAME] = {"fit": FittedFeatures.load(folder / FEATURES_NAME).fit}
    check_portable(
        values,
        f"cannot push {folder} to {repo_id}",
        "export it again for the Hub (an export given the repo id records only those)",
    )


def upload(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    commit_message: str = "Upload VAT",
    api: Any = None,
) -> Any:
    """Upload an exported folder to the Hub repo `repo_id` (created if missing)."""
    from huggingface_hub import HfApi

    check_pushable(folder, repo_id)
    api = api if api is not None else HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        return api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model",
                                 revision=revision, commit_message=commit_message,
                                 allow_patterns=list(ALL_FILES))  # fmt: skip
    except Exception as e:  # no network (httpx/requests errors), offline mode, no login
        raise VatError(
            f"cannot push to the Hugging Face Hub repo {repo_id} ({one_line(e)[:200]})"
        ) from None
