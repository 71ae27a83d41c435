"""A trained model on disk: resolving, reading (LoadedVAT), writing and sharing it; nothing here
fits features, evaluates or generates."""

# an exported folder's file names, here so that `vat pretrained` lists models without torch
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"
CARD_NAME = "README.md"
SHIPPED_NAME = "shipped.json"  # a shipped model's record and checksums (vat.share.pretrained)
