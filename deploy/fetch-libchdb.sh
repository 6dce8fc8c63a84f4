#!/usr/bin/env bash
# fetch-libchdb.sh — put libchdb.so (the chDB engine, ClickHouse in a shared
# library) where sluice finds it without any environment variable:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/sluice/libchdb/<version>/libchdb.so
#
# Idempotent: does nothing when the file is already there. Prints the path.
# Source: the npm package @chdb/lib-linux-x64-gnu@<version> (npm pack, about
# 166 MB). A tarball already in the cache (…/sluice/chdb/chdb-lib-linux-x64-gnu-
# <version>.tgz, or SLUICE_LIBCHDB_TARBALL) is reused instead of downloading.
#
# Usage: deploy/fetch-libchdb.sh [version]     (default 26.5.3)
set -euo pipefail

version="${1:-${SLUICE_LIBCHDB_VERSION:-26.5.3}}"
pkg="@chdb/lib-linux-x64-gnu@${version}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sluice"
dest_dir="${cache}/libchdb/${version}"
dest="${dest_dir}/libchdb.so"

if [[ -s "${dest}" ]]; then
	echo "${dest}"
	exit 0
fi

case "$(uname -s)/$(uname -m)" in
Linux/x86_64) ;;
*)
	echo "fetch-libchdb: ${pkg} is built for linux/x86_64; this is $(uname -s)/$(uname -m)" >&2
	exit 1
	;;
esac

mkdir -p "${dest_dir}"
work="$(mktemp -d "${dest_dir}/.fetch.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

tarball="${SLUICE_LIBCHDB_TARBALL:-${cache}/chdb/chdb-lib-linux-x64-gnu-${version}.tgz}"
if [[ ! -s "${tarball}" ]]; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "fetch-libchdb: npm is needed to download ${pkg} (or set SLUICE_LIBCHDB_TARBALL to a local copy)" >&2
		exit 1
	fi
	echo "fetch-libchdb: downloading ${pkg} (about 166 MB) ..." >&2
	(cd "${work}" && npm pack --silent "${pkg}" >/dev/null)
	tarball="$(find "${work}" -maxdepth 1 -name '*.tgz' -print -quit)"
	if [[ -z "${tarball}" || ! -s "${tarball}" ]]; then
		echo "fetch-libchdb: npm pack ${pkg} produced no tarball" >&2
		exit 1
	fi
fi

tar -xzf "${tarball}" -C "${work}" package/libchdb.so
if [[ ! -s "${work}/package/libchdb.so" ]]; then
	echo "fetch-libchdb: ${tarball} holds no package/libchdb.so" >&2
	exit 1
fi
chmod 0755 "${work}/package/libchdb.so"
# Atomic: a concurrent run or a reader never sees a half-written library.
mv -f "${work}/package/libchdb.so" "${dest}"
echo "${dest}"
