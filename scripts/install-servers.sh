#!/usr/bin/env bash
# Installs redis-server, PostgreSQL (and curl, for the demo) from Debian's packages when they are missing,
# the en_US.UTF-8 locale (string models: ONNX Runtime's StringNormalizer needs it),
# iproute2 (the cluster partition test),
# chromium, node and npm for the dashboard's browser tests (and playwright-core from npm), an OpenAPI
# validator from npm for docs/openapi.yaml,
# and the tools deploy/k8s's test needs: promtool (Debian's prometheus package) and a kustomize of v4 or
# later (kubectl's built-in one when kubectl is that recent; else kustomize itself, built from its Go module).
# and versitygw, the S3 server of the object-storage tests, built from its Go module into a cache dir
# (internal/testservers finds it there; its version is pinned in internal/testservers/s3.go).
# Tests start their own instances in temp dirs; nothing here starts a service.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
command -v curl >/dev/null 2>&1 || need+=(curl)  # make demo queries the API with it
command -v promtool >/dev/null 2>&1 || need+=(prometheus)  # promtool; the daemon is not started
command -v ip >/dev/null 2>&1 || need+=(iproute2)  # the cluster partition test (ip netns)
command -v jq >/dev/null 2>&1 || need+=(jq)  # scripts/cluster-quickstart.sh (docs/cluster.md's walkthrough, run by a test)
[ -x /usr/bin/chromium ] || need+=(chromium)  # the dashboard's browser tests (driven by playwright-core)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
[ -f /usr/share/i18n/locales/en_US ] || need+=(locales)  # the locale sources localedef builds en_US.UTF-8 from (below)
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The en_US.UTF-8 locale: ONNX Runtime constructs it for text operators (StringNormalizer), and a
# string model fails to load without it (the suite's TestStringNormalizerModel; a fresh Debian has
# only C.UTF-8). localedef adds it to /usr/lib/locale/locale-archive, as locale-gen would.
if ! locale -a 2>/dev/null | grep -qix 'en_US\.utf-\?8'; then
  echo "installing: the en_US.UTF-8 locale (localedef)"
  $SUDO localedef -i en_US -c -f UTF-8 en_US.UTF-8
fi

# playwright-core (pinned in dashboard/browser/package.json) drives Debian's chromium in the
# dashboard's browser tests; it downloads no browser itself. node_modules is gitignored.
BROWSER_DIR="$(cd "$(dirname "$0")/.." && pwd)/dashboard/browser"
if [ ! -f "$BROWSER_DIR/node_modules/playwright-core/package.json" ]; then
  echo "installing: playwright-core (npm, into $BROWSER_DIR/node_modules)"
  (cd "$BROWSER_DIR" && npm install --no-audit --no-fund --silent)
fi

# @apidevtools/swagger-parser (pinned in scripts/openapi/package.json) validates docs/openapi.yaml
# in cmd/precog's TestOpenAPI. node_modules is gitignored.
OPENAPI_DIR="$(cd "$(dirname "$0")" && pwd)/openapi"
if [ ! -f "$OPENAPI_DIR/node_modules/@apidevtools/swagger-parser/package.json" ]; then
  echo "installing: @apidevtools/swagger-parser (npm, into $OPENAPI_DIR/node_modules)"
  (cd "$OPENAPI_DIR" && npm ci --no-audit --no-fund --silent)
fi

# kustomize v4+: `kubectl kustomize` renders deploy/k8s when kubectl embeds v4 or later. Debian's
# kubernetes-client (kubectl 1.20) embeds v2, which cannot take directories in `resources`, so
# without a recent kubectl the kustomize binary is built from its Go module (the version kubectl
# 1.32 embeds).
KUSTOMIZE_VERSION=v5.5.0
kubectl_kustomize_major() {
  command -v kubectl >/dev/null 2>&1 || { echo 0; return; }
  kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\)\..*/\1/p' | grep . || echo 0
}
if [ "$(kubectl_kustomize_major)" -lt 4 ] && ! command -v kustomize >/dev/null 2>&1; then
  echo "installing: kustomize $KUSTOMIZE_VERSION (go install)"
  $SUDO env GOBIN=/usr/local/bin "$(command -v go)" install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
fi

# versitygw (Apache 2.0): a real S3 server over a directory, for the object-storage tests. Built once
# per version into the cache dir that internal/testservers looks in; a missing one fails those tests.
VERSITYGW_VERSION=v1.8.0
SERVERS_CACHE="${PRECOG_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/precog-servers}"
if [ ! -x "$SERVERS_CACHE/versitygw-$VERSITYGW_VERSION/versitygw" ]; then
  echo "installing: versitygw $VERSITYGW_VERSION (go install, into $SERVERS_CACHE)"
  mkdir -p "$SERVERS_CACHE/versitygw-$VERSITYGW_VERSION"
  GOBIN="$SERVERS_CACHE/versitygw-$VERSITYGW_VERSION" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
fi
