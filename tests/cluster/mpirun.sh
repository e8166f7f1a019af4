#!/bin/sh
# Open MPI's mpirun on an emulated cluster: H hosts as network namespaces on a bridge (as
# in tests/cluster/cluster.sh, through tests/cluster/netns_lib.sh); mpirun runs on host0
# and starts its orted on the other hosts through an rsh agent that enters their namespace,
# as ssh would log in to them.
#
#   tests/cluster/mpirun.sh --hosts 4 [--slots 2] [--rate 200mbit] [--timeout 300]
#       [--subnet 10.215.0] [--prefix NAME] [--keep] -- mpirun -np 8 prog args...
#   tests/cluster/mpirun.sh --clean [--prefix NAME]
#
# Host h (0-based) is namespace NAME-host<h> with interface vhost<h>, address
# <subnet>.<h+1>/24 and host name host<h> (a UTS namespace); --rate caps every link both
# ways with tbf, as cluster.sh's --rate. Every name resolves in every namespace through
# /etc/netns/<ns>/hosts (the machine's /etc/hosts is not touched). The command runs in
# NAME-host0 (host name host0), in the current directory, with every
# CHORUS_*, MASTER_*, RANK, WORLD_SIZE, LOCAL_*, OMPI_*, PMI*_ and SLURM_* variable of the
# caller unset, and then, so that a plain `mpirun -np N prog` spans the hosts:
#
#   OMPI_MCA_orte_default_hostfile  a hostfile "host<h> slots=<--slots>" (also in
#                                   $CLUSTER_HOSTFILE)
#   OMPI_MCA_plm_rsh_agent          the agent: "agent [ssh options] [user@]host<h> words..."
#                                   runs the words joined by spaces through sh (as ssh
#                                   does) in NAME-host<h> with host name host<h>, in a
#                                   login-like environment (HOME, PATH, USER, LOGNAME,
#                                   SHELL, LANG and the two OMPI_ALLOW_RUN_AS_ROOT*), so
#                                   ranks on host1.. get from the caller only what mpirun
#                                   passes (-x, MCA parameters); those on host0 inherit
#                                   mpirun's environment, as on a real cluster
#   OMPI_MCA_plm_rsh_no_tree_spawn  1 (mpirun starts every orted itself)
#   OMPI_MCA_orte_tmpdir_base       the run's directory (session directories, removed
#                                   with the run even when it is killed)
#   OMPI_MCA_oob_tcp_if_include, OMPI_MCA_btl_tcp_if_include   <subnet>.0/24 (the veths)
#   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
#
# Exit status: the command's; 124 on --timeout; 2 on a usage error; 77 ("skipped:
# <reason>") without root, namespaces or mpirun. The namespaces, every process in them and
# the /etc/netns files are removed on any exit, Ctrl-C included; those of a run that was
# killed (SIGKILL) are removed by the next run. --keep leaves them up (--clean removes).
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns_lib.sh"

HOSTS=""
SLOTS=2
TIMEOUT=300
RATE=""
SUBNET=10.215.0
PREFIX=""
KEEP=0
CLEAN=0

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
die() { echo "mpirun.sh: $*" >&2; exit 2; }
is_uint() { case "$1" in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

while [ $# -gt 0 ]; do
    case "$1" in
    --hosts | --slots | --timeout | --subnet | --prefix | --rate)
        [ $# -ge 2 ] || die "$1 needs a value" ;;
    esac
    case "$1" in
    --hosts) HOSTS=$2; shift 2 ;;
    --slots) SLOTS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --subnet) SUBNET=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --clean) CLEAN=1; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    *) echo "mpirun.sh: unknown option '$1'" >&2; usage ;;
    esac
done

[ -n "$PREFIX" ] || PREFIX="chm$$"
SUBNET_EXAMPLE=10.215.0
nl_options_done mpirun.sh $#
is_uint "$SLOTS" && [ "$SLOTS" -ge 1 ] && [ "$SLOTS" -le 256 ] || die "--slots must be 1..256"
command -v mpirun >/dev/null 2>&1 || nl_skip "mpirun not installed (apt-get install openmpi-bin)"

nl_claim "$PREFIX"
ST=$NL_DIR
chmod 711 "$ST"

