#!/usr/bin/env bash
# The one-machine cluster walkthrough of docs/cluster.md, run for real: a Postgres
# ledger, two `precog worker` processes, submit --wait, status, workers,
# rejects, and the dashboard's workers page. Each wait is bounded; any step
# that does not do what docs/cluster.md says fails the script (exit 1).
#
# Environment: PRECOG (the binary; default bin/precog), PRECOG_DATABASE_URL
# (a ledger database; without one a throwaway Postgres is started under the
# work dir), QUICKSTART_DIR (work dir; default a temp dir), QUICKSTART_DATA
# (a directory with models/ranker.onnx and data/users/dt=2026-11-01; default:
# generated with go run ./testdata/gen), QUICKSTART_DASH_PORT, QUICKSTART_PG_PORT.
# CI runs it through cmd/precog's TestClusterQuickstartScript.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PRECOG=${PRECOG:-$ROOT/bin/precog}
WORK=${QUICKSTART_DIR:-$(mktemp -d)}
DASH_PORT=${QUICKSTART_DASH_PORT:-8093}
PG_PORT=${QUICKSTART_PG_PORT:-5493}
DATE=2026-11-01
mkdir -p "$WORK"

say() { printf '== %s\n' "$*" >&2; }
fail() { printf 'cluster-quickstart: FAILED: %s\n' "$*" >&2; exit 1; }
pgbin() { for d in /usr/lib/postgresql/*/bin; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done; command -v "$1"; }
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# waitfor SECONDS WHAT CMD…: run CMD every 200ms until it succeeds.
waitfor() {
  local secs=$1 what=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "timed out after ${secs}s waiting for $what"
    sleep 0.2
  done
}

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${PGDATA:-}" ] && as_pg "$(pgbin pg_ctl)" -D "$PGDATA" -m fast stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

# 1. A Postgres for the ledger.
if [ -z "${PRECOG_DATABASE_URL:-}" ]; then
  say "starting a throwaway Postgres on :$PG_PORT"
  PGDATA="$WORK/pg"
  mkdir -p "$PGDATA"
  [ "$(id -u)" -eq 0 ] && chown -R postgres "$PGDATA" && chmod 755 "$WORK"
  as_pg "$(pgbin initdb)" -D "$PGDATA" -U postgres --auth=trust -E UTF8 >/dev/null
  as_pg "$(pgbin pg_ctl)" -D "$PGDATA" -l "$PGDATA/server.log" -w \
    -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k /tmp -c fsync=off" start >/dev/null
  export PRECOG_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
fi

# A job: the ranker over one date of generated users, into Parquet.
DATA=${QUICKSTART_DATA:-}
if [ -z "$DATA" ]; then
  say "generating a model and data (go run ./testdata/gen)"
  DATA="$WORK/gen"
  go run ./testdata/gen -out "$DATA" -rows 4000 -dates "$DATE" >/dev/null
fi
cat > "$WORK/scores.yaml" <<YAML
name: quickstart-scores
source:
  parquet: { path: "$DATA/data/users/dt={{.date}}" }
  key: user_id
  rows_per_shard: 500
model:
  path: $DATA/models/ranker.onnx
  inputs:
    features: { columns: [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15] }
  outputs: { score: score }
sinks:
  parquet: { path: "$WORK/out/scores/date={{.date}}" }
YAML

# 2. Two workers of the default pool.
say "starting two workers"
for w in w1 w2; do
  "$PRECOG" --state-dir "$WORK/$w" worker --lease 5s >"$WORK/$w.log" 2>&1 &
  PIDS+=($!)
done
up() { [ "$("$PRECOG" workers --json | jq '[.[] | select(.state == "up")] | length')" -ge 2 ]; }
waitfor 60 "precog workers to list both workers up" up
"$PRECOG" workers

# 3. Submit, follow, inspect.
say "submitting"
RUN=$("$PRECOG" submit "$WORK/scores.yaml" --param date=$DATE --wait --no-progress) || fail "submit --wait did not succeed"
"$PRECOG" status "$RUN" | tee "$WORK/status.txt"
grep -q '^state .*succeeded' "$WORK/status.txt" || fail "status of $RUN does not say succeeded"
[ -f "$WORK/out/scores/date=$DATE/_SUCCESS" ] || fail "the run published no _SUCCESS"
rejects=$("$PRECOG" rejects "$RUN" --csv) || fail "precog rejects"
[ "$(printf '%s\n' "$rejects" | sed -n 1p)" = "shard,key,position,reason" ] || fail "precog rejects --csv has no header"
[ "$("$PRECOG" status "$RUN" --json | jq -r .state)" = succeeded ] || fail "status --json state"

# 4. The dashboard's workers page.
say "the dashboard on :$DASH_PORT"
PRECOG_API_TOKENS=quickstart-token "$PRECOG" dashboard --addr "127.0.0.1:$DASH_PORT" >"$WORK/dashboard.log" 2>&1 &
PIDS+=($!)
page() { curl -sf -H 'Authorization: Bearer quickstart-token' "http://127.0.0.1:$DASH_PORT$1"; }
waitfor 30 "the dashboard to answer" page /workers
workers=$(page /workers) || fail "the dashboard's workers page"
[ "$(printf '%s' "$workers" | grep -o 'data-worker=' | wc -l)" -ge 2 ] || fail "the dashboard's workers page does not list both workers"
runpage=$(page "/runs/$RUN") || fail "the dashboard's run page"
case $runpage in *"$RUN"*) ;; *) fail "the dashboard's run page does not show $RUN" ;; esac
say "cluster quickstart OK (run $RUN)"
