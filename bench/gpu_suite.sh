#!/usr/bin/env bash
# The GPU suite: device facts, throughput side by side, a reference model, the rate frontier
# and its artefacts, within a time budget, resumable in OUT_DIR. Runs from a checkout (no
# install needed: this puts the checkout on PYTHONPATH and runs the folder bench/gpu_suite/,
# one module per stage). Details: bench/gpu_suite/__init__.py, docs/gpu.md ("The GPU suite"),
# BENCHMARKS.md ("The GPU suite").
#
#   bench/gpu_suite.sh [--budget-min 24] [--stages facts,throughput,...] OUT_DIR
#   bench/gpu_suite.sh --plan short ... OUT_DIR   # 15 minutes of a GPU allocation (plan.RECIPE_SHORT)
#   bench/gpu_suite.sh --smoke OUT_DIR        # every stage on CPU, tiny shapes
#   bench/gpu_suite.sh --seed DIR --trust-compile-cache ... OUT_DIR
#       # the reference resumes with the compile cache an earlier call returned in DIR (or
#       # OUT_DIR): code that torch runs; only for files your own earlier call returned
#
# One call of an allocated machine (docs/gpu.md's recipes; bench/gpu_suite/plan.py, RECIPE),
# three more options, handled here (OUT_DIR must then be the last argument):
#   --bundle DIR        install the offline bundle DIR first (no index, into a private folder
#                       made for this call, removed at its end) and read the data from DIR/data
#   --call-limit-s N    the call is killed after N s: stop the suite (SIGINT: its runs save
#                       their state, the report is written) 40 s before, SIGKILL 28 s later
#   --copy-to DIR       then, whatever happened, copy the suite's files in OUT_DIR (the report,
#                       the .tar files, the plot, the logs, the reference's checkpoint parts
#                       when this call trained it: at most 8 files, each at most 16 MiB, 64 MiB
#                       in all; what is left out is named) into DIR and add this call's exit
#                       code to the copied gpu_report.md. DIR is checked first (a folder, no
#                       link, no file of the suite's names that an earlier copy did not write:
#                       bench/gpu_suite/out_files.py), and each file is replaced by a rename
# The exit code is the suite's (0, 1 a stage failed, 2 a prerequisite or the bundle, 130 a
# signal), or 124 when --call-limit-s stopped it.
set -uo pipefail  # not -e: the files are copied whatever the suite's exit
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
# the folder, not `-m bench.gpu_suite`: -m would put the current folder first on sys.path,
# where another checkout's bench/ would be imported instead of this one
SUITE=("$PY" "$ROOT/bench/gpu_suite")
GUARD_S=40   # plan.CALL_GUARD_S
KILL_AFTER_S=28

bundle="" copy_to="" limit="" args=()
while (($#)); do
  case "$1" in
    --bundle | --copy-to | --call-limit-s)
      if (($# < 2)); then echo "error: $1 needs a value" >&2; exit 2; fi
      case "$1" in
        --bundle) bundle=$2 ;;
        --copy-to) copy_to=$2 ;;
        --call-limit-s) limit=$2 ;;
      esac
      shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ -z $bundle && -z $copy_to && -z $limit ]]; then
  exec "${SUITE[@]}" "${args[@]}"
fi
if [[ -n $limit && ! $limit =~ ^[0-9]+$ ]]; then
  echo "error: --call-limit-s must be a whole number of seconds, got '$limit'" >&2; exit 2
fi
out_dir="${args[${#args[@]}-1]:-}"
if [[ -n $copy_to && ( -z $out_dir || $out_dir == -* ) ]]; then
  echo "error: with --copy-to, OUT_DIR must be the last argument" >&2; exit 2
fi

# stdlib only, no vat: seconds, before the suite runs
COPY=("$PY" "$ROOT/bench/gpu_suite/out_files.py")
if [[ -n $copy_to ]] && ! "${COPY[@]}" check "$copy_to"; then
  exit 2
fi

rc=0
if [[ -n $bundle ]]; then
  # a folder made for this call (mktemp: 0700, a fresh name), first on PYTHONPATH: a fixed
  # shared path could hold anyone's sitecustomize.py, which Python would run in the suite
  site="$(mktemp -d "${TMPDIR:-/tmp}/gpu_suite_site.XXXXXXXX")" || exit 2
  trap 'rm -rf -- "$site"' EXIT
  if "$PY" "$ROOT/scripts/offline_bundle.py" --install "$bundle" --target "$site" >&2; then
    export PYTHONPATH="$site:$PYTHONPATH" VAT_DATA_DIR="$(cd "$bundle/data" && pwd)"
  else
    rc=2
  fi
fi
if ((rc == 0)); then
  if [[ -n $limit ]]; then
    left=$((limit - SECONDS - GUARD_S))
    if ((left < 1)); then
      echo "error: --call-limit-s $limit leaves no time after ${SECONDS} s and the ${GUARD_S} s guard" >&2
      rc=2
    else
      # --foreground: the signal reaches the suite alone, which stops each run once (a second
      # SIGINT would cut short the checkpoint a run writes on the first)
      timeout --foreground -s INT -k "$KILL_AFTER_S" "$left" "${SUITE[@]}" "${args[@]}"
      rc=$?
    fi
  else
    "${SUITE[@]}" "${args[@]}"
    rc=$?
  fi
fi

if [[ -n $copy_to ]]; then
  "${COPY[@]}" copy "$out_dir" "$copy_to" "$rc" "$limit" || rc=$((rc ? rc : 2))
fi
echo "gpu_suite: exit $rc" >&2
exit "$rc"
