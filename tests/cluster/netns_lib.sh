# Sourced (". tests/cluster/netns_lib.sh"), not run: the namespace plumbing of the emulated
# clusters that start real daemons (tests/cluster/slurm.sh, tests/cluster/mpirun.sh).
#
#   nl_check_tools                 skips (77) unless root with ip, unshare and hostname
#   nl_claim PREFIX                removes dead runs' leftovers, makes the run's private
#                                  state directory NL_DIR=$NL_STATE_ROOT/PREFIX (mode 700)
#   nl_keep PREFIX                 marks the run as left up on purpose (--keep)
#   nl_switch PREFIX               the switch namespace PREFIX-sw with bridge br0
#   nl_node PREFIX NAME ADDR [RATE]  namespace PREFIX-NAME with veth vNAME at ADDR/24 on
#                                  br0, capped at RATE (tc tbf, e.g. 200mbit) both ways
#   nl_hosts PREFIX "NAME..." <"ADDR NAME" lines   /etc/netns/PREFIX-NAME/hosts of each
#                                  node: what `ip netns exec` shows as /etc/hosts
#   nl_in PREFIX NAME cmd...       runs cmd in namespace PREFIX-NAME with host name NAME
#   nl_clean_env                   unsets every launcher and rendezvous variable
#   nl_options_done TOOL NARGS     after option parsing: checks PREFIX, runs --clean
#                                  (CLEAN=1: tears PREFIX down and exits), checks that a
#                                  command was given (NARGS) unless KEEP=1, and HOSTS,
#                                  TIMEOUT, SUBNET and RATE; errors exit 2 naming TOOL
#   nl_teardown PREFIX             kills every process in the run's namespaces, deletes
#                                  them, its /etc/netns files and its state directory
#
# Like tests/cluster/cluster.sh (same layout: PREFIX-sw holds br0 and the peers vs<NAME>),
# everything runs inside namespaces, so killing the processes of PREFIX-* ends every
# daemon and job step of a run, and the machine's own network and /etc/hosts are never
# touched. $NL_STATE_ROOT/PREFIX/owner holds the pid of the script that owns a run; a later
# nl_claim tears down runs whose owner is dead, as cluster.sh does, and removes our
# /etc/netns files whose run is gone. A run left up (nl_keep) has a file "kept" instead,
# which neither this nor cluster.sh touches: only --clean --prefix removes it.

NL_STATE_ROOT=${NL_STATE_ROOT:-/run/chorus-cluster}

nl_skip() { echo "skipped: $*"; exit 77; }

nl_options_done() {
    _die() { echo "$1: $2" >&2; exit 2; }
    _uint() { case "$1" in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }
    case "$PREFIX" in *[!A-Za-z0-9_]* | '') _die "$1" "--prefix must be letters, digits and _" ;; esac
    if [ "$CLEAN" -eq 1 ]; then
        nl_check_tools
        mkdir -p "$NL_STATE_ROOT" && nl_clean_stale
        nl_teardown "$PREFIX"
        exit 0
    fi
    [ "$2" -gt 0 ] || [ "$KEEP" -eq 1 ] || _die "$1" "no command given (after --)"
    _uint "$HOSTS" && [ "$HOSTS" -ge 1 ] && [ "$HOSTS" -le 16 ] || _die "$1" "--hosts must be 1..16"
    _uint "$TIMEOUT" && [ "$TIMEOUT" -ge 1 ] || _die "$1" "--timeout must be seconds"
    echo "$SUBNET" | grep -Eq '^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$' ||
        _die "$1" "--subnet is the first three octets of a /24, e.g. $SUBNET_EXAMPLE"
    nl_check_tools
    [ -z "$RATE" ] || command -v tc >/dev/null 2>&1 ||
        nl_skip "'tc' not installed (needed for --rate)"
}

nl_check_tools() {
    [ "$(id -u)" -eq 0 ] || nl_skip "not root (network namespaces need CAP_SYS_ADMIN)"
    for tool in ip unshare hostname timeout; do
        command -v "$tool" >/dev/null 2>&1 || nl_skip "'$tool' not installed"
    done
}

nl_ns_of_prefix() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$1-"; }

# The /etc/netns directories this library wrote carry this line in their hosts file.
nl_marker() { echo "# chorus-cluster $1"; }

nl_teardown() {
    _nss=$(nl_ns_of_prefix "$1")
    if [ -n "$_nss" ]; then
        for _sig in TERM KILL; do
            _pids=""
            for _ns in $_nss; do _pids="$_pids $(ip netns pids "$_ns" 2>/dev/null)"; done
            _pids=$(echo $_pids)
            [ -n "$_pids" ] || break
            # shellcheck disable=SC2086
            kill -s "$_sig" $_pids 2>/dev/null
            _i=0
            while [ $_i -lt 30 ]; do
                _alive=""
                for _p in $_pids; do kill -0 "$_p" 2>/dev/null && _alive=1; done
                [ -z "$_alive" ] && break
                sleep 0.1
                _i=$((_i + 1))
            done
        done
        for _ns in $_nss; do ip netns del "$_ns" 2>/dev/null; done
    fi
    for _d in /etc/netns/"$1"-*; do
        [ -f "$_d/hosts" ] && grep -qx "$(nl_marker "$1")" "$_d/hosts" && rm -rf "$_d"
    done
    rm -rf "${NL_STATE_ROOT:?}/$1"
}

