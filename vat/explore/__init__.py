"""`vat explore`: the latent space of one model in the browser.

- `explorer.py`   Explorer: every view as plain Python (inputs checked, results as dataclasses)
- `wording.py`    which words of a decoding changed against a reference
- `neighbours.py` a cosine index over a corpus's sentence features
- `page.py`       the gradio page over an Explorer (optional extra: `[explore]`)
(`vat.share.space` writes the files that make an exported folder a Hugging Face Space with
this page.)
"""

from vat.explore.explorer import Explorer

__all__ = ["Explorer"]
