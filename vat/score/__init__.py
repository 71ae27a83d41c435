"""The text-VAE score table (`vat score`, `vat.load(...).score`, docs/score.md).

- `settings.py`        ScoreSettings: the options of a score, checked when made
- `table.py`           score_table / ScoreTable: the row text-VAE papers report for a loaded
                       VAT on any sentences, composed from the pure functions beside it
- `likelihood.py`      the IWAE bound on log p(x) and the ELBO's parts for a latent per token
- `diversity.py`       distinct-n and self-BLEU
- `representation.py`  alignment and uniformity of sentence features (SimCSE's)

The SentEval harness (`vat evaluate`) is `vat.eval`; the table reads STS-B's pairs and
encodes sentences through it.
"""
