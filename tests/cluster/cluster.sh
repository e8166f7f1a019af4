#!/bin/sh
# An emulated cluster on one machine: H hosts as network namespaces, each with one veth to
# a Linux bridge in a "switch" namespace of its own, so nothing touches the machine's own
# network. Runs a command as R ranks on every host and tears everything down on exit.
#
#   tests/cluster/cluster.sh --hosts 4 [--ranks-per-host 2] [--placement block|cyclic]
#       [--rate 200mbit] [--rate-of 3=100mbit] [--burst 80kb] [--latency 100ms]
#       [--peak 1.02 [--gso 16384]] [--timeout 120]
#       [--port 29500] [--subnet 10.213.0] [--prefix NAME] [--stats FILE] -- prog args...
#   tests/cluster/cluster.sh --clean [--prefix NAME]
#
# Host h (0-based) is namespace NAME-h<h> with interface vh<h>, address <subnet>.<h+1>/24
# and host name host<h> (a UTS namespace per rank); the switch is NAME-sw with bridge br0
# and the peers vs<h>. --rate caps every link with tbf on both directions (the host's
# egress on vh<h> and the switch's egress toward it on vs<h>); --rate-of h=RATE overrides
# one host (repeatable). --peak F adds tbf's second bucket, a peak rate of F times the
# rate holding one packet, and caps the veths' packets (GSO) at --gso bytes (default
# 16384; the peak bucket's size is PEAK_MTU bytes if set in the environment): a link then
# never sends faster than F times its rate, where tbf alone lets a link that idled bank
# --burst bytes and send them at the veth's speed. The small packets cost CPU: on the
# 2-core VM busy links lose part of their rate (docs/sim-validation.md). With --placement block (the default) rank r = h * R + l runs on host
# h as its local rank l; with --placement cyclic rank r = l * H + h does (host r % H), so the
# ranks of a host are not contiguous. Each rank gets CHORUS_RANK, CHORUS_WORLD_SIZE,
# CHORUS_LOCAL_RANK, CHORUS_LOCAL_SIZE, CHORUS_ROOT=<host 0>:<port>, a fresh CHORUS_SECRET and
# CHORUS_SOCKET_IFNAME=vh<h>; every other variable is inherited. Output lines are prefixed
# with "[host<h> r<r>]". --stats FILE writes, per host, the bytes and packets that crossed
# its veth during the run, the tbf drops of its link and the bytes its loopback carried:
# "host H tx_bytes rx_bytes tx_pkts rx_pkts drops lo_bytes".
#
# Exit status: 0 when every rank exits 0; 1 when one fails (the others are killed at once);
# 124 on --timeout; 2 on a usage error; 77 ("skipped: <reason>") when namespaces cannot be
# made here. The namespaces and every process in them are removed on any exit, Ctrl-C
# included. The default NAME is chc<pid>; namespaces left by a run that was killed
# (SIGKILL) are removed by the next run, which finds its owner pid dead.
set -u

STATE_ROOT=/run/chorus-cluster
HOSTS=""
RPH=1
PLACEMENT=block
RATE=""
RATE_OF=""
BURST=""
LATENCY=100ms
PEAK=""
GSO=16384
TIMEOUT=300
PORT=29500
SUBNET=10.213.0
PREFIX=""
STATS=""
CLEAN=0

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
die() { echo "cluster: $*" >&2; exit 2; }
skip() { echo "skipped: $*"; exit 77; }
is_uint() { case "$1" in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

while [ $# -gt 0 ]; do
    case "$1" in
    --hosts | --ranks-per-host | --placement | --rate | --rate-of | --burst | --latency | \
        --peak | --gso | --timeout | --port | --subnet | --prefix | --stats)
        [ $# -ge 2 ] || die "$1 needs a value" ;;
    esac
    case "$1" in
    --hosts) HOSTS=${2:-}; shift 2 ;;
    --ranks-per-host) RPH=${2:-}; shift 2 ;;
    --placement) PLACEMENT=${2:-}; shift 2 ;;
    --rate) RATE=${2:-}; shift 2 ;;
    --rate-of) RATE_OF="$RATE_OF $(echo "${2:-}" | tr ',' ' ')"; shift 2 ;;
    --burst) BURST=${2:-}; shift 2 ;;
    --latency) LATENCY=${2:-}; shift 2 ;;
    --peak) PEAK=${2:-}; shift 2 ;;
    --gso) GSO=${2:-}; shift 2 ;;
    --timeout) TIMEOUT=${2:-}; shift 2 ;;
    --port) PORT=${2:-}; shift 2 ;;
    --subnet) SUBNET=${2:-}; shift 2 ;;
    --prefix) PREFIX=${2:-}; shift 2 ;;
    --stats) STATS=${2:-}; shift 2 ;;
    --clean) CLEAN=1; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    *) echo "cluster: unknown option '$1'" >&2; usage ;;
    esac
