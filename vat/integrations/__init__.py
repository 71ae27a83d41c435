"""Use a trained VAT from other libraries: sentence-transformers and MTEB.

Each submodule imports its library, so install the extra first:
`pip install "variational-auto-transformer[integrations]"`.
"""
