"""A training run's folder and what is checked around a run, before and after Lightning.

- `names.py`             the names a run writes into its folder (no Lightning: tools read it)
- `run_dir.py`           one run per folder: its manifest (.vat-run.json: only what a run
                         wrote is ever moved), the locks of every folder it writes into,
                         --overwrite, what a resume may change, finding last.ckpt
- `settings.py`          trainer settings Lightning checks late, checked before a run starts
                         (alone, then against the epoch's batches), in vat's option names
- `outside_failures.py`  a dead DDP peer or a missing C++ compiler as one line

`vat train` (vat/cli/train.py) applies them around the training loop (`vat.train`), which
imports none of them.
"""