done

[ -n "$PREFIX" ] || PREFIX="chc$$"
case "$PREFIX" in *[!A-Za-z0-9_]* | '') die "--prefix must be letters, digits and _" ;; esac
if [ "$CLEAN" -eq 0 ]; then
    [ $# -gt 0 ] || die "no command given (after --)"
    is_uint "$HOSTS" && [ "$HOSTS" -ge 1 ] && [ "$HOSTS" -le 16 ] || die "--hosts must be 1..16"
    is_uint "$RPH" && [ "$RPH" -ge 1 ] && [ "$RPH" -le 64 ] || die "--ranks-per-host must be 1..64"
    case "$PLACEMENT" in block | cyclic) ;; *) die "--placement must be block or cyclic" ;; esac
    is_uint "$TIMEOUT" && [ "$TIMEOUT" -ge 1 ] || die "--timeout must be seconds"
    is_uint "$PORT" && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || die "bad --port"
    echo "$SUBNET" | grep -Eq '^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$' ||
        die "--subnet is the first three octets of a /24, e.g. 10.213.0"
    if [ -n "$PEAK" ]; then
        echo "$PEAK" | grep -Eq '^1\.[0-9]*[1-9][0-9]*$' || die "--peak is a factor above 1, e.g. 1.02"
        is_uint "$GSO" && [ "$GSO" -ge 1500 ] && [ "$GSO" -le 65536 ] || die "--gso is 1500..65536 bytes"
    fi
    for ov in $RATE_OF; do
        h=${ov%%=*}
        is_uint "$h" && [ "$h" -lt "$HOSTS" ] && [ -n "${ov#*=}" ] && [ "$ov" != "$h" ] ||
            die "bad --rate-of '$ov' (want HOST=RATE with HOST < $HOSTS)"
    done
fi

# ---- Can we make namespaces here? ----

[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN)"
for tool in ip unshare hostname; do
    command -v "$tool" >/dev/null 2>&1 || skip "'$tool' not installed"
done
if [ -n "$RATE$RATE_OF" ]; then
    command -v tc >/dev/null 2>&1 || skip "'tc' not installed (needed for --rate)"
fi

# ---- Teardown ----

ns_of_prefix() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$1-" ; }

# Kills every process inside the prefix's namespaces (only ranks this script started live
# there), then deletes the namespaces: the veths and the bridge go with them.
teardown_prefix() {
    nss=$(ns_of_prefix "$1")
    if [ -n "$nss" ]; then
        for sig in TERM KILL; do
            pids=""
            for ns in $nss; do pids="$pids $(ip netns pids "$ns" 2>/dev/null)"; done
            pids=$(echo $pids)
            [ -n "$pids" ] || break
            # shellcheck disable=SC2086
            kill -s "$sig" $pids 2>/dev/null
            i=0
            while [ $i -lt 20 ]; do
                alive=""
                for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
                [ -z "$alive" ] && break
                sleep 0.1
                i=$((i + 1))
            done
        done
        for ns in $nss; do ip netns del "$ns" 2>/dev/null; done
    fi
    rm -rf "${STATE_ROOT:?}/$1"
}

