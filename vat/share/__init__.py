"""A trained model on disk: checkpoints, exported folders, the Hub and the model card.

- `checkpoint.py`   the .ckpt format: weights-only reading, metadata and finiteness checks
- `hub.py`          exported folders (config.json, model.safetensors, tokenizer.json),
                    save_pretrained / from_pretrained / push_to_hub / export_checkpoint
- `model_card.py`   the exported folder's README.md and the training facts it reports
- `resolve.py`      load_vat(source): the one place that tells a .ckpt, an exported folder,
                    a run folder and a Hub id apart
"""
