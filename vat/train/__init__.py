"""Training: the LightningModule ("system", system.py) and everything one optimisation step
needs: the objective (objective.py, losses.py, fused_ce.py), schedules and rate control
(schedules.py, rate.py), typed configs (config.py), device-side counters and the non-finite
guard (state.py, non_finite.py), step logging, checkpoint policy (checkpointing.py),
signals (interrupt.py), --init-from (init_from.py) and the compile cache (compile_cache.py).
The run's folder (vat.runs) is not training and lives apart.
"""
