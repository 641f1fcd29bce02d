#!/usr/bin/env bash
# make demo: local Redis + Postgres under the state dir, generated data and
# models, a real `recs` job (top-50 items per user) into Parquet, Postgres and
# Redis, then the same user's recommendations read back from each store and
# through the lookup API.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEMO=${DEMO_DIR:-$ROOT/demo}
STATE=${PRECOG_STATE_DIR:-$ROOT/.precog}
REDIS_PORT=${DEMO_REDIS_PORT:-6391}
PG_PORT=${DEMO_PG_PORT:-5491}
API_PORT=${DEMO_API_PORT:-8091}
ROWS=${DEMO_ROWS:-50000}
PRECOG=$ROOT/bin/precog
mkdir -p "$DEMO" "$STATE"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

pgbin() { for d in /usr/lib/postgresql/*/bin; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done; command -v "$1"; }
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

PIDS=()
cleanup() {
  [ -n "${API_PID:-}" ] && kill "$API_PID" 2>/dev/null || true
  [ -n "${PGDATA:-}" ] && as_pg "$(pgbin pg_ctl)" -D "$PGDATA" -m fast stop >/dev/null 2>&1 || true
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "starting local Redis (:$REDIS_PORT) and Postgres (:$PG_PORT) under $STATE/servers"
mkdir -p "$STATE/servers/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --dir "$STATE/servers/redis" --logfile "$STATE/servers/redis/redis.log" >/dev/null
PGDATA="$STATE/servers/pg"
if [ ! -f "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  [ "$(id -u)" -eq 0 ] && chown -R postgres "$STATE/servers" && chmod 755 "$STATE" "$STATE/servers"
  as_pg "$(pgbin initdb)" -D "$PGDATA" -U postgres --auth=trust -E UTF8 >/dev/null
fi
[ "$(id -u)" -eq 0 ] && chown -R postgres "$PGDATA"
as_pg "$(pgbin pg_ctl)" -D "$PGDATA" -l "$PGDATA/server.log" -w \
  -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k /tmp -c fsync=off" start >/dev/null
export REDIS_ADDR="127.0.0.1:$REDIS_PORT"
export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"

say "generating models and $ROWS rows of user features (go run ./testdata/gen)"
go run ./testdata/gen -out "$DEMO" -rows "$ROWS" -dates 2026-11-01

cp scripts/demo-job.yaml "$DEMO/recs-demo.yaml"

say "precog inspect models/recs.onnx"
"$PRECOG" inspect "$DEMO/models/recs.onnx"

say "precog validate recs-demo.yaml --param date=2026-11-01"
"$PRECOG" --state-dir "$STATE" validate "$DEMO/recs-demo.yaml" --param date=2026-11-01 --max-shards 6

say "precog run recs-demo.yaml --param date=2026-11-01"
"$PRECOG" --state-dir "$STATE" run "$DEMO/recs-demo.yaml" --param date=2026-11-01 | tee "$STATE/run-summary.txt"
RUN_ID=$(sed -n 's/^run \([^ ]*\) succeeded.*/\1/p' "$STATE/run-summary.txt")

USER_KEY=42
VERSION=$(redis-cli -p "$REDIS_PORT" get recs:current)
say "Redis: recs:current = $VERSION; the record of user $USER_KEY"
redis-cli -p "$REDIS_PORT" get "recs:$VERSION:$USER_KEY" | cut -c1-300; echo "…"

say "Postgres: the user_recs view, same user"
psql "$DATABASE_URL" -c "SELECT user_id, items[1:5] AS top5_items, scores[1:3] AS top3_scores, model_version, computed_at FROM user_recs WHERE user_id = $USER_KEY"

say "Parquet: $(ls "$DEMO/out/user_recs/date=2026-11-01" | wc -l) files under out/user_recs/date=2026-11-01"
ls "$DEMO/out/user_recs/date=2026-11-01" | head -5

if "$PRECOG" serve --help >/dev/null 2>&1; then
  say "lookup API: precog serve (a precomputed user, then a brand-new one computed live)"
  mkdir -p "$DEMO/serve-jobs"
  cp "$DEMO/recs-demo.yaml" "$DEMO/serve-jobs/recs.yaml"
  ln -sfn "$DEMO/models" "$DEMO/serve-jobs/models"; ln -sfn "$DEMO/data" "$DEMO/serve-jobs/data"
  PRECOG_API_TOKENS=demo-token "$PRECOG" serve --jobs "$DEMO/serve-jobs" --param date=2026-11-01 \
    --addr "127.0.0.1:$API_PORT" >"$STATE/serve.log" 2>&1 &
  API_PID=$!
  for _ in $(seq 50); do curl -sf "127.0.0.1:$API_PORT/readyz" >/dev/null && break; sleep 0.2; done
  echo "GET /v1/predictions/recs/$USER_KEY"
  OUT=$(curl -s -H 'Authorization: Bearer demo-token' "127.0.0.1:$API_PORT/v1/predictions/recs/$USER_KEY")
  echo "$OUT" | cut -c1-200; echo "…  $(echo "$OUT" | grep -o '"source":"[a-z]*"')"
  FEATS="0.5,-0.2,0.9,0.1,-0.7,0.3,0.3,-0.1,0.8,-0.9,0.2,0.6,-0.4,0.05,0.7,-0.3"
  echo "POST /v1/predictions/recs:predict (a brand-new user)"
  curl -s -H 'Authorization: Bearer demo-token' -XPOST "127.0.0.1:$API_PORT/v1/predictions/recs:predict" \
    -d "{\"key\":\"9999999\",\"inputs\":{\"features\":[$FEATS]}}" > "$STATE/predict.json"
  cut -c1-200 "$STATE/predict.json"; echo "…  $(grep -o '"source":"[a-z]*"' "$STATE/predict.json")"
fi
say "dashboard of this run"
echo "  PRECOG_API_TOKENS=demo-token bin/precog --state-dir $STATE dashboard --addr 127.0.0.1:8081"
echo "  then open http://127.0.0.1:8081/runs/$RUN_ID (log in with demo-token)"
say "demo done (servers stop now; data stays under $DEMO and $STATE)"