nl_keep() { mv "$NL_STATE_ROOT/$1/owner" "$NL_STATE_ROOT/$1/kept"; }

# Runs whose owner is dead; /etc/netns directories of ours whose run is gone.
nl_clean_stale() {
    for _dir in "$NL_STATE_ROOT"/*; do
        [ -f "$_dir/owner" ] || continue
        _owner=$(cat "$_dir/owner" 2>/dev/null)
        _name=$(basename "$_dir")
        if [ -n "$_owner" ] && kill -0 "$_owner" 2>/dev/null && [ "$_owner" != "$$" ]; then
            continue
        fi
        echo "netns: removing the namespaces of a dead run ($_name, pid $_owner)" >&2
        nl_teardown "$_name"
    done
    for _d in /etc/netns/*; do
        [ -f "$_d/hosts" ] || continue
        _p=$(sed -n 's/^# chorus-cluster \([A-Za-z0-9_]*\)$/\1/p' "$_d/hosts" | head -n 1)
        [ -n "$_p" ] || continue
        [ -d "$NL_STATE_ROOT/$_p" ] && continue
        ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$(basename "$_d")" && continue
        rm -rf "$_d"
    done
}

nl_claim() {
    mkdir -p "$NL_STATE_ROOT" 2>/dev/null || nl_skip "cannot create $NL_STATE_ROOT"
    nl_clean_stale
    if [ -f "$NL_STATE_ROOT/$1/owner" ] || [ -f "$NL_STATE_ROOT/$1/kept" ]; then
        echo "netns: prefix $1 is in use (remove it with --clean --prefix $1)" >&2
        exit 2
    fi
    [ -n "$(nl_ns_of_prefix "$1")" ] && nl_teardown "$1"
    (umask 077 && mkdir -p "$NL_STATE_ROOT/$1") && echo $$ >"$NL_STATE_ROOT/$1/owner" ||
        nl_skip "cannot write $NL_STATE_ROOT/$1"
    # shellcheck disable=SC2034 # for the caller
    NL_DIR="$NL_STATE_ROOT/$1"
}

# Returns 77 when the first namespace cannot be made (no namespaces here at all).
nl_switch() {
    ip netns add "$1-sw" 2>/dev/null || return 77
    ip -n "$1-sw" link set lo up && ip -n "$1-sw" link add br0 type bridge &&
        ip -n "$1-sw" link set br0 up
}

nl_node() {
    _ns="$1-$2"
    ip netns add "$_ns" || return 1
    # Both ends are created inside their namespaces: no name ever appears in the root one.
    ip link add "v$2" netns "$_ns" type veth peer name "vs$2" netns "$1-sw" || return 1
    ip -n "$1-sw" link set "vs$2" master br0 up || return 1
    ip -n "$_ns" link set lo up || return 1
    ip -n "$_ns" addr add "$3/24" dev "v$2" || return 1
    ip -n "$_ns" link set "v$2" up || return 1
    ip netns exec "$_ns" sh -c 'echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
    # A rate cap on both directions, as cluster.sh's --rate (its comment tells the burst).
    if [ -n "${4:-}" ]; then
        ip netns exec "$_ns" tc qdisc add dev "v$2" root tbf rate "$4" burst 80kb \
            latency 100ms || return 1
        ip netns exec "$1-sw" tc qdisc add dev "vs$2" root tbf rate "$4" burst 80kb \
            latency 100ms || return 1
    fi
    return 0
}

# nl_hosts PREFIX "NAME..." <lines: the hosts file of every listed node, from the
# "ADDR NAME" lines on stdin.
nl_hosts() {
    _lines=$(cat)
    for _n in $2; do
        mkdir -p "/etc/netns/$1-$_n" || return 1
        {
            nl_marker "$1"
            echo "127.0.0.1 localhost"
            echo "$_lines"
        } >"/etc/netns/$1-$_n/hosts" || return 1
    done
}

nl_in() {
    _ns="$1-$2" _host=$2
    shift 2
    ip netns exec "$_ns" unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' sh "$_host" "$@"
}

# What a job launched by a real launcher must find out by itself: no Chorus, torchrun,
# Open MPI, PMI or Slurm identity inherited from the caller.
nl_clean_env() {
    for _v in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p'); do
        case "$_v" in
        CHORUS_* | MASTER_* | RANK | WORLD_SIZE | LOCAL_RANK | LOCAL_WORLD_SIZE | LOCAL_SIZE | \
            GROUP_RANK | GROUP_WORLD_SIZE | ROLE_RANK | ROLE_WORLD_SIZE | NODE_RANK | \
            TORCHELASTIC_* | OMPI_* | PMIX_* | PMI_* | PRTE_* | SLURM_* | SLURMD_* | SRUN_* | \
            SBATCH_* | SALLOC_*)
            unset "$_v" ;;
        esac
    done
}
