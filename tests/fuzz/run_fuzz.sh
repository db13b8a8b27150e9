#!/usr/bin/env bash
# Runs every libFuzzer target for FUZZ_SECONDS each (make fuzz). New inputs go to a scratch
# corpus under the build directory (the repository's seeds are read, never written); a crash
# leaves its input in $BUILD/crashes/ and fails the run: add it to tests/fuzz/corpus/<target>/
# once fixed, so the ctest replay keeps it fixed.
set -euo pipefail
BUILD=${1:?usage: run_fuzz.sh BUILD_DIR [SECONDS]}
SECONDS_EACH=${2:-60}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$BUILD/crashes"
total=0
failed=0
for bin in "$BUILD"/bin/fuzz_*; do
  name=$(basename "$bin" | sed 's/^fuzz_//')
  scratch="$BUILD/corpus/$name"
  mkdir -p "$scratch"
  log="$BUILD/fuzz_$name.log"
  if "$bin" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$BUILD/crashes/${name}-" "$scratch" "$HERE/corpus/$name" >"$log" 2>&1; then
    status=ok
  else
    status=CRASH
    failed=$((failed + 1))
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  runs=${runs:-0}
  total=$((total + runs))
  printf '%-16s %12s executions  %s\n' "$name" "$runs" "$status"
  if [ "$status" != ok ]; then grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5; fi
done
printf '%-16s %12s executions in all, %s target(s) crashed\n' total "$total" "$failed"
[ "$failed" -eq 0 ]
