# shellcheck shell=bash disable=SC2034
# Shared settings and helpers for up.sh and down.sh (sourced, not executed).
#
# Every setting can be overridden from the environment; see README.md.

SANDBOX_SLURM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
SANDBOX_REPO_ROOT=$(cd "$SANDBOX_SLURM_DIR/../.." && pwd -P)

# The cluster user: empty here means this checkout's own, pathways-<digest> (sandbox_cluster_user).
SLURM_SANDBOX_USER=${SANDBOX_SLURM_USER:-}
# Who may log in over SSH: every checkout's own user (one sshd per cluster serves all checkouts, so
# its configuration must not depend on which checkout wrote it last).
SLURM_SANDBOX_SSH_USERS=${SANDBOX_SLURM_USER:-pathways-*}
SLURM_SANDBOX_REST_SYSUSER=${SANDBOX_SLURMREST_USER:-slurmrest}
SLURM_SANDBOX_CPUS=${SANDBOX_SLURM_CPUS:-32}
SLURM_SANDBOX_REAL_MEMORY=${SANDBOX_SLURM_REAL_MEMORY:-16000}
SLURM_SANDBOX_CLUSTER_NAME=${SANDBOX_SLURM_CLUSTER_NAME:-pathways-sandbox}
SLURM_SANDBOX_CTLD_PORT=${SANDBOX_SLURMCTLD_PORT:-6817}
SLURM_SANDBOX_SLURMD_PORT=${SANDBOX_SLURMD_PORT:-6818}
SLURM_SANDBOX_REST_PORT=${SANDBOX_SLURMREST_PORT:-6820}
SLURM_SANDBOX_SSH_PORT=${SANDBOX_SSH_PORT:-2222}
SLURM_SANDBOX_JWT_LIFESPAN=${SANDBOX_JWT_LIFESPAN:-86400}
SLURM_SANDBOX_TIMEOUT=${SANDBOX_READY_TIMEOUT:-60}
SLURM_SANDBOX_HOST=127.0.0.1
SLURM_SANDBOX_REST_API_VERSION=v0.0.38
SLURM_SANDBOX_REST_API_VERSIONS=v0.0.38,v0.0.37,v0.0.36
SLURM_SANDBOX_PARTITION_DEFAULT="batch"
SLURM_SANDBOX_PARTITION_PREEMPTIBLE=preemptible
SLURM_SANDBOX_PARTITION_HIGH=high
# A second node (a second slurmd on this machine) with partitions of its own, for tests that need
# a node to themselves: preemption, a node failure. Nothing else is submitted there.
SLURM_SANDBOX_ISOLATED_CPUS=${SANDBOX_SLURM_ISOLATED_CPUS:-8}
SLURM_SANDBOX_ISOLATED_SLURMD_PORT=${SANDBOX_ISOLATED_SLURMD_PORT:-6819}
SLURM_SANDBOX_PARTITION_ISOLATED=isolated
SLURM_SANDBOX_PARTITION_ISOLATED_PREEMPTIBLE=isolated-preemptible
SLURM_SANDBOX_PARTITION_ISOLATED_HIGH=isolated-high
SLURM_SANDBOX_ETC_SLURM_CONF=/etc/slurm/slurm.conf
SLURM_SANDBOX_MARKER=.pathways-slurm-sandbox
# One per machine, like the ports: which state dirs host sandboxes ran from (so that one left by a
# deleted checkout is still found), the munged the sandbox started, locks. Emptied at boot (/run), as
# the processes it describes are.
SANDBOX_RUN_DIR=${PATHWAYS_SANDBOX_RUN_DIR:-/run/pathways-sandbox}
SANDBOX_HOST_STATES=$SANDBOX_RUN_DIR/slurm-host-states
SANDBOX_MUNGE_MARKER=$SANDBOX_RUN_DIR/munged.started-by-sandbox

log() { printf '[slurm-sandbox] %s\n' "$*" >&2; }
die() {
	printf '[slurm-sandbox] ERROR: %s\n' "$*" >&2
	exit 1
}

# Resolve the state directory to an absolute, physical path (creating it).
sandbox_resolve_state_dir() {
	local dir=${SANDBOX_STATE_DIR:-$SANDBOX_REPO_ROOT/.sandbox/slurm}
	mkdir -p -- "$dir"
	dir=$(cd -- "$dir" && pwd -P)
	# The path goes into slurm.conf and sshd_config, which have no quoting for odd characters.
	[[ $dir =~ ^/[A-Za-z0-9._/+-]+$ ]] ||
		die "state dir '$dir' must contain only letters, digits and ._/+- (set SANDBOX_STATE_DIR)"
	STATE=$dir
}

