"""What the model card, the README and docs/sharing.md tell users to load a folder with:
vat's own loader first (`to_sentence_transformer(vat.load(...))`, which runs no code from the
folder), and the snippet as printed runs; `trust_remote_code=True` only after it, saying what
the flag lets run."""

from __future__ import annotations

import re
import shlex
import shutil

import numpy as np
from conftest import ROOT
from helpers import copy_folder

import vat

SAFE = "to_sentence_transformer(vat.load("
FLAG = "trust_remote_code=True"
# what the flag allows, in the words every page uses
ALLOWS = ("modules.json", "repositories you trust")


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _says_safe_first(text: str) -> None:
    """The safe loader comes before any mention of the flag, and where the flag is named its
    page says what it runs."""
    assert SAFE in text, text
    if FLAG in text:
        assert text.index(SAFE) < text.index(FLAG)
        assert all(words in text for words in ALLOWS), text


def test_the_card_puts_vats_loader_first_and_its_snippet_runs(tiny_export, tmp_path):
    """An exported folder's card: the sentence-transformers snippet is vat's loader, runs as
    printed (the card's placeholder for the folder replaced by its path) and gives the
    folder's own vectors; the flag is named after it with what it allows."""
    folder = copy_folder(tiny_export, tmp_path)
    card = (folder / "README.md").read_text()
    _says_safe_first(card)
    (block,) = [b for b in _python_blocks(card) if "sentence_transformer" in b.lower()]
    assert FLAG not in block
    code = block.replace("PATH_OR_REPO_ID", str(folder))
    scope: dict = {}
    exec(compile(code, "card", "exec"), scope)  # noqa: S102 - the card's own snippet
    sentences = ["A man plays a guitar.", "A dog runs."]
    np.testing.assert_allclose(
        scope["embeddings"], vat.load(folder, device="cpu").encode(sentences), atol=1e-6
    )


def test_the_readme_puts_vats_loader_first_and_its_snippet_runs(
    tiny_export, tmp_path, monkeypatch, capsys
):
    """README's "Export a folder" item: its Python line runs, as printed, on a folder named as
    the line before exports it (my-vat, here the tiny model's export)."""
    readme = (ROOT / "README.md").read_text()
    _says_safe_first(readme)
    (line,) = [x.strip() for x in readme.splitlines() if x.strip().startswith("python -c")]
    argv = shlex.split(line)
    assert argv[:2] == ["python", "-c"] and FLAG not in argv[2]
    name = re.search(r"vat export \S+ (\S+)", readme).group(1)
    shutil.copytree(tiny_export, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    exec(compile(argv[2], "README", "exec"), {})  # noqa: S102 - the README's own line
    assert capsys.readouterr().out.strip() == "(1, 32)"


def test_sharing_md_puts_vats_loader_first():
    text = (ROOT / "docs" / "sharing.md").read_text()
    section = text.split("## sentence-transformers", 1)[1].split("\n## ", 1)[0]
    _says_safe_first(section)
    first = _python_blocks(section)[0]
    assert SAFE in first and FLAG not in first
