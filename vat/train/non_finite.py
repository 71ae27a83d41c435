"""The non-finite guard's host side: stop a run whose loss, gradient or weights are not finite."""

from __future__ import annotations

from pathlib import Path

import torch

from vat.train.state import TrainState


class NonFiniteLossError(RuntimeError):
    """A NaN/inf loss, gradient or weight; `steps_done`: the steps completed before it."""

    def __init__(self, message: str, steps_done: int | None = None) -> None:
        super().__init__(message)
        self.steps_done = steps_done


def stop_if_non_finite(train_state: TrainState, trainer) -> None:
    step, here = train_state.read_fault()
    if step < 0:
        return
    f = train_state.fault.tolist()
    what = f"nll={f[1]:.4g}, kl={f[2]:.4g}, grad_norm={f[3]:.4g}" if here else "on another rank"
    raise NonFiniteLossError(
        f"non-finite loss at step {step} ({what}); stopped, no checkpoint written since; "
        f"last good checkpoint: {last_checkpoint(trainer) or 'none saved yet'}",
        step,  # the first bad step, counted from 0: the steps before it are done
    )


def check_finite_weights(state_dict: dict, step: int, trainer) -> None:
    weights = [t for t in state_dict.values() if t.is_floating_point()]
    if weights and not bool(torch.stack([torch.isfinite(t).all() for t in weights]).all()):
        raise NonFiniteLossError(
            f"non-finite weights after step {step}; stopped before saving them; "
            f"last good checkpoint: {last_checkpoint(trainer) or 'none saved yet'}",
            max(step - 1, 0),  # step `step` made them non-finite (its loss was finite)
        )


def last_checkpoint(trainer) -> str | None:
    saved = [getattr(cb, "last_model_path", "") for cb in trainer.checkpoint_callbacks]
    saved += [getattr(cb, "best_model_path", "") for cb in trainer.checkpoint_callbacks]
    # Lightning sets the path before the write the guard refuses: only an existing file counts
    return next((p for p in saved if p and Path(p).is_file()), None)
