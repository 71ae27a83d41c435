"""The files that make an exported folder a Hugging Face Space running `vat explore`'s page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

APP_NAME = "app.py"
REQUIREMENTS_NAME = "requirements.txt"
SPACE_FILES = (APP_NAME, REQUIREMENTS_NAME)

APP = '''"""A Hugging Face Space for this exported VAT: the page of `vat explore` (docs/explore.md).

Written by `vat export --space`. The model is this folder. On a Space, the Space runs this
file; locally, `python app.py` serves the page on 127.0.0.1:7860 (GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT change that, as for any gradio app).
"""

import os
from pathlib import Path

import vat
from vat.explore import Explorer
from vat.explore.page import build_page, launch

HERE = Path(__file__).resolve().parent
demo = build_page(Explorer(vat.load(HERE)))

if __name__ == "__main__":
    launch(
        demo,
        host=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
    )
'''


def _installed(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:  # e.g. vat run from a source tree that was never installed
        return None


def space_settings() -> dict[str, Any]:
    """The Space settings for config.json and the card, with the exporting gradio version."""
    version = _installed("gradio")
    return {"sdk": "gradio", "app_file": APP_NAME, **({"sdk_version": version} if version else {})}


def requirements() -> str:
    """requirements.txt: vat with its explore extra, at least the exporting version."""
    at_least = _installed("variational-auto-transformer")
    return "variational-auto-transformer[explore]" + (f">={at_least}\n" if at_least else "\n")


def write_space_files(folder: Path) -> None:
    (folder / APP_NAME).write_text(APP, encoding="utf-8")
    (folder / REQUIREMENTS_NAME).write_text(requirements(), encoding="utf-8")
