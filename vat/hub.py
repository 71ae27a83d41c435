"""Old path of exported folders and the Hub; they live in `vat.share.hub` now (issue 19).
Kept as a re-export; it will be removed later."""

from vat.share.hub import export_checkpoint, from_pretrained, push_to_hub, save_pretrained

__all__ = ["export_checkpoint", "from_pretrained", "push_to_hub", "save_pretrained"]
