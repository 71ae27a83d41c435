"""`python -m vat.generate` was an entry point before `vat generate`: refuse it loudly."""

from vat.errors import refuse_moved_entry_point

refuse_moved_entry_point("vat.generate", "vat generate")
