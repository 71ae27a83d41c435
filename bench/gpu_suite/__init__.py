"""The GPU suite: one command turns a GPU into a reference model and every figure vat is missing.

    bench/gpu_suite.sh [--budget-min 24] [--stages facts,throughput,...] OUT_DIR
    bench/gpu_suite.sh --smoke OUT_DIR            # every stage on CPU, tiny shapes, < 2 min

The stages, in this order, one module each (each reuses vat's own commands; the suite only
orchestrates):

1. facts.py: GPU name, torch, CUDA, and a measured bf16 matmul peak (MFU is over it).
2. throughput.py: vat's loop against a plain loop (bench/bench_train_side_by_side.py), bf16,
   8k and 32k vocabulary, compiled and eager, fused cross-entropy off and on at 32k.
3. reference.py: one model alone with the recipe that reached BLEU 99 before
   (configs/reference_gpu.yaml), at least 600M tokens or the stage's share (the short plan,
   `--plan short`: one launch trained for its call's time); evaluated, exported as a folder
   ready for `python scripts/add_pretrained.py`. Continued, never restarted: each launch resumes
   the newest checkpoint (this machine's, or the one the last call returned in parts) or
   continues from the newest weights, and a call that names it in --stages trains a
   finished reference further.
4. frontier_train.py: one `vat train` per `model.loss.target_kl` value, all at once, as many
   as get a useful token budget.
5. frontier_eval.py: each run's KL, NLL, active units, STS12 and STS-B, newstest2019 BLEU;
   the best STS-B among runs with BLEU >= 95.
6. artefacts.py: the frontier's best-STS and best-BLEU runs exported, one .tar each.

Around them: plan.py (what each mode runs: the GPU suite or --smoke; the time shares and
their arithmetic; the recipes for a GPU allocation, three calls in 30 minutes and two in 15; the
data and packages it needs),
call.py (what a stage works with: OUT_DIR, its work folder, the state, notes), carry.py (the
reference's checkpoint split into parts that come back from a call, and joined on the next
machine), children.py
(child processes, stopped for time), runs.py (the training runs: started afresh, resumed or
found finished), state.py (the stage list, the state in OUT_DIR/gpu_report.json, the
budget, the runner), records.py (the report and each stage's records as dataclasses: what
each field holds), schema.py (a record read from JSON, every field checked against its type
before any stage runs, and written back), report.py (gpu_report.md, the plot, and the
logs with each run's TensorBoard curves), __main__.py (the command line, its exit codes and
recipes). bench/gpu_suite.sh runs this
folder, and for one call of an allocated machine also installs the bundle, stops the suite before
the call's limit and copies its files out (--bundle, --call-limit-s, --copy-to).
"""
