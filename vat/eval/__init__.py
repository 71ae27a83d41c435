"""The SentEval-compatible evaluation harness (`vat evaluate`).

- `tasks`: loaders for SentEval's downstream data (STS12-16, STSBenchmark, SICK, MR, CR,
  SUBJ, MPQA, SST2/5, TREC, MRPC), task names and groups;
- `sts`: cosine scoring, correlations, SentEval's relatedness regressor;
- `classifier`: SentEval's validation schemes (k-fold, inner k-fold, train/dev/test);
- `batched_classifier`: SentEval's logistic regression / MLP, trained as one batched model;
- `engine`: `evaluate(encoder, tasks, data_dir, settings)` -> SentEval's result layout;
- `encoders`: vat checkpoints, `file.py:function` callables, HF directories, and
  `senteval_batcher` for the original toolkit;
- `finetune`: encoder + dense layer fine-tuning mode;
- `plots`: a bar chart comparing encoders/poolings across tasks (`--plot`).
The command line is `vat evaluate` (vat/cli/evaluate.py, see docs/evaluate.md). The text-VAE
score table (`vat score`) is `vat.score`.
"""
