#!/usr/bin/env bash
# The offline bundle (issue 22): wheels the bare GPU node lacks, and the data the GPU suite
# reads, in one folder (<= 60 MiB); installed on the node with no index. Details:
# scripts/offline_bundle.py, README ("Offline GPU nodes and the GPU suite").
#
#   scripts/offline_bundle.sh [--python 3.12] [--packages "NAME==VER ..."] DIR   # with package access
#   scripts/offline_bundle.sh --install DIR [--target SITE]                       # on the node
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/offline_bundle.py" "$@"
