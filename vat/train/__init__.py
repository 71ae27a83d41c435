"""Training: the LightningModule, its objective, schedules, configs and checkpoint policy."""
