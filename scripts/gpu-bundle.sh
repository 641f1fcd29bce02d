#!/usr/bin/env bash
# Assembles what `make test-gpu` runs on a GPU machine without Go, Redis,
# Postgres or network: ONNX Runtime with its CUDA provider (pruned to
# GPU_ARCHS), stripped precog and precog-bench, the test binaries of
# runner/model and runner, the generated testdata, and scripts/test-gpu.sh.
#   scripts/gpu-bundle.sh ORT_DIR            -> bin/precog-gpu-bundle.tar.xz (at most 60 MiB)
#   scripts/gpu-bundle.sh --dir DIR [ORT_DIR] the same, unpacked into DIR, not compressed
set -euo pipefail

limit=$((60 * 1024 * 1024))
dir= ort=
if [ "${1:-}" = --dir ]; then dir=$2; ort=${3:-}; else ort=${1:-}; fi
if [ -z "$ort" ]; then
  ort=$(ls -d .cache/onnxruntime-gpu-*-sm* 2>/dev/null | head -1 || true)
  [ -n "$ort" ] || { echo "gpu-bundle: no pruned ONNX Runtime (make ort-gpu GPU_ARCHS=90)" >&2; exit 2; }
fi
for f in libonnxruntime.so.1 libonnxruntime_providers_cuda.so libonnxruntime_providers_shared.so; do
  [ -f "$ort/$f" ] || { echo "gpu-bundle: $ort/$f missing (make ort-gpu GPU_ARCHS=90)" >&2; exit 2; }
done
out=
if [ -z "$dir" ]; then
  dir=$(mktemp -d /tmp/precog-gpu-bundle.XXXXXX)
  trap 'rm -rf "$dir"' EXIT
  out=bin/precog-gpu-bundle.tar.xz
fi
mkdir -p "$dir/bin" "$dir/ort"
cp "$ort"/libonnxruntime.so.1 "$ort"/libonnxruntime_providers_cuda.so "$ort"/libonnxruntime_providers_shared.so "$dir/ort/"
flags=(-trimpath -ldflags "-s -w")
# go-nvml's header marks many NVML calls deprecated; precog calls none of them.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
echo "building stripped binaries"
CGO_ENABLED=1 go build "${flags[@]}" -o "$dir/bin/precog" ./cmd/precog
CGO_ENABLED=1 go build "${flags[@]}" -o "$dir/bin/precog-bench" ./cmd/precog-bench
CGO_ENABLED=1 go test -c "${flags[@]}" -o "$dir/bin/model.test" ./runner/model
CGO_ENABLED=1 go test -c "${flags[@]}" -o "$dir/bin/runner.test" ./runner
echo "generating testdata"
go run ./testdata/gen -out "$dir/testdata" >/dev/null
cp scripts/test-gpu.sh "$dir/test-gpu.sh"
if [ -n "$out" ]; then
  mkdir -p "$(dirname "$out")"
  # A 256 MiB window lets xz find the code the binaries share (each is
  # ~60 MB, 12 MB compressed alone); unpacking needs as much memory.
  echo "compressing (xz, 256 MiB window: minutes on 2 cores)"
  tar -C "$dir" -cf - ort bin test-gpu.sh testdata | xz -T1 --lzma2=preset=9,dict=256MiB > "$out.tmp"
  size=$(stat -c %s "$out.tmp")
  if [ "$size" -gt "$limit" ]; then
    echo "gpu-bundle: $out would be $((size / 1024 / 1024)) MiB, over the 60 MiB limit" >&2
    rm -f "$out.tmp"
    exit 1
  fi
  mv "$out.tmp" "$out"
  echo "$out: $(awk "BEGIN { printf \"%.1f\", $size / 1048576 }") MiB. On the GPU machine:"
  echo "  mkdir precog-gpu && tar -C precog-gpu -xJf precog-gpu-bundle.tar.xz && precog-gpu/test-gpu.sh"
fi
