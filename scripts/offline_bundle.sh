#!/usr/bin/env bash
# The offline bundle: wheels the bare GPU node lacks, and the data the GPU suite
# reads, in one folder (<= 60 MiB); installed on the node with no index. Details:
# scripts/offline_bundle.py, docs/gpu.md ("A node without internet").
#
#   scripts/offline_bundle.sh [--python 3.12] [--packages "NAME==VER ..."] DIR   # with package access
#   scripts/offline_bundle.sh --install DIR [--target SITE]                       # on the node
#
# PYTHON (default python3) is the interpreter that runs it, and pip with --install.
set -euo pipefail
py="${PYTHON:-python3}"
# the interpreter that runs the script (and, with --install, pip): one line if it is not one
if ! command -v -- "$py" >/dev/null 2>&1 || ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: PYTHON=$py is not a Python 3.10+ interpreter here (set PYTHON to one, e.g. python3)" >&2
    exit 2
fi
exec "$py" "$(dirname "$0")/offline_bundle.py" "$@"
