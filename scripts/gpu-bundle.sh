#!/usr/bin/env bash
# Assembles what `make test-gpu` runs on a GPU machine without Go, Redis,
# Postgres or network: ONNX Runtime with its CUDA provider (pruned to
# GPU_ARCHS), ONE stripped Go binary (precog built with -tags gpucheck: the
# CLI plus `precog gpu-check`, the bench harness and the model and worker
# checks; without the gs:// and azblob:// drivers) and scripts/test-gpu.sh.
# The test data is generated on the GPU machine (`precog gpu-check -check
# testdata`), not shipped.
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
echo "building the stripped precog binary (-tags gpucheck)"
CGO_ENABLED=1 go build "${flags[@]}" -tags gpucheck -o "$dir/bin/precog" ./cmd/precog
cp scripts/test-gpu.sh "$dir/test-gpu.sh"
if [ -n "$out" ]; then
  mkdir -p "$(dirname "$out")"
  # xz's x86 filter (BCJ) turns relative call addresses absolute before
  # LZMA2: the libraries and the binary compress ~5% smaller (ORT 50.4 ->
  # 48.3 MB); -9e takes another ~0.5% (59.7 -> 59.6 MiB in all). A 256 MiB window spans the whole provider; unpacking needs as
  # much memory. Plain `tar -xJf` unpacks it.
  echo "compressing (xz -9e with the x86 filter, 256 MiB window: minutes on 2 cores)"
  tar -C "$dir" -cf - ort bin test-gpu.sh | xz -T1 --x86 --lzma2=preset=9e,dict=256MiB > "$out.tmp"
  size=$(stat -c %s "$out.tmp")
  for part in ort bin; do
    echo "  $part: $(du -sb "$dir/$part" | cut -f1) bytes unpacked"
  done
  if [ "$size" -gt "$limit" ]; then
    echo "gpu-bundle: $out would be $(awk "BEGIN { printf \"%.1f\", $size / 1048576 }") MiB, over the 60 MiB limit" >&2
    rm -f "$out.tmp"
    exit 1
  fi
  mv "$out.tmp" "$out"
  echo "$out: $(awk "BEGIN { printf \"%.1f\", $size / 1048576 }") MiB. On the GPU machine:"
  echo "  mkdir precog-gpu && tar -C precog-gpu -xJf precog-gpu-bundle.tar.xz && precog-gpu/test-gpu.sh"
fi
