"""A training run's folder and the checks around a run, which `vat train` (vat/cli/train.py)
applies around the training loop (`vat.train` imports none of them): `names.py` what a run
writes into its folder, `run_dir.py` one run per folder, `settings.py` trainer settings
Lightning accepts but cannot run, `outside_failures.py` a dead DDP peer or a missing C++
compiler as one line."""
