#!/usr/bin/env bash
# Makes the gate verifier's training environment: a venv at target/trainenv with the pinned
# packages of scripts/train-requirements.txt (torch and its CUDA wheels from PyPI: a few GB;
# the CPU is all training uses). Idempotent: a venv whose pins are installed is left alone.
# Prints the venv's python on stdout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/target/trainenv"
req="$root/scripts/train-requirements.txt"
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if ! cmp -s "$req" "$stamp" 2>/dev/null; then
  echo "train-env: installing $(grep -vc '^#' "$req") pinned packages into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
  cp "$req" "$stamp"
fi
echo "$venv/bin/python"
