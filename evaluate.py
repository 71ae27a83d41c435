"""Evaluate sentence encoders: a thin shim over `vat evaluate` and `vat geometry`.

    python evaluate.py --ckpt runs/demo/checkpoints/last.ckpt --tasks sts --output results.json
    python evaluate.py geometry --ckpt runs/demo/checkpoints/last.ckpt --output geometry.json

See `vat evaluate --help` and `vat geometry --help`.
"""

import sys

from vat.cli import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(main(argv if argv[:1] == ["geometry"] else ["evaluate", *argv]))
