"""`vat explore`: a model's latent space in the browser (`Explorer`: the views; `page`: gradio)."""

from vat.explore.explorer import Explorer

__all__ = ["Explorer"]
