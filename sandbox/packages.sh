#!/usr/bin/env bash
# The Debian packages the sandbox needs, in one list per part, installed in one apt-get call.
#
#   packages.sh [PART...]    install what is missing of these parts (no PART: every part)
#   packages.sh --list PART  print a part's packages
#
# Parts: python (the venv), slurm (the host's Slurm 22.05 cluster), chroot (building the chroots of
# further Slurm versions), airflow (PostgreSQL and Redis for the real deployments), ui (headless
# Chromium and what Playwright's node driver links against). `make test` and `make demo` install every part
# before anything runs in parallel: two apt-get runs at once lose dpkg's lock.
# Idempotent: a no-op when everything is installed. Needs root on Debian 12 to install.
set -euo pipefail

part_packages() {
	case $1 in
	python) echo python3 python3-venv python3-pip ;;
	slurm) echo slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin openssh-server \
		openssh-client procps iproute2 ;;
	chroot) echo debootstrap ;;
	airflow) echo postgresql procps redis-server ;;
	ui) echo chromium chromium-driver fonts-dejavu-core libatomic1 ;;
	*)
		echo "packages.sh: unknown part '$1' (parts: $PARTS)" >&2
		return 1
		;;
	esac
}
PARTS="python slurm chroot airflow ui"

if [[ ${1:-} == --list ]]; then
	[[ $# -eq 2 ]] || {
		echo "usage: packages.sh --list PART" >&2
		exit 2
	}
	part_packages "$2"
	exit 0
fi

parts=("$@")
((${#parts[@]})) || read -r -a parts <<<"$PARTS"
wanted=()
for part in "${parts[@]}"; do
	read -r -a list <<<"$(part_packages "$part")"
	wanted+=("${list[@]}")
done

missing=()
for pkg in "${wanted[@]}"; do
	[[ " ${missing[*]} " == *" $pkg "* ]] && continue
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
((${#missing[@]})) || exit 0

if [[ $(id -u) -ne 0 ]]; then
	echo "packages.sh: missing Debian packages (${missing[*]}); installing them needs root" >&2
	exit 1
fi
echo "[packages] installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
log_file=$(mktemp -t pathways-apt.XXXXXX)
# One apt-get at a time on this machine, even when two checkouts install at once.
exec 7>/var/lib/dpkg/pathways-sandbox-packages.lock
flock -w 900 7 || {
	echo "packages.sh: another packages.sh is still installing" >&2
	exit 1
}
install() { apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log_file" 2>&1; }
if ! compgen -G '/var/lib/apt/lists/*Packages*' >/dev/null; then
	apt-get update -q >>"$log_file" 2>&1 || true
fi
if ! install; then
	apt-get update -q >>"$log_file" 2>&1 || true
	install || {
		tail -n 20 "$log_file" >&2
		echo "packages.sh: apt-get install ${missing[*]} failed (log: $log_file)" >&2
		exit 1
	}
fi
# Packages whose scripts start a service (postgresql, redis-server) leave it running; the sandbox
# starts its own.
if command -v pg_lsclusters >/dev/null; then
	pg_lsclusters -h 2>/dev/null | while read -r version cluster _port status _rest; do
		if [[ $status == online* ]]; then
			pg_ctlcluster "$version" "$cluster" stop || true
		fi
	done
fi
if [[ " ${missing[*]} " == *" redis-server "* ]] && pgrep -x redis-server >/dev/null; then
	invoke-rc.d redis-server stop >/dev/null 2>&1 || pkill -x redis-server || true
fi
rm -f -- "$log_file"
