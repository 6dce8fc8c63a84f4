#!/usr/bin/env bash
# fetch-ops-tools.sh — the command-line tools test/ops validates the
# deployment files with, from Debian's packages when they are missing:
#
#   docker-compose (1.29, `docker-compose config`; the docker CLI on these
#                   machines has no compose plugin and no engine runs)
#   promtool       (package prometheus: `promtool check config|rules`,
#                   `promtool test rules`)
#
# Idempotent and best effort: without root or apt-get it only says what is
# missing (test/ops then skips those checks with a message). It never starts
# a Prometheus server. Usage: deploy/fetch-ops-tools.sh
set -uo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
	missing+=(docker-compose)
fi
if [[ ${#missing[@]} -eq 0 ]]; then
	exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
	echo "fetch-ops-tools: missing ${missing[*]} (install them with apt-get); test/ops will skip what needs them" >&2
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# Keep the package's service from starting (no init system in CI anyway).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e ${policy} ]]; then
	printf '#!/bin/sh\nexit 101\n' >"${policy}" && chmod +x "${policy}" && made_policy=1
fi
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
	{ apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } ||
	echo "fetch-ops-tools: apt-get install ${missing[*]} failed; test/ops will skip what needs them" >&2
if [[ ${made_policy} -eq 1 ]]; then
	rm -f "${policy}"
fi
exit 0
