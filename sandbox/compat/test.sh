#!/usr/bin/env bash
# The compatibility tier on the venvs venv.sh built: on each version the fast tier, then the smoke
# of a real deployment (tests/deployment/compat).
#
#   FAST_TIER=<pytest -m expression> test.sh VERSION...   (the Makefile's test-compat)
#
# A version's smoke runs while the next version's fast tier does (a deployment mostly waits), one
# smoke at a time; its output is printed when it ends. Interrupted, it stops the running smoke
# (whose deployment's watchdog then stops what it started).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${FAST_TIER:?the pytest marker expression of the fast tier (the Makefile sets it)}"
logs=$(mktemp -d)
failed=()
smoke_pid=
smoke_version=

stop_smoke() {
	[[ -z $smoke_pid ]] || kill "$smoke_pid" 2>/dev/null
}
trap 'stop_smoke; exit 130' INT TERM
trap 'rm -rf "$logs"' EXIT

finish_smoke() {
	[[ -n $smoke_pid ]] || return 0
	wait "$smoke_pid" || failed+=("$smoke_version(smoke)")
	echo "== Airflow $smoke_version: smoke of a real deployment"
	cat "$logs/$smoke_version.log"
	smoke_pid=
}

for version in "$@"; do
	python=.venv-compat/$version/bin/python
	echo "== Airflow $version: fast tier"
	"$python" -m pytest -q -p no:cacheprovider -n 2 -m "$FAST_TIER" tests || failed+=("$version")
	finish_smoke
	"$python" -m pytest -q -p no:cacheprovider tests/deployment/compat >"$logs/$version.log" 2>&1 &
	smoke_pid=$!
	smoke_version=$version
done
finish_smoke
if ((${#failed[@]})); then
	echo "test-compat: failed on Airflow ${failed[*]}"
	exit 1
fi
