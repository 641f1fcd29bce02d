#!/usr/bin/env bash
# The suite must pass on a quiet machine and on a busy one. This runs
# `CI=true bash .ci/run` (what CI runs) on a fresh clone of HEAD twice:
#   1. as it is;
#   2. with every core kept busy by a CPU hog (one busy loop per core).
# It prints each pass's result and minutes, keeps each log, and exits non-zero
# when either pass failed. Uncommitted changes are not tested: commit first.
#
#   scripts/test-stability.sh            # both passes
#   STABILITY_PASSES=busy scripts/test-stability.sh   # only the loaded one
set -uo pipefail
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d /tmp/precog-stability.XXXXXX)
passes=${STABILITY_PASSES:-quiet busy}
commit=$(git -C "$top" rev-parse --short HEAD)
[ -n "$(git -C "$top" status --porcelain)" ] && echo "note: uncommitted changes are not part of this test (HEAD $commit)"

hog_pids=()
start_hog() {
  for _ in $(seq "$(nproc)"); do
    ( trap 'exit 0' TERM; while :; do :; done ) &
    hog_pids+=($!)
  done
}
stop_hog() {
  [ ${#hog_pids[@]} -gt 0 ] && kill "${hog_pids[@]}" 2>/dev/null
  wait "${hog_pids[@]}" 2>/dev/null
  hog_pids=()
}
trap stop_hog EXIT

summary=()
failed=0
for pass in $passes; do
  dir="$work/$pass"
  git clone -q "$top" "$dir" || exit 2
  log="$work/$pass.log"
  [ "$pass" = busy ] && start_hog
  began=$(date +%s)
  ( cd "$dir" && CI=true bash .ci/run ) >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - began ))
  stop_hog
  mins=$(awk -v s="$took" 'BEGIN { printf "%.1f", s/60 }')
  if [ $rc -eq 0 ]; then res=pass; else res="FAIL (exit $rc)"; failed=1; fi
  summary+=("$pass: $res in $mins min (commit $commit, $(nproc) cores; log $log)")
  if [ $rc -ne 0 ]; then
    grep -E -- '^(--- FAIL|FAIL|panic:)' "$log" | head -20 | sed 's/^/    /'
  fi
  rm -rf "$dir"
done
echo "== test-stability"
printf '%s\n' "${summary[@]}"
exit $failed
