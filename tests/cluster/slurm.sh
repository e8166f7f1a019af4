#!/bin/sh
# A real Slurm on an emulated cluster: H hosts as network namespaces on a bridge (as in
# tests/cluster/cluster.sh, through tests/cluster/netns_lib.sh), one slurmd per host, and a
# controller namespace "ctl" running munged and slurmctld, from which the command runs.
#
#   tests/cluster/slurm.sh --hosts 4 [--cpus 2] [--rate 200mbit] [--timeout 300]
#       [--subnet 10.214.0] [--prefix NAME] [--logs DIR] [--keep]
#       -- srun -N 4 --ntasks-per-node 2 prog args...
#   tests/cluster/slurm.sh --clean [--prefix NAME]
#
# Host h (0-based) is namespace NAME-host<h> with interface vhost<h>, address
# <subnet>.<h+1>/24 and host name host<h> (a UTS namespace); it is Slurm node host<h> with
# --cpus CPUs (2 by default, enough for --ntasks-per-node 2), NodeAddr its address, in
# the one partition "emu". The controller is NAME-ctl, host name ctl, <subnet>.254.
# --rate caps every link both ways with tbf, as cluster.sh's --rate. Every name resolves
# in every namespace through /etc/netns/<ns>/hosts (what `ip netns exec` shows as
# /etc/hosts); the machine's /etc/hosts is not touched. munged runs with a fresh
# key and its own socket; slurm.conf (proctrack/linuxproc, task/none, no cgroup limits,
# select/cons_tres, MpiDefault=none), the daemons' state, spools and logs live in the run's
# private directory /run/chorus-cluster/NAME. The command runs in NAME-ctl (host name ctl),
# in the current directory, with SLURM_CONF set and every CHORUS_*, MASTER_*, RANK,
# WORLD_SIZE, LOCAL_*, OMPI_*, PMI*_ and SLURM_* variable of the caller unset; `srun
# --mpi=pmix` works where the mpi/pmix plugin is installed (Debian's slurm-wlm has it).
# --logs DIR copies slurm.conf and the daemons' logs there before the teardown. --keep
# leaves the cluster up after the command (or without one) and prints how to use it;
# --clean --prefix NAME removes it.
#
# Needs slurmctld, slurmd, srun (slurm-client) and munged: apt-get install -y slurmd
# slurmctld slurm-client munge. Exit status: the command's; 124 on --timeout; 1 when the
# cluster does not come up (the daemons' last log lines are printed); 2 on a usage error;
# 77 ("skipped: <reason>") without root, namespaces or the packages. The daemons,
# namespaces and /etc/netns files are removed on any exit, Ctrl-C included; those of a
# run that was killed (SIGKILL) are removed by the next run, which finds its owner dead.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns_lib.sh"

HOSTS=""
CPUS=2
TIMEOUT=300
RATE=""
SUBNET=10.214.0
PREFIX=""
LOGS=""
KEEP=0
CLEAN=0

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
die() { echo "slurm: $*" >&2; exit 2; }
is_uint() { case "$1" in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

while [ $# -gt 0 ]; do
    case "$1" in
    --hosts | --cpus | --timeout | --subnet | --prefix | --logs | --rate)
        [ $# -ge 2 ] || die "$1 needs a value" ;;
    esac
    case "$1" in
    --hosts) HOSTS=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --subnet) SUBNET=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --clean) CLEAN=1; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    *) echo "slurm: unknown option '$1'" >&2; usage ;;
    esac
done

[ -n "$PREFIX" ] || PREFIX="chs$$"
SUBNET_EXAMPLE=10.214.0
nl_options_done slurm $#
is_uint "$CPUS" && [ "$CPUS" -ge 1 ] && [ "$CPUS" -le 256 ] || die "--cpus must be 1..256"
for tool in slurmctld slurmd srun sinfo scontrol munged munge unmunge; do
    command -v "$tool" >/dev/null 2>&1 ||
        nl_skip "'$tool' not installed (apt-get install -y slurmd slurmctld slurm-client munge)"
