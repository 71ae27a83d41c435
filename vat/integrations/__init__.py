"""A trained VAT in sentence-transformers, MTEB and transformers; each submodule imports its
library (`pip install "variational-auto-transformer[integrations]"`)."""