sandbox_check_settings() {
	local name
	for name in SLURM_SANDBOX_CPUS SLURM_SANDBOX_REAL_MEMORY SLURM_SANDBOX_CTLD_PORT SLURM_SANDBOX_SLURMD_PORT \
		SLURM_SANDBOX_REST_PORT SLURM_SANDBOX_SSH_PORT SLURM_SANDBOX_JWT_LIFESPAN SLURM_SANDBOX_TIMEOUT \
		SLURM_SANDBOX_ISOLATED_CPUS SLURM_SANDBOX_ISOLATED_SLURMD_PORT; do
		[[ ${!name} =~ ^[1-9][0-9]{0,6}$ ]] || die "$name must be a positive integer, got '${!name}'"
	done
	for name in SLURM_SANDBOX_USER SLURM_SANDBOX_REST_SYSUSER SLURM_SANDBOX_CLUSTER_NAME; do
		[[ $name == SLURM_SANDBOX_USER && -z ${!name} ]] && continue
		[[ ${!name} =~ ^[a-z_][a-z0-9_-]{0,30}$ ]] || die "$name must be a plain lower-case name, got '${!name}'"
	done
}

# sandbox_cluster_user: this checkout's cluster user and what is its own, from this checkout's state
# dir STATE (before STATE may name a shared cluster's): pathways-<8 hex digits of STATE> unless
# SANDBOX_SLURM_USER names one. As each developer on a real cluster has an account, each checkout has
# its user: checkouts sharing a cluster keep their jobs, ~/pathways/cluster.env (one Pathways service
# per user), JWT, SSH key and known_hosts apart. Its home lies in this checkout's state dir.
sandbox_cluster_user() {
	if [[ -z $SLURM_SANDBOX_USER ]]; then
		SLURM_SANDBOX_USER=pathways-$(printf '%s' "$STATE" | sha256sum | cut -c1-8)
	fi
	USER_HOME=${SANDBOX_SLURM_USER_HOME:-$STATE/home/$SLURM_SANDBOX_USER}
	SCRIPTS_DIR=$USER_HOME/pathways/bin
	sandbox_user_files "$STATE"
}

# sandbox_user_files DIR: where this checkout keeps the cluster user's own files for the cluster whose
# settings go to DIR (its own state dir of that cluster, whether it started the cluster or shares it).
sandbox_user_files() {
	OWN_STATE=$1
	TOKEN_FILE=$OWN_STATE/jwt/$SLURM_SANDBOX_USER.token
	CLIENT_KEY=$OWN_STATE/ssh/id_ed25519
	KNOWN_HOSTS=$OWN_STATE/ssh/known_hosts
}

# Paths derived from STATE (the cluster's: this checkout's, or the one it shares).
sandbox_paths() {
	ETC=$STATE/etc
	RUN=$STATE/run
	LOGS=$STATE/log
	SPOOL=$STATE/spool
	SSHDIR=$STATE/ssh
	JWTDIR=$STATE/jwt
	SLURM_CONF_FILE=$ETC/slurm.conf
	JWT_KEY=$ETC/jwt_hs256.key
	NODE_NAME=$(hostname -s)
	[[ $NODE_NAME =~ ^[A-Za-z0-9][A-Za-z0-9-]*$ ]] || die "unsupported host name '$NODE_NAME'"
	ISOLATED_NODE=$NODE_NAME-isolated
	CTLD_PID=$RUN/slurmctld.pid
	# One slurmd per node (SlurmdPidFile=$RUN/slurmd-%n.pid); slurmd.pid is an older layout's.
	SLURMD_PID=$RUN/slurmd-$NODE_NAME.pid
	ISOLATED_SLURMD_PID=$RUN/slurmd-$ISOLATED_NODE.pid
	LEGACY_SLURMD_PID=$RUN/slurmd.pid
	REST_PID=$RUN/slurmrestd.pid
	SSHD_PID=$RUN/sshd.pid
	SSHD_CONFIG=$SSHDIR/sshd_config
	HOST_KEY=$SSHDIR/ssh_host_ed25519_key
	AUTH_KEYS_DIR=$SSHDIR/authorized_keys
	MUNGE_MARKER=$RUN/munged.started-by-sandbox
	export SLURM_CONF=$SLURM_CONF_FILE
}

