#!/usr/bin/env bash
# Builds Jaeger v2 (all-in-one, OTLP receiver + query API) into the cache
# the trace test looks in: ~/.cache/sluice/bin/jaeger-<version>.
# `go install` refuses the jaeger module (its go.mod has replace
# directives), so it is downloaded and built inside its module directory.
# About 7 minutes on 2 cores the first time; instant afterwards.
set -euo pipefail
VERSION="${JAEGER_VERSION:-v1.75.0}"
CACHE="${SLUICE_CACHE:-$HOME/.cache/sluice}/bin"
OUT="$CACHE/jaeger-$VERSION"
if [ -x "$OUT" ]; then
  echo "$OUT"
  exit 0
fi
# --path: print where the binary is (or would be) and say, by the exit
# status, whether it is there, without building (deploy/run-dev.sh).
if [ "${1:-}" = --path ]; then
  echo "$OUT"
  exit 1
fi
mkdir -p "$CACHE"
# One build at a time: .ci/run starts one early, beside its installs, and
# make test's own fetch then waits for it here and finds the binary.
if command -v flock >/dev/null; then
  exec 9>"$CACHE/.jaeger-$VERSION.lock"
  flock 9
  if [ -x "$OUT" ]; then
    echo "$OUT"
    exit 0
  fi
fi
DIR="$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "github.com/jaegertracing/jaeger@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
if [ -z "$DIR" ] || [ ! -d "$DIR" ]; then
  echo "fetch-jaeger: could not download github.com/jaegertracing/jaeger@$VERSION" >&2
  exit 1
fi
echo "fetch-jaeger: building jaeger $VERSION from $DIR (several minutes the first time)" >&2
(cd "$DIR" && GOFLAGS=-mod=mod go build -trimpath -o "$OUT.tmp" ./cmd/jaeger)
mv "$OUT.tmp" "$OUT"
echo "$OUT"
