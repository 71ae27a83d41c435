"""`python -m vat COMMAND ...` = `vat COMMAND ...`."""

import sys

from vat.cli import main

sys.exit(main())