# pid_of FILE COMM [CMDLINE_SUBSTRING]: print the pid in FILE if that process is alive, is
# named COMM and (optionally) has CMDLINE_SUBSTRING in its command line. Stale pid files
# (the pid reused by another process after a reboot or machine reuse) yield nothing.
pid_of() {
	local file=$1 comm=$2 needle=${3:-} pid
	[[ -r $file ]] || return 1
	pid=$(tr -dc '0-9' <"$file")
	[[ -n $pid && -r /proc/$pid/comm ]] || return 1
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
	# A killed daemon may linger as a zombie when PID 1 does not reap (containers, sandboxes).
	grep -q '^State:[[:space:]]*[ZX]' "/proc/$pid/status" 2>/dev/null && return 1
	if [[ -n $needle ]]; then
		local cmdline
		cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
		[[ $cmdline == *"$needle"* ]] || return 1
	fi
	printf '%s\n' "$pid"
}

# alive PID: the process exists and is not a zombie.
alive() {
	kill -0 "$1" 2>/dev/null && ! grep -q '^State:[[:space:]]*[ZX]' "/proc/$1/status" 2>/dev/null
}

# stop_pid PID NAME: SIGTERM, wait up to 15 s, then SIGKILL.
stop_pid() {
	local pid=$1 name=$2 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 150; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
}

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# wait_all_gone SECONDS PID...: wait until none of the processes runs; false at the deadline.
wait_all_gone() {
	local end=$((SECONDS + $1)) pid
	shift
	while :; do
		for pid in "$@"; do
			alive "$pid" && break
			pid=
		done
		[[ -z $pid ]] && return 0
		((SECONDS < end)) || return 1
		sleep 0.1
	done
}

