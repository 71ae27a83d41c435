"""A training run's folder, which `vat train` (vat/cli/train.py) checks and records around
the training loop: `names.py` what a run writes into its folder, `run_dir.py` one run per
folder."""
