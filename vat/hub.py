"""Old path of exported folders and the Hub; they live in `vat.share.hub` and
`vat.share.export` now (issue 19). Kept as a re-export; it will be removed later."""

from vat.share.export import export_checkpoint, push_to_hub
from vat.share.hub import from_pretrained, save_pretrained

__all__ = ["export_checkpoint", "from_pretrained", "push_to_hub", "save_pretrained"]
