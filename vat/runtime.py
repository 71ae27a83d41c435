"""Where and how a model runs outside training: the `--device auto` rule and eval mode.

Each is written once here; every command, the callbacks and the sweep use them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from vat.errors import OptionError


def resolve_device(name: str | torch.device | None = "auto", option: str = "device") -> str:
    """ "auto" (or None) is "cuda" when a CUDA GPU is visible, else "cpu"; any other name is
    returned as given, after checking that a requested CUDA device exists. `option` is the
    Python argument named in the error (a command shows it as its flag, `--device`)."""
    if name is None or str(name) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    name = str(name)
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise OptionError(option, f"{name} asks for CUDA, which is not available on this machine")
    return name


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd for the block. Afterwards every submodule gets
    back the mode it had (a LightningModule in train mode may hold a model in eval mode)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, training in modes:
            m.training = training
