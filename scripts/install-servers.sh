#!/usr/bin/env bash
# Installs redis-server, PostgreSQL (and curl, for the demo) from Debian's packages when they are missing.
# Tests start their own instances in temp dirs; nothing here starts a service.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
command -v curl >/dev/null 2>&1 || need+=(curl)  # make demo queries the API with it
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing: ${need[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