# Runs whose owner pid is gone (killed before their trap could run) left namespaces behind.
clean_stale() {
    for dir in "$STATE_ROOT"/*; do
        [ -f "$dir/owner" ] || continue
        owner=$(cat "$dir/owner" 2>/dev/null)
        name=$(basename "$dir")
        if [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null && [ "$owner" != "$$" ]; then
            continue
        fi
        echo "cluster: removing namespaces of a dead run ($name, pid $owner)" >&2
        teardown_prefix "$name"
    done
}

if [ "$CLEAN" -eq 1 ]; then
    clean_stale
    [ -n "$(ns_of_prefix "$PREFIX")" ] && teardown_prefix "$PREFIX"
    exit 0
fi

mkdir -p "$STATE_ROOT" 2>/dev/null || skip "cannot create $STATE_ROOT"
clean_stale
if [ -f "$STATE_ROOT/$PREFIX/owner" ]; then
    die "prefix $PREFIX is in use by pid $(cat "$STATE_ROOT/$PREFIX/owner")"
fi
# A run of the same prefix that crashed without an owner file.
[ -n "$(ns_of_prefix "$PREFIX")" ] && teardown_prefix "$PREFIX"
mkdir -p "$STATE_ROOT/$PREFIX" && echo $$ >"$STATE_ROOT/$PREFIX/owner" ||
    skip "cannot write $STATE_ROOT/$PREFIX"
ST=$(mktemp -d "${TMPDIR:-/tmp}/chorus-cluster.XXXXXX") || die "mktemp failed"

cleanup() {
    trap '' INT TERM
    teardown_prefix "$PREFIX"
    wait 2>/dev/null
    rm -rf "$ST"
}
trap 'rc=$?; cleanup; exit $rc' EXIT
trap 'echo "cluster: interrupted" >&2; exit 130' INT
trap 'echo "cluster: terminated" >&2; exit 143' TERM

# ---- Setup ----

SW="$PREFIX-sw"
hns() { echo "$PREFIX-h$1"; }
in_ns() { ns=$1; shift; ip netns exec "$ns" "$@"; }

rate_of() {
    r=$RATE
    for ov in $RATE_OF; do [ "${ov%%=*}" = "$1" ] && r=${ov#*=}; done
    echo "$r"
}

# tbf's bucket must hold one GSO packet (the veths pass 64 KiB ones, plus the headers of
# each segment) or tbf has to split it; a larger one would let a host bank free bandwidth
# while idle (between a benchmark's iterations), which inflates short transfers.
#
# --peak: tbf's peak bucket holds one packet (--gso bytes and the headers of its segments),
# refilled at F times the rate; packets are capped at --gso on the veths. A peak rate a
# little above the rate (not equal: tbf wants it higher) leaves the link some slack for a
# late timer without letting it burst.
kbit_of() {
    echo "$1" | awk '/[kK]bit$/ { print $0 + 0; next } /[mM]bit$/ { print ($0 + 0) * 1000; next }
                     /[gG]bit$/ { print ($0 + 0) * 1000000; next } { print -1 }'
}
tbf() {
    peak=""
    if [ -n "$PEAK" ]; then
        k=$(kbit_of "$3")
        [ "$k" -gt 0 ] 2>/dev/null || { echo "cluster: --peak needs a rate in kbit, mbit or gbit, not '$3'" >&2; return 1; }
        peak="peakrate $(awk -v k="$k" -v f="$PEAK" 'BEGIN { printf "%dkbit", k * f }') mtu ${PEAK_MTU:-$((GSO + 2048))}"
        ip -n "$1" link set "$2" gso_max_size "$GSO" || return 1
    fi
    # shellcheck disable=SC2086
    in_ns "$1" tc qdisc add dev "$2" root tbf rate "$3" burst "${BURST:-80kb}" \
        latency "$LATENCY" $peak || return 1
}

setup() {
    ip netns add "$SW" 2>"$ST/err" || { cat "$ST/err" >&2; return 77; }
    ip -n "$SW" link set lo up || return 1
    ip -n "$SW" link add br0 type bridge || return 1
    ip -n "$SW" link set br0 up || return 1
    h=0
    while [ "$h" -lt "$HOSTS" ]; do
        ns=$(hns "$h")
        ip netns add "$ns" || return 1
        # Both ends are created inside their namespaces: no name ever appears in the root one.
        ip link add "vh$h" netns "$ns" type veth peer name "vs$h" netns "$SW" || return 1
        ip -n "$SW" link set "vs$h" master br0 up || return 1
        ip -n "$ns" link set lo up || return 1
        ip -n "$ns" addr add "$SUBNET.$((h + 1))/24" dev "vh$h" || return 1
        ip -n "$ns" link set "vh$h" up || return 1
        # No IPv6 chatter (router solicitations, DAD) in the byte counters.
        in_ns "$ns" sh -c 'echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
        r=$(rate_of "$h")
        if [ -n "$r" ]; then
            tbf "$ns" "vh$h" "$r" || return 1
            tbf "$SW" "vs$h" "$r" || return 1
        fi
        h=$((h + 1))
    done
    return 0
}

setup
src=$?
if [ "$src" -ne 0 ]; then
    # The first namespace failing means namespaces do not work here at all.
    [ "$src" -eq 77 ] && skip "cannot create network namespaces: $(head -n 1 "$ST/err")"
    echo "cluster: setup failed" >&2
    exit 1
fi

NRANKS=$((HOSTS * RPH))
CHORUS_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export CHORUS_SECRET
export CHORUS_ROOT="$SUBNET.1:$PORT"
export CHORUS_WORLD_SIZE="$NRANKS"
export CHORUS_LOCAL_SIZE="$RPH"
# An identity inherited from the caller would contradict the one given here.
unset CHORUS_UNIQUE_ID CHORUS_HOSTID CHORUS_SECRET_FILE RANK WORLD_SIZE LOCAL_RANK \
    MASTER_ADDR MASTER_PORT 2>/dev/null

links="unlimited"
[ -n "$RATE" ] && links="$RATE"
for ov in $RATE_OF; do links="$links, host ${ov%%=*} at ${ov#*=}"; done
echo "cluster: $HOSTS hosts x $RPH ranks ($PLACEMENT), namespaces $PREFIX-*, $SUBNET.0/24," \
    "links $links, root $CHORUS_ROOT" >&2

# Byte and packet counters of every host's veth, and the tbf drops on both ends.
counters() {
    h=0
    while [ "$h" -lt "$HOSTS" ]; do
        set -- $(in_ns "$(hns "$h")" sh -c "cd /sys/class/net/vh$h/statistics &&
            cat tx_bytes rx_bytes tx_packets rx_packets ../../lo/statistics/tx_bytes")
        d1=$(in_ns "$(hns "$h")" tc -s qdisc show dev "vh$h" | awk '/dropped/ {
            for (i = 1; i < NF; i++) if ($i == "(dropped") { gsub(",", "", $(i+1)); s += $(i+1) } }
            END { print s + 0 }')
        d2=$(in_ns "$SW" tc -s qdisc show dev "vs$h" | awk '/dropped/ {
            for (i = 1; i < NF; i++) if ($i == "(dropped") { gsub(",", "", $(i+1)); s += $(i+1) } }
            END { print s + 0 }')
        echo "$h $1 $2 $3 $4 $((d1 + d2)) $5"
        h=$((h + 1))
    done
}
[ -n "$STATS" ] && counters >"$ST/before"

# ---- Run ----

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# The host and the local rank of rank $1.
host_of() { if [ "$PLACEMENT" = cyclic ]; then echo $(($1 % HOSTS)); else echo $(($1 / RPH)); fi; }
local_of() { if [ "$PLACEMENT" = cyclic ]; then echo $(($1 / HOSTS)); else echo $(($1 % RPH)); fi; }
T0=$(now_ms)
r=0
while [ "$r" -lt "$NRANKS" ]; do
    h=$(host_of "$r")
    l=$(local_of "$r")
    (
        ip netns exec "$(hns "$h")" unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' \
            sh "host$h" env CHORUS_RANK="$r" CHORUS_LOCAL_RANK="$l" \
            CHORUS_SOCKET_IFNAME="vh$h" "$@" </dev/null 2>&1
        echo $? >"$ST/rc.$r.tmp" && mv "$ST/rc.$r.tmp" "$ST/rc.$r"
    ) | sed -u "s/^/[host$h r$r] /" &
    r=$((r + 1))
done

status=0
while :; do
    ndone=0
    failed=""
    r=0
    while [ "$r" -lt "$NRANKS" ]; do
        if [ -f "$ST/rc.$r" ]; then
            ndone=$((ndone + 1))
            rc=$(cat "$ST/rc.$r")
            [ "$rc" != 0 ] && [ -z "$failed" ] && failed="$r:$rc"
        fi
        r=$((r + 1))
    done
    if [ -n "$failed" ]; then
        r=${failed%%:*}
        echo "cluster: rank $r on host$(host_of "$r") exited with status ${failed#*:};" \
            "stopping the others" >&2
        status=1
        break
    fi
    [ "$ndone" -eq "$NRANKS" ] && break
    if [ $(($(now_ms) - T0)) -ge $((TIMEOUT * 1000)) ]; then
        echo "cluster: timed out after $TIMEOUT s ($ndone of $NRANKS ranks done); stopping" >&2
        status=124
        break
    fi
    sleep 0.1
done

if [ -n "$STATS" ]; then
    counters >"$ST/after"
    awk 'NR == FNR { b[$1] = $0; next }
         { split(b[$1], o, " "); print "host", $1, $2 - o[2], $3 - o[3], $4 - o[4], $5 - o[5],
               $6 - o[6], $7 - o[7] }' "$ST/before" "$ST/after" >"$STATS"
fi
if [ "$status" -ne 0 ]; then
    teardown_prefix "$PREFIX"
fi
wait
echo "cluster: done in $(($(now_ms) - T0)) ms, status $status" >&2
exit "$status"
