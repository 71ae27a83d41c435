"""A trained model on disk: what a model argument names, reading it once, writing folders.

- `resolve.py`          resolve_model / load_model: the one place that tells a .ckpt, a run
                        folder, an exported folder and a Hub id apart, and reads it once
- `loaded.py`           LoadedVAT (what was read: model, tokenizer, prior, training record,
                        token counts, training files, feature spec and statistics) and
                        ModelSource (where it came from)
- `checkpoint.py`       the .ckpt format: weights-only reading, metadata, finiteness
- `folder.py`           the exported folder format: writing it atomically, reading it
- `hub.py`              the Hugging Face Hub: download by repo id, upload a folder
- `pretrained.py`       the models that ship with vat (vat/shipped/NAME/): names, listing,
                        size checks, writing an entry with half-precision weights
- `export.py`           a loaded model into an exported folder, with its card settings
- `model_card.py`       the folder's README.md
- `training_record.py`  what a checkpoint records of its own training (the card's facts),
                        its training files' portable records and where they are found again

Nothing here fits features, evaluates or generates: those take a LoadedVAT, one floor up.
"""

# The names of an exported folder's files, here and not in folder.py (which imports torch) so
# that `vat pretrained` lists the shipped models without loading a deep-learning framework.
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"
CARD_NAME = "README.md"
SHIPPED_NAME = "shipped.json"  # a shipped model's record and checksums (vat.share.pretrained)
