#!/usr/bin/env bash
# Fetches DuckDB's prebuilt Node.js bindings from npm into the cache, checked
# by sha256 (the sums below are pinned; a package whose bytes differ is
# refused). npm pack runs no install scripts. The bench's feed section runs
# DuckDB's read-sum-write through them with node (cmd/precog-bench/bench/duckfeed.js):
#   scripts/duckdb.sh DIR     DIR/node_modules/@duckdb/{node-api,node-bindings,node-bindings-linux-x64}
# Use it with NODE_PATH=DIR/node_modules. DUCKDB_VERSION must be the one the
# sums are pinned for; linux/x64 (glibc) only, as the bench machines are.
set -euo pipefail

DUCKDB_VERSION=${DUCKDB_VERSION:-1.5.6-r.1}
# One pin per package@version: sha256 of the npm tarball. node-bindings-linux-x64
# holds duckdb.node and libduckdb.so; node-bindings picks it for the platform
# (its optional detect-libc check falls back to glibc when absent, as here);
# node-api is the JS API over them.
SHA256_1_5_6_r_1_node_bindings_linux_x64=1b9f82478539bb9a1d1df44bd103121a12ae52142c07158dc52b97d2ec1d69ff
SHA256_1_5_6_r_1_node_bindings=9d1ebca9020dcd5680e2e38bd182f1a0e69e59f00d31dfc5afca2623b8a34ac3
SHA256_1_5_6_r_1_node_api=64d5080af3c0144329f9cbdbff7bc867c9c1f9df57a7e7e2a8b13bc6ed2bc664
PACKAGES=(node-bindings-linux-x64 node-bindings node-api)

dir=${1:-}
if [ -z "$dir" ]; then
  echo "usage: scripts/duckdb.sh DIR" >&2
  exit 2
fi
key=${DUCKDB_VERSION//[.-]/_}
for p in "${PACKAGES[@]}"; do
  v=SHA256_${key}_${p//-/_}
  if [ -z "${!v:-}" ]; then
    echo "scripts/duckdb.sh: no pinned sha256 for @duckdb/$p@$DUCKDB_VERSION (pinned: 1.5.6-r.1); add its sums here" >&2
    exit 2
  fi
done
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "scripts/duckdb.sh: only linux/x86_64 is pinned (this is $(uname -s)/$(uname -m))" >&2
  exit 2
fi
packs=$(dirname "$dir")/npm
mkdir -p "$dir" "$packs"

# fetch NAME SHA256: the checked tarball's path on stdout (npm names a scoped
# package's tarball duckdb-NAME-VERSION.tgz).
fetch() {
  local name=$1 sum=$2 tgz="$packs/duckdb-$1-$DUCKDB_VERSION.tgz"
  if [ ! -f "$tgz" ] || ! echo "$sum  $tgz" | sha256sum -c --status -; then
    echo "fetching @duckdb/$name@$DUCKDB_VERSION (npm pack)" >&2
    rm -f "$tgz"
    (cd "$packs" && npm pack --silent --ignore-scripts "@duckdb/$name@$DUCKDB_VERSION" >/dev/null)
    if ! echo "$sum  $tgz" | sha256sum -c --status -; then
      echo "scripts/duckdb.sh: $tgz: sha256 $(sha256sum "$tgz" | cut -d' ' -f1), want $sum; refusing it" >&2
      rm -f "$tgz"
      exit 1
    fi
  fi
  echo "$tgz"
}

# unpack TGZ NAME: the package moved into place whole.
unpack() {
  local tmp dest="$dir/node_modules/@duckdb/$2"
  tmp=$(mktemp -d "$dir/.x.XXXXXX")
  tar -xzf "$1" -C "$tmp"
  rm -rf "$dest"
  mkdir -p "$(dirname "$dest")"
  mv "$tmp/package" "$dest"
  rm -rf "$tmp"
}

# node-api last: its presence marks the directory complete (make's target).
rm -rf "$dir/node_modules/@duckdb/node-api"
for p in "${PACKAGES[@]}"; do
  v=SHA256_${key}_${p//-/_}
  tgz=$(fetch "$p" "${!v}") # an assignment, so that a refused package stops the script
  unpack "$tgz" "$p"
done
echo "DuckDB $DUCKDB_VERSION (node bindings) at $dir/node_modules"
