"""The GPU suite (issue 22): one command turns a GPU into every figure vat is missing.

    bench/gpu_suite.sh [--budget-min 24] [--stages facts,throughput,...] OUT_DIR
    bench/gpu_suite.sh --smoke OUT_DIR            # every stage on CPU, tiny shapes, < 2 min

The stages, in this order, one module each (each reuses vat's own commands; the suite only
orchestrates):

1. facts.py: GPU name, torch, CUDA, and a measured bf16 matmul peak (MFU is over it).
2. throughput.py: vat's loop against a plain loop (bench/bench_train_side_by_side.py), bf16,
   8k and 32k vocabulary, compiled and eager, fused cross-entropy off and on at 32k.
3. frontier_train.py: one `vat train` per `model.loss.target_kl` value, all at once.
4. frontier_eval.py: each run's KL, NLL, active units, STS12 and STS-B, newstest2019 BLEU;
   the best STS-B among runs with BLEU >= 95.
5. artefacts.py: the best-STS and the best-BLEU runs exported, one .tar each.

Around them: plan.py (what each mode runs: the GPU suite or --smoke; the data and packages
it needs), call.py (what a stage works with: OUT_DIR, its work folder, the state, notes),
children.py (child processes, stopped for time), state.py (the stage list, the state in
OUT_DIR/gpu_report.json, the budget, the runner), report.py (gpu_report.md and the plot),
__main__.py (the command line, its exit codes and recipes).
"""
