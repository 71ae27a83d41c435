#!/usr/bin/env bash
# The GPU suite (issue 22): device facts, throughput side by side, the rate frontier and its
# artefacts, within a time budget, resumable in OUT_DIR. Runs from a checkout (no install
# needed: this puts the checkout on PYTHONPATH and runs the folder bench/gpu_suite/, one
# module per stage). Details: bench/gpu_suite/__init__.py, README ("Offline GPU nodes and
# the GPU suite"), BENCHMARKS.md ("The GPU suite").
#
#   bench/gpu_suite.sh [--budget-min 24] [--stages facts,throughput,...] OUT_DIR
#   bench/gpu_suite.sh --smoke OUT_DIR        # every stage on CPU, tiny shapes
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# the folder, not `-m bench.gpu_suite`: -m would put the current folder first on sys.path,
# where another checkout's bench/ would be imported instead of this one
exec "${PYTHON:-python3}" "$ROOT/bench/gpu_suite" "$@"
