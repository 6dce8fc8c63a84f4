#!/usr/bin/env bash
# make run: `sluice dev --config CONFIG` recording its traces into a Jaeger
# of its own, which its web UI reads (/ui?trace=ID, linked from each
# destination's last packs).
#
# Jaeger is the v1.75.0 all-in-one that deploy/fetch-jaeger.sh builds into
# ~/.cache/sluice/bin (deploy/jaeger-local.yaml: in memory, loopback ports
# only, OTLP 127.0.0.1:4317, query API 127.0.0.1:16686). When it is built,
# it starts first and sluice a second later. When it is not, its build (a
# few minutes of CPU, once) runs in the background and sluice starts at
# once, exporting to the port Jaeger will open: Jaeger starts when its
# build ends and the UI shows traces from then on (the spans of the
# minutes before are dropped). Jaeger, or its build, stops when sluice
# does (a stopped build keeps what it compiled in Go's build cache).
#
#   JAEGER=off make run           no Jaeger, no traces exported
#   SLUICE_TELEMETRY_OTLP_ENDPOINT / SLUICE_TELEMETRY_JAEGER_QUERY set in
#   the environment: a Jaeger of your own (none is started)
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG="${1:-deploy/demo.yaml}"
SLUICE="${SLUICE_BIN:-./bin/sluice}"
say() { echo "make run: $*" >&2; }

if [ "${JAEGER:-on}" = off ] || [ -n "${SLUICE_TELEMETRY_OTLP_ENDPOINT:-}${SLUICE_TELEMETRY_JAEGER_QUERY:-}" ]; then
  exec "$SLUICE" dev --config "$CONFIG"
fi

OTLP=127.0.0.1:4317
QUERY=http://127.0.0.1:16686
export SLUICE_TELEMETRY_OTLP_ENDPOINT="$OTLP" SLUICE_TELEMETRY_JAEGER_QUERY="$QUERY"
# Spans leave in batches every second (the SDK's default is 5 s), so a
# pack's trace is in Jaeger about when the UI lists the pack.
export OTEL_BSP_SCHEDULE_DELAY="${OTEL_BSP_SCHEDULE_DELAY:-1000}"
work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-run.XXXXXX")"
log="$work/jaeger.log"
jpid=""
spid=""
cleanup() {
  if [ -n "$spid" ] && kill -0 "$spid" 2>/dev/null; then
    kill -TERM "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
  fi
  if [ -n "$jpid" ]; then
    # Jaeger (or its build) leads a process group of its own: stop it all.
    kill -TERM -- "-$jpid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$jpid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$jpid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

up() { curl -fsS -o /dev/null --max-time 1 "$QUERY/api/services" 2>/dev/null; }
if up; then
  say "something already answers at $QUERY: not starting a Jaeger; is another make run or docker compose up running? Traces go to $OTLP"
elif bin="$(deploy/fetch-jaeger.sh --path)"; then
  # setsid: a session (and process group) of its own, so that Ctrl-C
  # reaches sluice alone and its drain's spans still reach Jaeger.
  setsid "$bin" --config deploy/jaeger-local.yaml >"$log" 2>&1 &
  jpid=$!
  for _ in $(seq 100); do
    up && break
    kill -0 "$jpid" 2>/dev/null || break
    sleep 0.2
  done
  if up; then
    say "Jaeger $(basename "$bin") records traces (OTLP $OTLP, query API $QUERY, loopback only); the UI draws them"
  else
    say "Jaeger did not start; sluice runs without it. Its log:"
    tail -20 "$log" >&2 || true
    kill -TERM -- "-$jpid" 2>/dev/null || true
    jpid=""
  fi
else
  say "Jaeger is not built yet: building it in the background (deploy/fetch-jaeger.sh, several minutes once; log $work/jaeger.log)."
  say "sluice starts now; Jaeger starts when the build ends, and the UI shows traces from then on."
  setsid bash -c 'deploy/fetch-jaeger.sh >>"$1" 2>&1 || { echo "make run: building Jaeger failed: see $1" >&2; exit 1; }
    echo "make run: Jaeger is built; starting it: the UI shows traces from now on" >&2
    exec "$2" --config deploy/jaeger-local.yaml >>"$1" 2>&1' _ "$log" "$bin" &
  jpid=$!
fi

# sluice in the background: the shell's traps forward Ctrl-C (SIGINT) and
# SIGTERM to it, once, and wait for its drain.
"$SLUICE" dev --config "$CONFIG" &
spid=$!
trap 'kill -INT "$spid" 2>/dev/null || true' INT
trap 'kill -TERM "$spid" 2>/dev/null || true' TERM
rc=0
while kill -0 "$spid" 2>/dev/null; do
  rc=0
  wait "$spid" || rc=$?
done
spid=""
exit "$rc"
