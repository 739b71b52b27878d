#!/usr/bin/env bash
# The GPU half of benchmarks/gpu_check.py, on the lent GPU machine (no TVM there), from the
# repository root:
#
#   bash benchmarks/gpu_check.sh [CARRY] [gpu_check.py run options]
#
# CARRY (default out/gpu_bundle/carry, made here by `python benchmarks/gpu_check.py build`)
# holds tvm_runtime.tar.xz (the tvm package without its compiler), models.tar.xz (the bundle)
# and wheels/ (tvm-ffi for CPython 3.12, onnx2torch, onnx). They are unpacked into a temporary
# folder put first on PYTHONPATH (no venv, nothing installed), onnx only where the machine has
# none; then `gpu_check.py run` runs on TVM's runtime alone (TVM_USE_RUNTIME_LIB=1).
set -euo pipefail

CARRY=${1:-out/gpu_bundle/carry}
if [ $# -gt 0 ]; then shift; fi
PYTHON=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
start=$SECONDS

for part in tvm_runtime.tar.xz models.tar.xz wheels; do
    if [ ! -e "$CARRY/$part" ]; then
        echo "Error: $CARRY/$part missing; run \`python benchmarks/gpu_check.py build\` first" >&2
        exit 2
    fi
done
mkdir -p "$WORK/site" "$WORK/bundle"
untar() {  # multi-threaded xz where there is one, Python's lzma otherwise
    if command -v xz >/dev/null && tar --version >/dev/null 2>&1; then
        tar -I "xz -d -T0" -xf "$1" -C "$2"
    else
        "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
    fi
}
untar "$CARRY/tvm_runtime.tar.xz" "$WORK/site" & runtime_pid=$!
untar "$CARRY/models.tar.xz" "$WORK/bundle" & models_pid=$!
wait $runtime_pid
wait $models_pid
"$PYTHON" - "$CARRY/wheels" "$WORK/site" <<'EOF'
import glob, importlib.util, os, sys, zipfile
wheels, site = sys.argv[1:]
for wheel in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
    name = os.path.basename(wheel).split("-")[0]
    if name == "onnx" and importlib.util.find_spec("onnx") is not None:
        continue  # the machine's own onnx
    zipfile.ZipFile(wheel).extractall(site)
    print(f"unpacked {os.path.basename(wheel)}")
EOF
echo "unpacked into $WORK in $((SECONDS - start)) s ($(du -sh "$WORK" | cut -f1))"

export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export TVM_USE_RUNTIME_LIB=1
status=0
"$PYTHON" "$ROOT/benchmarks/gpu_check.py" run --bundle "$WORK/bundle" "$@" || status=$?
echo "gpu_check.sh took $((SECONDS - start)) s"
rm -rf "$WORK"
exit $status
