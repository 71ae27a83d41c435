"""Training: the LightningModule ("system") and everything one optimisation step needs.

- `system.py`       VATSystem (LightningModule): shared step, logging, optimiser, checkpoints
- `objective.py`    one batch through VAT.forward to the objective's terms (compiled or not)
- `losses.py`       the objective as pure functions: reconstruction NLL, Gaussian KL, free bits
- `fused_ce.py`     the NLL chunk by chunk from hidden states, without the full logits
- `schedules.py`    the KL weight schedule (steps, sentences or tokens) and Noam's rate
- `rate.py`         the KL-rate controller (model.loss.target_kl)
- `config.py`       LossConfig, OptimConfig: typed, validated at construction
- `state.py`        counters kept on the device and the non-finite flag (no host sync)
- `non_finite.py`   the non-finite guard's host side: stop, never save NaN weights
- `step_logging.py` which steps log, and the scalars they log
- `checkpointing.py` every checkpoint callback: atomic saves, the final last.ckpt, the
                    checkpoint on an exception, the best-checkpoint policy
The run's folder and the checks around a run (vat.runs) are not training and live apart.
"""
