#!/usr/bin/env bash
# One venv per Airflow version the provider supports, for the compatibility tier of `make test`.
#
#   venv.sh VERSION...   build (or reuse) .venv-compat/<VERSION> for each, side by side
#
# Each venv holds `apache-airflow==VERSION` and this checkout (editable, with the test and
# openlineage extras),
# resolved with sandbox/compat/constraints-<VERSION>.txt: Airflow publishes its constraint files on
# GitHub only, and today's PyPI no longer installs an older Airflow that works (its web stack moved
# on), so the pins that make each version work are kept here. A venv is reused while its Airflow
# version, pyproject.toml, constraints and this script are unchanged (a stamp file holds their hash).
#
# The matrix covers Python 3.10-3.12 too: a version listed in PYTHON_OF runs on that Python where
# the machine has it (python3.X on the PATH or under pyenv), otherwise on python3, which it says.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
declare -A PYTHON_OF=([2.11.2]=3.10 [3.2.2]=3.12)

python_for() {
	local want=${PYTHON_OF[$1]:-} candidate
	if [[ -n $want ]]; then
		# a pyenv shim is on the PATH even where it cannot run: take the first that runs
		for candidate in $(command -v "python$want") \
			$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/"python$want" 2>/dev/null | sort -rV); do
			if "$candidate" -c 'import venv' >/dev/null 2>&1; then
				echo "$candidate"
				return
			fi
		done
		echo "[compat] Airflow $1: no python$want here, using $PYTHON" >&2
	fi
	echo "$PYTHON"
}

build() {
	local version=$1 dir=.venv-compat/$1 constraints=sandbox/compat/constraints-$1.txt
	[[ -f $constraints ]] || {
		echo "venv.sh: no $constraints: Airflow $version is not in the compatibility matrix" >&2
		return 1
	}
	local stamp python
	python=$(python_for "$version")
	stamp=$({ cat pyproject.toml "$constraints" sandbox/compat/venv.sh && "$python" --version; } | sha256sum | cut -d' ' -f1)
	if [[ -f $dir/.installed && $(cat "$dir/.installed") == "$stamp" ]]; then
		return 0
	fi
	rm -rf "$dir"
	"$python" -m venv "$dir"
	local log=$dir/install.log requirements=$dir/requirements.txt
	# The project's requirements, read from pyproject.toml: the venvs install them side by side,
	# and the checkout itself (which builds in the tree) one after another below.
	"$PYTHON" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = p["optional-dependencies"]
print("\n".join(p["dependencies"] + extras["test"] + extras["openlineage"]))' >"$requirements"
	if ! { "$dir/bin/pip" install --upgrade pip &&
		"$dir/bin/pip" install -c "$constraints" "apache-airflow==$version" -r "$requirements"; } >"$log" 2>&1; then
		tail -n 30 "$log" >&2
		echo "venv.sh: installing Airflow $version failed (log: $log)" >&2
		return 1
	fi
	echo "$stamp" >"$dir/.stamp"
}

editable() {
	local version=$1 dir=.venv-compat/$1
	[[ -f $dir/.stamp ]] || return 0
	if ! "$dir/bin/pip" install --no-deps -e . >>"$dir/install.log" 2>&1; then
		tail -n 30 "$dir/install.log" >&2
		return 1
	fi
	mv "$dir/.stamp" "$dir/.installed"
	echo "[compat] Airflow $version on $("$dir/bin/python" --version): $dir"
}

pids=()
for version in "$@"; do
	build "$version" &
	pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
	wait "$pid" || status=1
done
for version in "$@"; do
	editable "$version" || status=1
done
exit $status
