#!/usr/bin/env bash
# fetch-s3server.sh — build the real S3-compatible server the S3 pack store
# tests run against (versitygw, posix backend) and cache it at
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/sluice/bin/versitygw-<version>
#
# Idempotent: does nothing when the binary is already there. Prints the path.
# Source: the Go module github.com/versity/versitygw@<version> from the Go
# module proxy, built with `go build ./cmd/versitygw` inside the downloaded
# module (CGO off). No Docker, no prebuilt download.
#
# Usage: deploy/fetch-s3server.sh [version]     (default v1.8.0)
set -euo pipefail

version="${1:-${SLUICE_S3SERVER_VERSION:-v1.8.0}}"
module="github.com/versity/versitygw"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sluice/bin"
dest="${cache}/versitygw-${version}"

if [[ -x "${dest}" ]]; then
	echo "${dest}"
	exit 0
fi
mkdir -p "${cache}"

dir="$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "${module}@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [[ -z "${dir}" || ! -d "${dir}" ]]; then
	echo "fetch-s3server: go mod download ${module}@${version} gave no module directory" >&2
	exit 1
fi

tmp="$(mktemp "${cache}/.versitygw.XXXXXX")"
trap 'rm -f "${tmp}"' EXIT
start=$(date +%s)
(cd "${dir}" && GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath -o "${tmp}" ./cmd/versitygw)
chmod 0755 "${tmp}"
mv -f "${tmp}" "${dest}"
echo "fetch-s3server: built ${module}@${version} in $(( $(date +%s) - start ))s" >&2
echo "${dest}"
