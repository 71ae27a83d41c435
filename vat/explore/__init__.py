"""`vat explore`: one model's latent space in the browser; `Explorer` holds every view as plain
Python, `page` the gradio page over it (the optional `[explore]` extra)."""

from vat.explore.explorer import Explorer

__all__ = ["Explorer"]