done

nl_claim "$PREFIX"
ST=$NL_DIR
CONF="$ST/slurm.conf"
SOCK="$ST/munge/sock"
CTL_ADDR="$SUBNET.254"

# Copies the configuration and the logs to --logs DIR.
save_logs() {
    [ -n "$LOGS" ] || return 0
    mkdir -p "$LOGS" && cp "$CONF" "$ST"/log/* "$LOGS"/ 2>/dev/null
}
# The last lines of every daemon's log, when the cluster does not come up.
show_logs() {
    for f in "$ST"/log/*; do
        [ -s "$f" ] || continue
        echo "--- $(basename "$f") (last 15 lines)" >&2
        tail -n 15 "$f" >&2
    done
    if [ -f "$CONF" ]; then
        echo "--- sinfo" >&2
        in_ctl sinfo -N -o '%N %T %E' >&2 2>&1
    fi
}
cleanup() {
    trap '' INT TERM
    save_logs
    if [ "$KEEP" -eq 1 ]; then
        nl_keep "$PREFIX"
        echo "slurm: kept up (prefix $PREFIX): ip netns exec $PREFIX-ctl env" \
            "SLURM_CONF=$CONF sinfo; remove with: $0 --clean --prefix $PREFIX" >&2
    else
        nl_teardown "$PREFIX"
        wait 2>/dev/null
    fi
}
trap 'rc=$?; cleanup; exit $rc' EXIT
trap 'echo "slurm: interrupted" >&2; exit 130' INT
trap 'echo "slurm: terminated" >&2; exit 143' TERM

# ---- Namespaces and names ----

NAMES="ctl"
h=0
while [ "$h" -lt "$HOSTS" ]; do NAMES="$NAMES host$h"; h=$((h + 1)); done
addr_of() { if [ "$1" = ctl ]; then echo "$CTL_ADDR"; else echo "$SUBNET.$((${1#host} + 1))"; fi; }

nl_switch "$PREFIX"
case $? in 0) ;; 77) nl_skip "cannot create network namespaces" ;; *) exit 1 ;; esac
for n in $NAMES; do
    nl_node "$PREFIX" "$n" "$(addr_of "$n")" "$RATE" ||
        { echo "slurm: cannot make $n" >&2; exit 1; }
done
for n in $NAMES; do echo "$(addr_of "$n") $n"; done | nl_hosts "$PREFIX" "$NAMES" ||
    { echo "slurm: cannot write /etc/netns" >&2; exit 1; }

# ---- munge ----

mkdir -p "$ST/munge" "$ST/log" "$ST/ctld" "$ST/spool" "$ST/run" "$ST/tmp" || exit 1
# munged wants its socket's directories searchable by all; the key stays private.
chmod 711 "$ST" "$ST/munge"
dd if=/dev/urandom of="$ST/munge/key" bs=1024 count=1 2>/dev/null && chmod 400 "$ST/munge/key" ||
    { echo "slurm: cannot make a munge key" >&2; exit 1; }
nl_in "$PREFIX" ctl munged -F -f --socket="$SOCK" --key-file="$ST/munge/key" \
    --pid-file="$ST/munge/pid" --log-file="$ST/log/munged.log" \
    --seed-file="$ST/munge/seed" </dev/null >>"$ST/log/munged.log" 2>&1 &

# waitfor SECONDS WHAT cmd...: polls cmd (quiet itself) until it succeeds.
waitfor() {
    _t=$(($1 * 10)) _what=$2
    shift 2
    while ! "$@"; do
        _t=$((_t - 1))
        if [ "$_t" -le 0 ]; then
            echo "slurm: $_what did not come up" >&2
            show_logs
            exit 1
        fi
        sleep 0.1
    done
}
munge_ok() { munge -S "$SOCK" -n 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1; }
waitfor 20 munged munge_ok

# ---- slurm.conf ----

{
    cat <<EOF
# Generated by tests/cluster/slurm.sh for run $PREFIX.
ClusterName=chorus$PREFIX
SlurmctldHost=ctl($CTL_ADDR)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$ST/ctld
SlurmctldPidFile=$ST/run/slurmctld.pid
SlurmctldLogFile=$ST/log/slurmctld.log
SlurmdSpoolDir=$ST/spool/%n
SlurmdPidFile=$ST/run/slurmd.%n.pid
SlurmdLogFile=$ST/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=60
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=60
KillWait=5
MessageTimeout=20
TmpFS=$ST/tmp
MailProg=/bin/true
PlugStackConfig=$ST/plugstack.conf
EOF
    for n in $NAMES; do
        [ "$n" = ctl ] && continue
        echo "NodeName=$n NodeAddr=$(addr_of "$n") CPUs=$CPUS RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=emu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} >"$CONF" || exit 1
: >"$ST/plugstack.conf"
printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' >"$ST/cgroup.conf"
export SLURM_CONF="$CONF"

# ---- Daemons ----

in_ctl() { nl_in "$PREFIX" ctl "$@"; }
in_ctl slurmctld -D -i -f "$CONF" </dev/null >>"$ST/log/slurmctld.out" 2>&1 &
ctld_up() { in_ctl scontrol ping 2>/dev/null | grep -q 'is UP'; }
waitfor 30 slurmctld ctld_up

# slurmd 22.05 always loads a cgroup plugin, even with proctrack/linuxproc and task/none,
# and fails without a cgroup file system on /sys/fs/cgroup ("error: No filesystem mounted
# on /sys/fs/cgroup", "error: Unable to initialize cgroup plugin"), which `ip netns exec`
# hides by mounting a fresh /sys. Each slurmd gets, in its own mount namespace, a tmpfs
# there with the named v1 hierarchy "systemd" that cgroup/v1 looks for; nothing is limited.
# TmpFS is every node's own (a bind of tmp.<node> over tmp): mpi/pmix names its directory
# there spmix_appdir_<uid>_<job>.<step>, the same on every node of a step, and fails on the
# second node with "pmixp_mkdir: Cannot create directory ...: File exists" when shared.
SLURMD_PIDS=""
for n in $NAMES; do
    [ "$n" = ctl ] && continue
    mkdir -p "$ST/spool/$n"
    mkdir -p "$ST/tmp.$n"
    nl_in "$PREFIX" "$n" sh -c 'mount -t tmpfs cgroup_root /sys/fs/cgroup &&
        mkdir /sys/fs/cgroup/systemd &&
        mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd &&
        mount --bind "$3" "$4" &&
        exec slurmd -D -f "$1" -N "$2"' sh "$CONF" "$n" "$ST/tmp.$n" "$ST/tmp" \
        </dev/null >>"$ST/log/slurmd.$n.out" 2>&1 &
    SLURMD_PIDS="$SLURMD_PIDS $!"
done
# Every node idle (its slurmd registered with slurmctld); fails at once when one died.
nodes_idle() {
    for p in $SLURMD_PIDS; do
        kill -0 "$p" 2>/dev/null || { echo "slurm: a slurmd exited" >&2; show_logs; exit 1; }
    done
    [ "$(in_ctl sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" -eq "$HOSTS" ]
}
waitfor 60 "every slurmd" nodes_idle
echo "slurm: $HOSTS nodes host0..host$((HOSTS - 1)) x $CPUS CPUs, controller ctl" \
    "($CTL_ADDR), namespaces $PREFIX-*, state $ST" >&2

[ $# -gt 0 ] || exit 0

# ---- Run ----

nl_clean_env
export SLURM_CONF="$CONF"
# In the background, so that a signal to this script runs its trap at once (a shell defers
# traps until a foreground command ends, and timeout's own process group does not get the
# terminal's Ctrl-C).
timeout -k 10 "$TIMEOUT" ip netns exec "$PREFIX-ctl" unshare --uts \
    sh -c 'hostname ctl && exec "$@"' sh "$@" </dev/null &
wait $!
status=$?
[ "$status" -eq 124 ] && echo "slurm: timed out after $TIMEOUT s; stopping" >&2
exit "$status"
