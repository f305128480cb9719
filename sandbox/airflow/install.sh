#!/bin/bash
# Install what a real Airflow deployment needs beyond the venv: PostgreSQL from Debian's packages.
# Idempotent: a no-op when initdb is installed. Needs root on Debian 12.
#
# The deployment runs its own server (initdb + pg_ctl in a temporary directory), so a cluster
# that the package's scripts start on install is stopped again.
set -euo pipefail

if compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "sandbox/airflow/install.sh: PostgreSQL is missing and installing it needs root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || {
	echo "sandbox/airflow/install.sh: postgresql is installed but no initdb was found" >&2
	exit 1
}
if command -v pg_lsclusters >/dev/null; then
	pg_lsclusters -h 2>/dev/null | while read -r version cluster _port status _rest; do
		if [[ $status == online* ]]; then
			pg_ctlcluster "$version" "$cluster" stop || true
		fi
	done
fi
