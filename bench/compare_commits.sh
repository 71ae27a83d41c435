#!/usr/bin/env bash
# The CPU target "the demo config: no slower than today": the same fixed-steps training of
# configs/demo.yaml at two revisions, side by side on this machine.
#
#   bash bench/compare_commits.sh OLD NEW                 # e.g. f379e59 HEAD
#   STEPS=600 ROUNDS=3 bash bench/compare_commits.sh main HEAD
#
# Each revision is checked out (detached) as a git worktree under a temporary folder. Each
# first trains 2 untimed steps so that its tokenizer and tokenized-data cache exist (in its
# own worktree: cache formats may differ between revisions). Then the timed runs alternate
# OLD, NEW, OLD, NEW, ... (ROUNDS pairs) so that drift in the machine's load hits both
# alike. Every run: the demo config, seed 1234, --trainer.max_steps STEPS, everything else
# as the config says (validation every 500 steps with its callbacks, logging every 10).
# Per run it prints
#   - train steps/s: from the TensorBoard wall times of the first and the last logged
#     train/loss (excludes start-up and the validation at the very end),
#   - wall s: the whole command, start-up and validation included,
# and at the end the mean of each and NEW / OLD. Commit work before comparing it: only
# committed revisions are checked out.
#
# Knobs (environment): STEPS (600), ROUNDS (2), CONFIG (configs/demo.yaml), EXTRA (more
# train options, e.g. "--trainer.val_check_interval 100000"), OMP_NUM_THREADS (as set),
# TRAIN_CMD (default: detected per revision: `python train.py fit`, else `python -m vat
# train`), KEEP=1 keeps the worktrees and logs.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: bash bench/compare_commits.sh OLD NEW   (two git revisions)" >&2
  exit 2
fi
OLD_REV=$1
NEW_REV=$2
STEPS=${STEPS:-600}
ROUNDS=${ROUNDS:-2}
CONFIG=${CONFIG:-configs/demo.yaml}
EXTRA=${EXTRA:-}
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
for rev in "$OLD_REV" "$NEW_REV"; do
  if ! git -C "$REPO" rev-parse --verify -q "$rev^{commit}" >/dev/null; then
    echo "error: $rev is not a commit of $REPO" >&2
    exit 2
  fi
done
# The shared data, wherever this checkout finds it (configs use ../shared/data).
export VAT_DATA_DIR=${VAT_DATA_DIR:-$(cd "$REPO/.." && pwd)/shared/data}
TMP=$(mktemp -d /tmp/vat_compare.XXXXXX)
cleanup() {
  if [[ "${KEEP:-0}" != 1 ]]; then
    git -C "$REPO" worktree remove --force "$TMP/old" >/dev/null 2>&1 || true
    git -C "$REPO" worktree remove --force "$TMP/new" >/dev/null 2>&1 || true
    rm -rf "$TMP"
  else
    echo "kept: $TMP (remove the worktrees with: git worktree remove --force $TMP/old $TMP/new)"
  fi
}
trap cleanup EXIT
git -C "$REPO" worktree add -q --detach "$TMP/old" "$OLD_REV"
git -C "$REPO" worktree add -q --detach "$TMP/new" "$NEW_REV"

train_cmd() {  # the train command of the revision checked out in $1
  if [[ -n "${TRAIN_CMD:-}" ]]; then
    echo "$TRAIN_CMD"
  elif (cd "$1" && PYTHONPATH="$1" python train.py fit --help >/dev/null 2>&1); then
    echo "python train.py fit"
  elif (cd "$1" && PYTHONPATH="$1" python -m vat train --help >/dev/null 2>&1); then
    echo "python -m vat train"
  else
    echo "error: found no train command in $1 (set TRAIN_CMD)" >&2
    return 2
  fi
}

run() {  # run NAME ROUND STEPS: one training run of revision NAME; prints its wall seconds
  local name=$1 round=$2 steps=$3 wt="$TMP/$1" cmd=${CMD[$1]} t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086  # cmd and EXTRA are word lists
  (cd "$wt" && PYTHONPATH="$wt" $cmd -c "$CONFIG" --seed_everything 1234 \
      --trainer.max_steps "$steps" --run_dir "$TMP/runs/${name}_$round" $EXTRA \
      >"$TMP/runs/${name}_$round.log" 2>&1) || {
    echo "error: the $name run failed; its log:" >&2
    tail -20 "$TMP/runs/${name}_$round.log" >&2
    return 1
  }
  t1=$(date +%s.%N)
  python -c "print(f'{$t1 - $t0:.2f}')"
}

mkdir -p "$TMP/runs"
declare -A CMD
CMD[old]=$(train_cmd "$TMP/old")
CMD[new]=$(train_cmd "$TMP/new")
echo "old: $OLD_REV = $(git -C "$REPO" rev-parse --short "$OLD_REV") (${CMD[old]})"
echo "new: $NEW_REV = $(git -C "$REPO" rev-parse --short "$NEW_REV") (${CMD[new]})"
echo "config $CONFIG, $STEPS steps, $ROUNDS rounds, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
run old prep 2 >/dev/null
run new prep 2 >/dev/null
: >"$TMP/walls.tsv"
for round in $(seq 1 "$ROUNDS"); do
  for name in old new; do
    wall=$(run "$name" "$round" "$STEPS")
    printf '%s\t%s\t%s\n' "$name" "$round" "$wall" >>"$TMP/walls.tsv"
  done
done

python - "$TMP" <<'PY'
import statistics
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

tmp = Path(sys.argv[1])
rows = {"old": [], "new": []}
print(f"{'run':<8} {'round':>5} {'train steps/s':>14} {'wall s':>8}")
for line in (tmp / "walls.tsv").read_text().splitlines():
    name, rnd, wall = line.split("\t")
    ea = EventAccumulator(str(tmp / "runs" / f"{name}_{rnd}"), size_guidance={"scalars": 0})
    ea.Reload()
    tags = ea.Tags()["scalars"]  # train/loss, else any per-step train/ scalar
    tag = "train/loss" if "train/loss" in tags else next((t for t in tags if t.startswith("train/")), None)
    ev = ea.Scalars(tag) if tag else []
    rate = (ev[-1].step - ev[0].step) / (ev[-1].wall_time - ev[0].wall_time) if len(ev) > 1 else None
    rows[name].append((rate, float(wall)))
    shown = f"{rate:.2f} (steps {ev[0].step}-{ev[-1].step})" if rate else "n/a"
    print(f"{name:<8} {rnd:>5} {shown:>14} {float(wall):>8.1f}")
rate = {k: statistics.mean(r for r, _ in v if r) if all(r for r, _ in v) else None for k, v in rows.items()}
wall = {k: statistics.mean(w for _, w in v) for k, v in rows.items()}
for k in ("old", "new"):
    print(f"mean {k}: train steps/s {rate[k] or float('nan'):.2f}, wall {wall[k]:.1f} s")
if rate["old"] and rate["new"]:
    print(f"new / old: train steps/s x{rate['new'] / rate['old']:.3f}, wall x{wall['new'] / wall['old']:.3f}")
PY
