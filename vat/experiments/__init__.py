"""Experiments built on vat's training, geometry, evaluation and generation.

- `sweep`: sweep any train-config key (one key, or a grid over two): one run per point, then
  losses, latent geometry, STS and mu-decoding BLEU per run (`measure`), a CSV/JSON table,
  the rate-frontier plot, Figure 2-3 style plots and a TensorBoard hparams view (`frontier`).
  The sweep YAML is described in `config`; `sweep.main(argv) -> int` is `vat sweep`.
"""
