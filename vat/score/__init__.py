"""The text-VAE score table (`vat score`, `vat.load(...).score`, docs/score.md)."""
