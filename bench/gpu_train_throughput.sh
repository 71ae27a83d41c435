#!/usr/bin/env bash
# Training throughput of configs/corpus_gpu_paper_batch.yaml on one GPU: one run in bf16-mixed, one in
# fp32, then 6 and 10 runs at once (as the parallel sweep runs them). 600 steps each, no
# validation or callbacks; steps/s from the TensorBoard wall times of train/loss (steps
# 49 -> 599, so start-up is excluded). Needs the shared corpus at ../shared/data and a GPU.
# Results: BENCHMARKS.md ("Training on one H100").
#
#   bash bench/gpu_train_throughput.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/vat_gpu_bench}
mkdir -p "$OUT"
common=(-c configs/corpus_gpu_paper_batch.yaml --trainer.max_steps 600 --trainer.val_check_interval 100000
        --trainer.callbacks null --trainer.log_every_n_steps 25)
python -c "from vat.cli.train import prepare_data; import sys; sys.exit(prepare_data(['-c', 'configs/corpus_gpu_paper_batch.yaml']))"
python -m vat train fit "${common[@]}" --trainer.precision bf16-mixed --run_dir "$OUT/single_bf16" > "$OUT/single_bf16.log" 2>&1
python -m vat train fit "${common[@]}" --trainer.precision 32-true --run_dir "$OUT/single_fp32" > "$OUT/single_fp32.log" 2>&1
for n in 6 10; do
  for i in $(seq 1 $n); do
    python -m vat train fit "${common[@]}" --trainer.precision bf16-mixed --run_dir "$OUT/par${n}_$i" > "$OUT/par${n}_$i.log" 2>&1 &
  done
  wait
done
python - "$OUT" <<'PY'
import sys
from pathlib import Path
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
for d in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir()):
    ea = EventAccumulator(str(d), size_guidance={"scalars": 0}); ea.Reload()
    ev = ea.Scalars("train/loss")
    a, b = ev[1], ev[-1]
    print(f"{d.name}: {(b.step - a.step) / (b.wall_time - a.wall_time):.1f} steps/s (steps {a.step}->{b.step})")
PY