# stop_pids NAME PID...: SIGTERM them all, SIGKILL what still runs after 15 s.
stop_pids() {
	local name=$1 pid
	shift
	(($#)) || return 0
	kill -TERM "$@" 2>/dev/null || true
	wait_all_gone 15 "$@" && return 0
	for pid in "$@"; do
		if alive "$pid"; then
			log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	wait_all_gone 5 "$@" || log "$name: pids $* still there after SIGKILL"
}

# sandbox_slurm_conf GENERATOR CLUSTER CTLD_PORT SLURMD_PORT ISOLATED_SLURMD_PORT MIN_JOB_AGE ACCOUNTING:
# the slurm.conf of a sandbox cluster on stdout (the host's, up.sh; a chroot's, versions.sh): two
# nodes on this machine, each with the default, preemptible and high partitions. ACCOUNTING holds
# the accounting lines. Reads NODE_NAME, ISOLATED_NODE, JWT_KEY, SPOOL, RUN, LOGS, CTLD_PID and the
# SLURM_SANDBOX_* settings.
sandbox_slurm_conf() {
	local generator=$1 cluster=$2 ctld_port=$3 slurmd_port=$4 isolated_port=$5 min_job_age=$6 accounting=$7
	cat <<EOF
# Generated by $generator -- do not edit (rewritten on every run).
ClusterName=$cluster
SlurmctldHost=$NODE_NAME($SLURM_SANDBOX_HOST)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
StateSaveLocation=$SPOOL/slurmctld
# Two slurmd on this machine, one per node: %n is the node's name.
SlurmdSpoolDir=$SPOOL/slurmd-%n
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# Start batch jobs right at submission (default: up to 3 s later) and rescan pending jobs often.
SchedulerParameters=batch_sched_delay=0,sched_interval=5,bf_interval=5
$accounting
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.log
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
JobRequeue=1
MinJobAge=$min_job_age
MaxJobCount=100000
KillWait=5
SlurmdTimeout=20
SlurmctldTimeout=30
InactiveLimit=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmdParameters=config_overrides
NodeName=$NODE_NAME NodeAddr=$SLURM_SANDBOX_HOST NodeHostname=$NODE_NAME CPUs=$SLURM_SANDBOX_CPUS RealMemory=$SLURM_SANDBOX_REAL_MEMORY State=UNKNOWN
PartitionName=$SLURM_SANDBOX_PARTITION_DEFAULT Nodes=$NODE_NAME Default=YES PriorityTier=1 MaxTime=INFINITE State=UP
PartitionName=$SLURM_SANDBOX_PARTITION_PREEMPTIBLE Nodes=$NODE_NAME PriorityTier=1 PreemptMode=CANCEL MaxTime=INFINITE State=UP
PartitionName=$SLURM_SANDBOX_PARTITION_HIGH Nodes=$NODE_NAME PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
# The isolated node: the same three tiers, for tests that need a node to themselves.
NodeName=$ISOLATED_NODE NodeAddr=$SLURM_SANDBOX_HOST NodeHostname=$NODE_NAME Port=$isolated_port CPUs=$SLURM_SANDBOX_ISOLATED_CPUS RealMemory=$SLURM_SANDBOX_REAL_MEMORY State=UNKNOWN
PartitionName=$SLURM_SANDBOX_PARTITION_ISOLATED Nodes=$ISOLATED_NODE PriorityTier=1 MaxTime=INFINITE State=UP
PartitionName=$SLURM_SANDBOX_PARTITION_ISOLATED_PREEMPTIBLE Nodes=$ISOLATED_NODE PriorityTier=1 PreemptMode=CANCEL MaxTime=INFINITE State=UP
PartitionName=$SLURM_SANDBOX_PARTITION_ISOLATED_HIGH Nodes=$ISOLATED_NODE PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
EOF
}

# sandbox_record_host_state DIR: remember (machine-wide) that a host sandbox runs from DIR.
sandbox_record_host_state() {
	mkdir -p -- "$SANDBOX_RUN_DIR"
	grep -qxF -- "$1" "$SANDBOX_HOST_STATES" 2>/dev/null || printf '%s\n' "$1" >>"$SANDBOX_HOST_STATES"
}

# sandbox_prune_host_states: forget recorded state dirs that are gone and run nothing any more.
sandbox_prune_host_states() {
	[[ -r $SANDBOX_HOST_STATES ]] || return 0
	local dir
	while read -r dir; do
		if [[ -d $dir || -n $(sandbox_host_processes "$dir") ]]; then printf '%s\n' "$dir"; fi
	done <"$SANDBOX_HOST_STATES" >"$SANDBOX_HOST_STATES.new"
	mv -f -- "$SANDBOX_HOST_STATES.new" "$SANDBOX_HOST_STATES"
}

# sandbox_host_state_dirs: every state dir a host sandbox may run from on this machine, whether or
# not it still exists: STATE (if set), the one /etc/slurm/slurm.conf points at, the recorded ones.
sandbox_host_state_dirs() {
	{
		[[ -n ${STATE:-} ]] && printf '%s\n' "$STATE"
		if [[ -L $SLURM_SANDBOX_ETC_SLURM_CONF ]]; then
			dirname -- "$(dirname -- "$(readlink -- "$SLURM_SANDBOX_ETC_SLURM_CONF")")"
		fi
		if [[ -r $SANDBOX_HOST_STATES ]]; then cat -- "$SANDBOX_HOST_STATES"; fi
	} | awk 'NF && !seen[$0]++'
}

# sandbox_host_processes DIR: "NAME PID" of every process of the host sandbox that ran from DIR, also
# when DIR is gone: its daemons (their configuration file, under DIR, is on their command line), job
# steps and job processes (SLURM_CONF=DIR/etc/slurm.conf in their environment, plus a job id for
# jobs), and the SSH sessions of its sshd. Nothing else: a shell that sourced slurm.env has no job id.
sandbox_host_processes() {
	local dir=$1 proc pid comm cmdline sshd=()
	local conf="$dir/etc/slurm.conf" sshd_config="$dir/ssh/sshd_config"
	for proc in /proc/[0-9]*; do
		pid=${proc#/proc/}
		[[ $(readlink "$proc/root" 2>/dev/null) == / ]] || continue
		comm=$(cat "$proc/comm" 2>/dev/null) || continue
		grep -q '^State:[[:space:]]*[ZX]' "$proc/status" 2>/dev/null && continue
		case $comm in
		slurmctld | slurmd | slurmrestd)
			cmdline=$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null) || continue
			[[ " $cmdline" == *" $conf "* ]] && printf '%s %s\n' "$comm" "$pid"
			;;
		sshd)
			cmdline=$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null) || continue
			if [[ " $cmdline" == *" $sshd_config "* ]]; then
				printf '%s %s\n' "$comm" "$pid"
				sshd+=("$pid")
			fi
			;;
		*)
			grep -qzxF -- "SLURM_CONF=$conf" "$proc/environ" 2>/dev/null || continue
			if [[ $comm == slurmstepd ]]; then
				printf '%s %s\n' "$comm" "$pid"
			elif grep -qz '^SLURM_JOB_ID=' "$proc/environ" 2>/dev/null; then
				printf 'job %s\n' "$pid"
			fi
			;;
		esac
	done
	# The sessions of its sshd (privileged and user processes, named "sshd: USER ...").
	if ((${#sshd[@]})); then
		for proc in /proc/[0-9]*; do
			pid=${proc#/proc/}
			[[ $(cat "$proc/comm" 2>/dev/null) == sshd ]] || continue
			local ppid
			ppid=$(awk '{ sub(/.*\) /, ""); print $2 }' "$proc/stat" 2>/dev/null) || continue
			for comm in "${sshd[@]}"; do
				[[ $ppid == "$comm" ]] && printf 'sshd-session %s\n' "$pid"
			done
		done
	fi
	return 0
}

# sandbox_stop_host DIR: stop everything of the host sandbox that ran from DIR (sandbox_host_processes):
# the daemons (slurmrestd and sshd first), then the job steps and jobs that outlive slurmd. Jobs are
# not cancelled here (down.sh cancels its own cluster's while slurmctld answers); slurmstepd ignores
# SIGTERM, so what remains gets SIGKILL.
sandbox_stop_host() {
	local dir=$1 name pid front=() back=() rest=()
	while read -r name pid; do
		case $name in
		slurmrestd | sshd | sshd-session) front+=("$pid") ;;
		slurmctld | slurmd) back+=("$pid") ;;
		esac
	done < <(sandbox_host_processes "$dir")
	if ((${#front[@]} + ${#back[@]})); then
		log "stopping the Slurm sandbox of $dir (pids ${front[*]} ${back[*]})"
	fi
	stop_pids "slurmrestd/sshd" "${front[@]}"
	stop_pids "slurmctld/slurmd" "${back[@]}"
	while read -r name pid; do
		rest+=("$pid")
	done < <(sandbox_host_processes "$dir")
	if ((${#rest[@]})); then
		log "killing what the Slurm sandbox of $dir left running (pids ${rest[*]})"
		kill -KILL "${rest[@]}" 2>/dev/null || true
		wait_all_gone 10 "${rest[@]}" || log "pids ${rest[*]} still there after SIGKILL"
	fi
	if [[ -d $dir/run ]]; then
		rm -f -- "$dir/run/slurmrestd.pid" "$dir/run/sshd.pid" "$dir/run/slurmctld.pid" "$dir/run"/slurmd*.pid
	fi
}

# sandbox_cancel_all_jobs MESSAGE [COMMAND PREFIX...]: cancel every job of the cluster (scancel takes
# one partition only, so by job id), logging MESSAGE if there is any.
sandbox_cancel_all_jobs() {
	local message=$1 ids
	shift
	ids=$("$@" squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ') || true
	[[ -n ${ids// /} ]] || return 0
	log "$message"
	# shellcheck disable=SC2086 # job ids, split on purpose
	"$@" scancel $ids 2>/dev/null || true
}

# ensure_traversable USER PATH [ROOT]: grant o+x on each directory above PATH that USER cannot
# traverse, so that USER reaches PATH; with ROOT, USER and PATH are those inside the chroot ROOT (a
# chroot's own /root is mode 0700 like any, whatever the host's is).
ensure_traversable() {
	local user=$1 path=$2 root=${3:-} dir="" part
	local as_user=(runuser -u "$user" --)
	[[ -n $root ]] && as_user=(chroot "$root" runuser -u "$user" --)
	"${as_user[@]}" test -x "$path" && return 0
	local IFS=/
	for part in $path; do
		[[ -n $part ]] || continue
		dir=$dir/$part
		if ! "${as_user[@]}" test -x "$dir"; then
			log "granting traverse permission (o+x) on $root$dir so that $user can reach $path"
			chmod o+x -- "$root$dir"
		fi
	done
}

# sandbox_port_holder PORT: who listens on PORT (for error messages).
sandbox_port_holder() {
	if command -v ss >/dev/null; then
		ss -Hltnp "sport = :$1" 2>/dev/null | sed -nE 's/.*users:\(\((.*)\)\).*/\1/p' | head -n 1
	fi
}

# ---------------------------------------------------------------------------------------------
# Further Slurm versions, each a whole one-node cluster in its own Debian chroot (versions.sh).
# ---------------------------------------------------------------------------------------------

# Versions besides the host's 22.05 (Debian 12), oldest first.
SLURM_SANDBOX_CHROOT_VERSIONS=(24.11 26.05)
# Built chroots live outside the repository, one per version, shared by every checkout.
SLURM_SANDBOX_CHROOT_BASE=${SANDBOX_CHROOT_DIR:-/var/lib/pathways-slurm-sandbox}

# sandbox_version_settings VERSION: the Debian suite, ports and features of one chroot cluster.
#   V_SUITE, V_SCRIPT (debootstrap's suite script), V_CTLD_PORT, V_SLURMD_PORT (and
#   V_ISOLATED_SLURMD_PORT, the isolated node's), V_DBD_PORT, V_REST_PORT, V_SSH_PORT, V_ACCOUNTING
#   (1: slurmdbd + MariaDB), V_MIN_JOB_AGE, V_CLUSTER, V_ROOT (the chroot), V_STATE (state dir,
#   bound into the chroot at the same path).
sandbox_version_settings() {
	case $1 in
	24.11)
		# Debian 13 "trixie": Slurm 24.11.5, slurmrestd v0.0.40-v0.0.42.
		V_SUITE=trixie V_SCRIPT=trixie
		V_CTLD_PORT=6827 V_SLURMD_PORT=6828 V_DBD_PORT=6829 V_REST_PORT=6830 V_SSH_PORT=2232
		V_ISOLATED_SLURMD_PORT=6831
		V_ACCOUNTING=1
		V_MIN_JOB_AGE=${SANDBOX_MIN_JOB_AGE:-10}
		;;
	26.05)
		# Debian "forky": Slurm 26.05.5, slurmrestd v0.0.42-v0.0.45. Debian 12's debootstrap has no
		# forky script; its sid script fits.
		V_SUITE=forky V_SCRIPT=sid
		V_CTLD_PORT=6837 V_SLURMD_PORT=6838 V_DBD_PORT=6839 V_REST_PORT=6840 V_SSH_PORT=2242
		V_ISOLATED_SLURMD_PORT=6841
		V_ACCOUNTING=0
		V_MIN_JOB_AGE=${SANDBOX_MIN_JOB_AGE:-30}
		;;
	*) die "unknown Slurm version '$1' (known: 22.05 on the host, ${SLURM_SANDBOX_CHROOT_VERSIONS[*]})" ;;
	esac
	# V_MIN_JOB_AGE: finished jobs leave slurmctld after MinJobAge (production default 300 s); short
	# here so that tests meet purged jobs: 10 s where accounting remembers them, 30 s where nothing
	# does (pollers must see a job's end before it is gone).
	V_CLUSTER=pathways-${1//./}
	V_ROOT=$SLURM_SANDBOX_CHROOT_BASE/$1/root
	V_STATE=${SANDBOX_VERSION_STATE_DIR:-$SANDBOX_REPO_ROOT/.sandbox}/slurm-$1
}

# The Debian mirror apt already uses (deb822 URIs: or one-line "deb URL suite" entries).
sandbox_debian_mirror() {
	if [[ -n ${SANDBOX_DEBIAN_MIRROR:-} ]]; then
		printf '%s\n' "$SANDBOX_DEBIAN_MIRROR"
		return
	fi
	local file url
	for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -r $file ]] || continue
		url=$(sed -nE -e 's/^[[:space:]]*URIs:[[:space:]]*([^[:space:]]+).*/\1/p' \
			-e 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p' "$file" |
			grep -E '/debian/?$' | head -n 1) || true
		if [[ -n $url ]]; then
			printf '%s\n' "${url%/}"
			return
		fi
	done
	printf '%s\n' http://deb.debian.org/debian
}

# sandbox_chroot_processes ROOT: a process runs inside ROOT.
sandbox_chroot_processes() {
	local root=$1 link
	for link in /proc/[0-9]*/root; do
		[[ $(readlink "$link" 2>/dev/null) == "$root" ]] && return 0
	done
	return 1
}

# sandbox_chroot_busy ROOT: something is mounted below ROOT or a process runs inside it.
sandbox_chroot_busy() {
	local root=$1
	[[ -d $root ]] || return 1
	awk -v r="$root/" 'index($2 "/", r) == 1 { found = 1 } END { exit !found }' /proc/self/mounts && return 0
	sandbox_chroot_processes "$root"
}
