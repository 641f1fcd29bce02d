#!/usr/bin/env bash
# The GPU check (`make test-gpu`, docs/gpu.md): on a machine with an NVIDIA GPU,
# CUDA 13 and cuDNN 9, and nothing else (no Go, Redis, Postgres or network):
#   1. every test model and text model on cuda:0 against the Go references
#      (precog gpu-check -check models; a missing GPU fails);
#   2. an end-to-end `precog run` per model on cuda:0 and on the CPU into Parquet,
#      the two outputs compared (precog gpu-check -compare);
#   3. a worker with --devices cuda:0 on the embedded ledger (precog gpu-check
#      -check worker; `precog worker` itself needs Postgres), which also records GPU cost;
#   4. the bench's gpu section (precog gpu-check -sections gpu).
# The one binary is precog built with -tags gpucheck (scripts/gpu-bundle.sh);
# its test data is generated here (precog gpu-check -check testdata).
# Run it from an unpacked bundle (make gpu-bundle) or from a checkout with Go,
# where it first assembles the bundle's directory. GPU_CHECK_DEVICE=cpu runs
# every step on the CPU (a dry run of the script on any machine).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dev=${GPU_CHECK_DEVICE:-cuda:0}
if [ -x "$here/bin/precog" ] && [ -d "$here/ort" ]; then
  root=$here
else
  root=$(mktemp -d /tmp/precog-gpu-check.XXXXXX)
  echo "== assembling the bundle's directory in $root (scripts/gpu-bundle.sh --dir)"
  (cd "$here/.." && bash scripts/gpu-bundle.sh --dir "$root") || exit 1
fi
export PRECOG_ORT_LIB=$root/ort/libonnxruntime.so.1

# The CUDA provider links CUDA 13 (cuBLAS, cuRAND, the runtime) and opens cuDNN 9:
# put the first directory holding each on LD_LIBRARY_PATH unless the loader finds it.
find_lib() {
  local so=$1 d
  ldconfig -p 2>/dev/null | grep -q "$so " && return 0
  for d in ${LD_LIBRARY_PATH//:/ }; do [ -e "$d/$so" ] && return 0; done
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
           /usr/lib/x86_64-linux-gnu /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
           /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib; do
    if [ -e "$d/$so" ]; then
      export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      echo "   $so: $d"
      return 0
    fi
  done
  echo "   $so: not found (install CUDA 13 / cuDNN 9 or set LD_LIBRARY_PATH)"
  return 1
}
if [ "$dev" != cpu ]; then
  echo "== CUDA libraries"
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudnn.so.9; do find_lib "$so"; done
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi

fails=()
started=$(date +%s)
step() { # step NAME CMD...: runs CMD, records a failure
  local name=$1; shift
  local t0=$(date +%s)
  echo "== $name"
  if "$@"; then echo "   ok ($(( $(date +%s) - t0 )) s)"; else echo "   FAILED ($(( $(date +%s) - t0 )) s)"; fails+=("$name"); fi
}

work=$(mktemp -d /tmp/precog-gpu-work.XXXXXX)
bin=$root/bin
export PRECOG_TESTDATA=$work/testdata
step "precog version (ONNX Runtime 1.29.0)" bash -c "'$bin/precog' version | tee /dev/stderr | grep -q 1.29.0"
step "test data (models, users dataset)" "$bin/precog" gpu-check -check testdata -work "$PRECOG_TESTDATA"
step "models on $dev vs the references (test models, text models)" "$bin/precog" gpu-check -check models -check-device "$dev"

# e2e: one job per model, on the CPU and on $dev, outputs compared.
cols="f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15"
spec() { # spec MODEL DEVICE OUTPUTS INPUTS TOLERANCE-unused
  cat <<YAML
name: gpu-check-$1
source:
  parquet: { path: "$PRECOG_TESTDATA/data/users/dt=2026-11-01" }
  key: user_id
  rows_per_shard: 20000
model:
  path: "$PRECOG_TESTDATA/models/$1.onnx"
  device: $2
  inputs: { features: $4 }
  outputs: $3
  batch_size: 4096
sinks:
  parquet: { path: "$work/out/$1-${2/:/}" }
YAML
}
e2e() { # e2e MODEL OUTPUTS INPUTS TOLERANCE
  local m=$1 d
  for d in cpu "$dev"; do
    spec "$m" "$d" "$2" "$3" > "$work/$m-${d/:/}.yaml"
    "$bin/precog" run "$work/$m-${d/:/}.yaml" --no-progress --state-dir "$work/state-$m-${d/:/}" | grep -E 'rows:|rows/s|cost' || return 1
  done
  "$bin/precog" gpu-check -compare "$work/out/$m-cpu,$work/out/$m-${dev/:/}" -compare-tolerance "$4"
}
step "e2e ranker on $dev vs cpu" e2e ranker "{ score: score }" "{ columns: [$cols] }" 1e-3
step "e2e heavy on $dev vs cpu" e2e heavy "{ score: score }" "{ columns: [$cols] }" 2e-3
step "e2e embedder on $dev vs cpu" e2e embedder "{ embedding: embedding }" "{ column: features }" 1e-3
step "e2e recs on $dev vs cpu (scores; ids tied at the k-th score may differ)" e2e recs "{ topk_items: items, topk_scores: scores }" "{ columns: [$cols] }" 1e-3

step "worker --devices $dev (embedded ledger) records its cost" "$bin/precog" gpu-check -check worker -check-device "$dev"
# On the GPU its MLP jobs run 8M rows (-gpu-rows: the GPU runs heavy at tens of
# millions of rows a second); a dry run on the CPU runs 1M.
gpu_rows=8000000
[ "$dev" = cpu ] && gpu_rows=1000000
step "bench: gpu section" "$bin/precog" gpu-check -sections gpu -gpu-device "$dev" -gpu-rows "$gpu_rows" \
  -out "$work/bench-gpu.md" -rows 200000 -heavy-rows 1000000 -text-rows 100000 -big=false -measure 2s
[ -f "$work/bench-gpu.md" ] && sed -n '/^## GPU/,$p' "$work/bench-gpu.md"

echo "== $(( $(date +%s) - started )) s in all; work files in $work"
if [ ${#fails[@]} -gt 0 ]; then
  printf 'test-gpu: FAILED: %s\n' "${fails[@]}"
  exit 1
fi
echo "test-gpu: all passed"
