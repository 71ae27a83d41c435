"""Old path of checkpoint loading; it lives in `vat.share.checkpoint` and
`vat.share.resolve` now (issue 19). Kept as a re-export; it will be removed later."""

from vat.share.checkpoint import LoadedVAT, read_checkpoint, save_vat, vat_from_checkpoint
from vat.share.resolve import load_vat

__all__ = ["LoadedVAT", "load_vat", "read_checkpoint", "save_vat", "vat_from_checkpoint"]
