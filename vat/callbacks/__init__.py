"""Lightning callbacks for watching a VAT train (switch each on under `trainer.callbacks`)."""

from vat.callbacks.geometry import GeometryMetrics, LatentProjector
from vat.callbacks.samples import SamplesCallback

__all__ = ["GeometryMetrics", "LatentProjector", "SamplesCallback"]
