#!/usr/bin/env bash
# pgversions.sh — the tests that run against every supported Postgres
# version other than the default: the reader's package tests
# (./services/reader/...) and the end-to-end oracle (test/e2e
# TestOracleOneProcess and TestContractOneProcess), once per major version
# with SLUICE_PG_BINDIR pointing at that version's server binaries
# (deploy/fetch-postgres.sh: cached, no download when cached).
#
#   test/pgversions.sh [major ...]      (default: 14 16 17 18)
#
# The test binaries and the sluice binary are built once and run for each
# version in turn (one version at a time: a version's tests start one
# Postgres, one sluice dev). Prints one line per version and exits non-zero
# when any version failed, including a version whose binaries could not be
# fetched. SLUICE_BIN, when set, is the sluice binary to use (built with the
# sluice_unsafe tag, as the e2e package is).
set -uo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
majors=("$@")
[[ ${#majors[@]} -gt 0 ]] || majors=(14 16 17 18)
e2e_run='^(TestOracleOneProcess|TestContractOneProcess)$'
timeout="${PG_TEST_TIMEOUT:-20m}"

work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-pgversions-XXXXXX")"
trap 'rm -rf "${work}"' EXIT
declare -A bindir result
failed=0

for v in "${majors[@]}"; do
	if ! bindir[$v]="$(./deploy/fetch-postgres.sh "${v}" 2>"${work}/fetch-${v}.log")"; then
		result[$v]="FAILED: its server binaries could not be fetched (deploy/fetch-postgres.sh ${v}): $(tail -3 "${work}/fetch-${v}.log" | tr '\n' ' ')"
		failed=1
	fi
done

# One build for every version.
build_start=$SECONDS
mkdir -p "${work}/bin"
pkgs=()
while read -r path dir; do
	name="${path//\//_}.test"
	if ! $GO test -c -o "${work}/bin/${name}" "${path}" >"${work}/build.log" 2>&1; then
		echo "pgversions: building the tests of ${path} failed:"
		cat "${work}/build.log"
		exit 1
	fi
	pkgs+=("${dir}:${work}/bin/${name}")
done < <($GO list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' ./services/reader/...)
if ! $GO test -c -tags sluice_unsafe -o "${work}/bin/e2e.test" ./test/e2e >"${work}/build.log" 2>&1; then
	echo "pgversions: building test/e2e failed:"
	cat "${work}/build.log"
	exit 1
fi
sluice="${SLUICE_BIN:-}"
if [[ -z "${sluice}" ]]; then
	sluice="${work}/bin/sluice"
	if ! $GO build -tags sluice_unsafe -o "${sluice}" ./services/sluice >"${work}/build.log" 2>&1; then
		echo "pgversions: building sluice failed:"
		cat "${work}/build.log"
		exit 1
	fi
fi
echo "pgversions: built the tests in $((SECONDS - build_start))s"

# run DIR LOG BINARY ARGS... runs a test binary in its package's folder.
run() {
	local dir="$1" log="$2"
	shift 2
	(cd "${dir}" && "$@") >>"${log}" 2>&1
}

word() { if [[ $1 -eq 0 ]]; then echo ok; else echo FAIL; fi; }

for v in "${majors[@]}"; do
	[[ -n "${bindir[$v]:-}" ]] || continue
	ver="$("${bindir[$v]}/postgres" --version 2>/dev/null)"
	ver="${ver#postgres (PostgreSQL) }"
	log="${work}/pg${v}.log"
	echo "pgversions: Postgres ${ver} (${bindir[$v]}) ..."
	export SLUICE_PG_BINDIR="${bindir[$v]}"
	start=$SECONDS
	rrc=0
	for p in "${pkgs[@]}"; do
		run "${p%%:*}" "${log}" "${p#*:}" -test.count=1 -test.timeout="${timeout}" || rrc=1
	done
	rsecs=$((SECONDS - start))
	start=$SECONDS
	erc=0
	SLUICE_BIN="${sluice}" run "$PWD/test/e2e" "${log}" "${work}/bin/e2e.test" -test.count=1 -test.timeout="${timeout}" -test.v -test.run "${e2e_run}" || erc=1
	esecs=$((SECONDS - start))
	unset SLUICE_PG_BINDIR
	result[$v]="Postgres ${ver}: reader tests $(word ${rrc}) (${rsecs}s), e2e oracle $(word ${erc}) (${esecs}s)"
	echo "pgversions: ${result[$v]}"
	if [[ ${rrc} -ne 0 || ${erc} -ne 0 ]]; then
		failed=1
		echo "pgversions: Postgres ${v} failed; its failing tests and the end of its log:"
		grep -E '^\s*--- FAIL' "${log}"
		tail -60 "${log}"
	fi
done

echo "pgversions: results"
for v in "${majors[@]}"; do
	echo "  postgres ${v}: ${result[$v]}"
done
exit "${failed}"
