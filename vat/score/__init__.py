"""The text-VAE score table (`vat score`, `vat.load(...).score`, docs/score.md): `table.py`
composes it from the pure functions of `likelihood.py` (IWAE, ELBO), `diversity.py`
(distinct-n, self-BLEU) and `representation.py` (alignment, uniformity); `settings.py` holds its
options apart, so `vat score --help` imports no torch. STS-B's pairs come through `vat.eval`.
"""
