"""Train a Variational Auto-Transformer: `python train.py fit -c configs/demo.yaml`.

A thin shim: the command is `vat train -c configs/demo.yaml` (vat/cli/train.py, LightningCLI);
`python train.py fit --help` lists every option.
"""

import sys

from vat.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