cleanup() {
    trap '' INT TERM
    if [ "$KEEP" -eq 1 ]; then
        nl_keep "$PREFIX"
        echo "mpirun.sh: kept up (prefix $PREFIX): a shell on host0:" \
            "ip netns exec $PREFIX-host0 unshare --uts sh -c 'hostname host0; exec sh'," \
            "then mpirun --hostfile $ST/hostfile --mca plm_rsh_agent $ST/agent" \
            "(and OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1);" \
            "remove with: $0 --clean --prefix $PREFIX" >&2
    else
        nl_teardown "$PREFIX"
        wait 2>/dev/null
    fi
}
trap 'rc=$?; cleanup; exit $rc' EXIT
trap 'echo "mpirun.sh: interrupted" >&2; exit 130' INT
trap 'echo "mpirun.sh: terminated" >&2; exit 143' TERM

# ---- Namespaces, names, hostfile, agent ----

NAMES=""
h=0
while [ "$h" -lt "$HOSTS" ]; do NAMES="$NAMES host$h"; h=$((h + 1)); done
addr_of() { echo "$SUBNET.$((${1#host} + 1))"; }

nl_switch "$PREFIX"
case $? in 0) ;; 77) nl_skip "cannot create network namespaces" ;; *) exit 1 ;; esac
for n in $NAMES; do
    nl_node "$PREFIX" "$n" "$(addr_of "$n")" "$RATE" ||
        { echo "mpirun.sh: cannot make $n" >&2; exit 1; }
done
for n in $NAMES; do echo "$(addr_of "$n") $n"; done | nl_hosts "$PREFIX" "$NAMES" ||
    { echo "mpirun.sh: cannot write /etc/netns" >&2; exit 1; }

for n in $NAMES; do echo "$n slots=$SLOTS"; done >"$ST/hostfile" || exit 1
mkdir -p "$ST/tmp" && chmod 1777 "$ST/tmp" || exit 1

cat >"$ST/agent" <<EOF || exit 1
#!/bin/sh
# The rsh agent of tests/cluster/mpirun.sh run $PREFIX: "agent [ssh options] [user@]HOST
# words..." runs the words, joined by spaces as ssh joins them, through sh in HOST's
# namespace $PREFIX-HOST with HOST as host name and a login-like environment.
while [ \$# -gt 0 ]; do
    case "\$1" in
    -[bcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
done
[ \$# -ge 2 ] || { echo "agent: usage: agent [options] host command..." >&2; exit 255; }
host=\${1#*@}
shift
case "\$host" in
host[0-9]*) ;;
*) echo "agent: unknown host '\$host'" >&2; exit 255 ;;
esac
exec ip netns exec "$PREFIX-\$host" unshare --uts sh -c 'hostname "\$1" && shift &&
    exec env -i HOME="\$HOME" PATH="\$PATH" USER=root LOGNAME=root SHELL=/bin/sh LANG=C.UTF-8 \\
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 sh -c "\$*"' sh "\$host" "\$@"
EOF
chmod 755 "$ST/agent"

echo "mpirun.sh: $HOSTS hosts host0..host$((HOSTS - 1)) x $SLOTS slots, namespaces" \
    "$PREFIX-*, $SUBNET.0/24, mpirun on host0" >&2

[ $# -gt 0 ] || exit 0

# ---- Run ----

nl_clean_env
export CLUSTER_HOSTFILE="$ST/hostfile"
export OMPI_MCA_orte_default_hostfile="$ST/hostfile"
export OMPI_MCA_plm_rsh_agent="$ST/agent"
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_orte_tmpdir_base="$ST/tmp"
export OMPI_MCA_oob_tcp_if_include="$SUBNET.0/24"
export OMPI_MCA_btl_tcp_if_include="$SUBNET.0/24"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# In the background, so that a signal to this script runs its trap at once (a shell defers
# traps until a foreground command ends, and timeout's own process group does not get the
# terminal's Ctrl-C).
timeout -k 10 "$TIMEOUT" ip netns exec "$PREFIX-host0" unshare --uts \
    sh -c 'hostname host0 && exec "$@"' sh "$@" </dev/null &
wait $!
status=$?
[ "$status" -eq 124 ] && echo "mpirun.sh: timed out after $TIMEOUT s; stopping" >&2
exit "$status"
