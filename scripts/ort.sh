#!/usr/bin/env bash
# Fetches ONNX Runtime from npm into the cache, checked by sha256 (the sums
# below are pinned; a package whose bytes differ is refused). npm pack runs no
# install scripts.
#   scripts/ort.sh cpu DIR            DIR/libonnxruntime.so.1 (onnxruntime-node)
#   scripts/ort.sh gpu DIR [ARCHS]    DIR/libonnxruntime.so.1 and, beside it, the CUDA
#                                     provider (com.github.asus4.onnxruntime.linux-x64-gpu,
#                                     built from the same ORT release) and providers_shared;
#                                     ARCHS (e.g. 90 or 80,90) zeroes every other GPU
#                                     architecture's device code in the provider (scripts/prunefatbin).
# ORT_VERSION must be the one the sums are pinned for.
set -euo pipefail

ORT_VERSION=${ORT_VERSION:-1.29.0}
# One pin per package@version: name, version, sha256 of the npm tarball.
CORE_PKG=onnxruntime-node
CORE_VERSION=$ORT_VERSION
CORE_SHA256_1_29_0=cfdfb45ec4044b1fdca43e5d2e180fb6817e649ff8ad1e0dfc90e18e51b67037
# asus4's package 0.4.9 repackages ONNX Runtime 1.29.0's official Linux GPU
# release (CUDA 13, cuDNN 9); the provider refuses a core of another version.
GPU_PKG=com.github.asus4.onnxruntime.linux-x64-gpu
GPU_VERSION_1_29_0=0.4.9
GPU_SHA256_1_29_0=2b459e0c17f340c92970c10ed86de4f37a3009f93c14053e6ad4334cbb6be412

key=${ORT_VERSION//./_}
core_sha_var=CORE_SHA256_$key gpu_ver_var=GPU_VERSION_$key gpu_sha_var=GPU_SHA256_$key
if [ -z "${!core_sha_var:-}" ]; then
  echo "scripts/ort.sh: no pinned sha256 for ONNX Runtime $ORT_VERSION (pinned: 1.29.0); add its sums here" >&2
  exit 2
fi

mode=${1:-}; dir=${2:-}; archs=${3:-}
if [ -z "$dir" ] || { [ "$mode" != cpu ] && [ "$mode" != gpu ]; }; then
  echo "usage: scripts/ort.sh cpu|gpu DIR [ARCHS]" >&2
  exit 2
fi
packs=$(dirname "$dir")/npm
mkdir -p "$dir" "$packs"

# fetch NAME VERSION SHA256: the checked tarball's path on stdout.
fetch() {
  local name=$1 version=$2 sum=$3 tgz="$packs/$1-$2.tgz"
  if [ ! -f "$tgz" ] || ! echo "$sum  $tgz" | sha256sum -c --status -; then
    echo "fetching $name@$version (npm pack)" >&2
    rm -f "$tgz"
    (cd "$packs" && npm pack --silent --ignore-scripts "$name@$version" >/dev/null)
    if ! echo "$sum  $tgz" | sha256sum -c --status -; then
      echo "scripts/ort.sh: $tgz: sha256 $(sha256sum "$tgz" | cut -d' ' -f1), want $sum; refusing it" >&2
      rm -f "$tgz"
      exit 1
    fi
  fi
  echo "$tgz"
}

# extract TGZ MEMBER OUT: one file, moved into place whole.
extract() {
  local tmp
  tmp=$(mktemp -d "$dir/.x.XXXXXX")
  tar -xzf "$1" -C "$tmp" "$2"
  mv "$tmp/$2" "$3.tmp" && mv "$3.tmp" "$3"
  rm -rf "$tmp"
}

core=$(fetch "$CORE_PKG" "$CORE_VERSION" "${!core_sha_var}")
if [ "$mode" = gpu ]; then
  gpu=$(fetch "$GPU_PKG" "${!gpu_ver_var}" "${!gpu_sha_var}")
  extract "$gpu" package/Plugins/Linux/x64/libonnxruntime_providers_shared.so "$dir/libonnxruntime_providers_shared.so"
  if [ -n "$archs" ]; then
    extract "$gpu" package/Plugins/Linux/x64/libonnxruntime_providers_cuda.so "$dir/.providers_cuda.full"
    go run ./scripts/prunefatbin "$dir/.providers_cuda.full" "$dir/libonnxruntime_providers_cuda.so" "$archs"
    rm -f "$dir/.providers_cuda.full"
  else
    extract "$gpu" package/Plugins/Linux/x64/libonnxruntime_providers_cuda.so "$dir/libonnxruntime_providers_cuda.so"
  fi
fi
# The core last: its presence marks the directory complete (make's target).
extract "$core" package/bin/napi-v6/linux/x64/libonnxruntime.so.1 "$dir/libonnxruntime.so.1"
echo "ONNX Runtime $ORT_VERSION ($mode${archs:+, sm_$archs}) at $dir/libonnxruntime.so.1"
