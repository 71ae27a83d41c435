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

from vat.cli.train import begin, build, check_run_folder, fit, parse, run_training


def train(args: list[str]) -> int:
    # The options: the YAML config, then the command line, read by LightningCLI's parser.
    # Nothing is built yet; --threads N sets the CPU threads at once.
    cli, threads_note = parse(args)

    # The run folder (vat.runs.run_dir), checked before any file is written and locked for
    # this process: a fresh run, a resume (--ckpt_path last) of the same model and data, or
    # --overwrite; never a silent mix of two runs. A resume takes the checkpoint's model
    # settings.
    start = check_run_folder(cli, threads_note)

    # 1. Data (vat.data.VATDataModule): a subword tokenizer trained on the training split (or
    #    the run's own tokenizer.json on a resume), the sentences tokenized once into a cache,
    #    and batches of similar lengths.
    # 2. The system (vat.train.VATSystem): the model of vat/model.py (a Transformer encoder,
    #    a mean and a log-variance per token, z sampled per token as the decoder's memory) and
    #    its objective: reconstruction + beta * KL(q(z|x) || N(0, s^2 I)) (the paper), with the
    #    rate controller that keeps the KL near its target, and the optimiser.
    # 3. The trainer: Lightning's, with vat's callbacks (last.ckpt every N steps and at the
    #    end, the best checkpoint, Ctrl-C stops at a whole step and saves, TensorBoard).
    data, system, trainer = build(cli, start)

    # The run begins: the settings checked against the data, a fresh run's record written
    # (replacing an earlier run only with --overwrite).
    begin(cli, start)

    # The fit. Ctrl-C or SIGTERM stops it at the end of a step with last.ckpt saved there
    # (exit 130 / 143); `--ckpt_path last` continues it bitwise.
    return fit(trainer, system, data, cli.config.fit.ckpt_path)


if __name__ == "__main__":
    # vat's one-line errors (exit 2) and Ctrl-C (exit 130, last.ckpt saved)
    sys.exit(run_training(train, sys.argv[1:]))
