#!/usr/bin/env bash
# The GPU suite (issue 22): device facts, throughput side by side, the rate frontier and its
# artefacts, within a time budget, resumable in OUT_DIR. Runs from a checkout (no install
# needed: this puts the checkout on PYTHONPATH). Details: bench/gpu_suite.py, README
# ("Offline GPU nodes and the GPU suite"), BENCHMARKS.md ("The GPU suite").
#
#   bench/gpu_suite.sh [--budget-min 24] [--stages facts,throughput,...] OUT_DIR
#   bench/gpu_suite.sh --smoke OUT_DIR        # every stage on CPU, tiny shapes
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" "$ROOT/bench/gpu_suite.py" "$@"
