#!/bin/bash
# Install what a real Airflow deployment needs beyond the venv: PostgreSQL from Debian's packages
# (sandbox/packages.sh, part "airflow"). Idempotent. Needs root on Debian 12 to install.
#
# The deployment runs its own server (initdb + pg_ctl in a temporary directory); packages.sh stops
# a cluster that the package's scripts start on install.
set -euo pipefail

bash "$(dirname "${BASH_SOURCE[0]}")/../packages.sh" airflow
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || {
	echo "sandbox/airflow/install.sh: postgresql is installed but no initdb was found" >&2
	exit 1
}
