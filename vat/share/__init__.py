"""A trained model on disk: what a model argument names, reading it once, writing folders.

- `resolve.py`          resolve_model / load_model: tells a .ckpt, a run folder, an exported
                        folder, a Hub id and a shipped name apart, and reads it once
- `loaded.py`           LoadedVAT (everything read) and ModelSource (where it came from)
- `checkpoint.py`       the .ckpt format; `folder.py` the exported folder format
- `hub.py`              the Hugging Face Hub; `pretrained.py` the models that ship with vat
- `export.py`           a loaded model into an exported folder; `model_card.py` its README.md
- `training_record.py`  what a checkpoint records of its own training (provenance)

Nothing here fits features, evaluates or generates: those take a LoadedVAT, one floor up.
"""

# The names of an exported folder's files, here and not in folder.py (which imports torch) so
# that `vat pretrained` lists the shipped models without loading a deep-learning framework.
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"
CARD_NAME = "README.md"
SHIPPED_NAME = "shipped.json"  # a shipped model's record and checksums (vat.share.pretrained)
