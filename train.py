"""Train a Variational Auto-Transformer: the recipe `vat train` runs, top to bottom.

    python train.py -c configs/demo.yaml                      # the bundled demo, minutes on CPU
    python train.py -c configs/demo.yaml --ckpt_path last     # resume it where it stopped
    python train.py -c configs/demo.yaml --trainer.max_steps 200 --run_dir runs/short
    tensorboard --logdir runs/demo

Every option of `vat train` works here, with the same names (`python train.py --help`), and
the run folder is the same: config.yaml, tokenizer.json, TensorBoard events, checkpoints/.
A config is a YAML file of the three parts below (configs/*.yaml say what each key does).
"""

import sys

from vat.cli.train import fit_recipe_cli, run_training


def train(args: list[str]) -> None:
    # The options: the YAML config, then the command line. Before anything is built the
    # run folder is checked: a fresh run, a resume (--ckpt_path last) whose settings match
    # the run's, or --overwrite; never a silent mix of two runs.
    cli = fit_recipe_cli(args)

    # 1. Data (vat.data.VATDataModule): a subword tokenizer trained on the training split (or
    #    the run's own tokenizer.json on a resume), the sentences tokenized once into a cache,
    #    and batches of similar lengths.
    data = cli.datamodule

    # 2. The system (vat.train.VATSystem): the model of vat/model.py (a Transformer encoder,
    #    a mean and a log-variance per token, z sampled per token as the decoder's memory) and
    #    its objective: reconstruction + beta * KL(q(z|x) || N(0, s^2 I)) (the paper), with the
    #    rate controller that keeps the KL near its target, and the optimiser.
    system = cli.model

    # 3. The trainer: Lightning's, with vat's callbacks (last.ckpt every N steps and at the
    #    end, the best checkpoint, Ctrl-C stops at a whole step and saves, TensorBoard).
    trainer = cli.trainer

    cli.before_fit()  # the run begins: its manifest is written (vat.runs), the data checked
    trainer.fit(system, datamodule=data, ckpt_path=cli.config.fit.ckpt_path)


if __name__ == "__main__":
    # vat's one-line errors (exit 2), Ctrl-C (exit 130, last.ckpt saved) and --threads
    sys.exit(run_training(train, sys.argv[1:]))
