# Helpers shared by the tests/install scripts (sourced): checks, running the examples.
# Each script sets BUILD and TMP before sourcing.
FAILED=${FAILED:-0}
fail() { echo "FAIL: $*"; FAILED=1; }
ok() { echo "ok: $*"; }

# Test traffic stays on loopback, and no rank identity leaks in from a caller.
export CHORUS_SOCKET_IFNAME=lo CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-60}
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_ROOT RANK WORLD_SIZE MASTER_ADDR MASTER_PORT CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null

# run_examples LABEL DIR CHORUSRUN: runs DIR/allreduce on 2 ranks under CHORUSRUN and
# DIR/id_by_file as two processes without a launcher; both must print their check.
run_examples() {
    label=$1 dir=$2 run=$3
    out=$("$run" -n 2 --timeout 60 -- "$dir/allreduce" 2>&1)
    if echo "$out" | grep -q 'allreduce of 1024 floats over 2 ranks: ok'; then
        ok "$label: allreduce on 2 ranks"
    else
        fail "$label: allreduce on 2 ranks: $out"
    fi
    idf=$TMP/id.$$.$(echo "$label" | tr -c 'A-Za-z0-9' '_')
    timeout -k 2 60 "$dir/id_by_file" "$idf" 0 2 >"$TMP/idf0" 2>&1 &
    pid0=$!
    timeout -k 2 60 "$dir/id_by_file" "$idf" 1 2 >"$TMP/idf1" 2>&1
    rc1=$?
    wait "$pid0"
    rc0=$?
    if [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] &&
        [ "$(cat "$TMP/idf0" "$TMP/idf1" | grep -c 'without a launcher: ok')" -eq 2 ]; then
        ok "$label: id_by_file, 2 processes, id passed by file"
    else
        fail "$label: id_by_file exited $rc0/$rc1: $(cat "$TMP/idf0" "$TMP/idf1")"
    fi
}

# needs_shared PROG LIBDIR: PROG loads libchorus.so.0 from LIBDIR.
needs_shared() {
    got=$(ldd "$1" | sed -n 's/^[[:space:]]*libchorus\.so\.[0-9]* => \([^ ]*\).*/\1/p')
    # Compared as real paths: /lib is /usr/lib on a merged-/usr system.
    case "$(readlink -f "${got:-/nonexistent}")" in
    "$(readlink -f "$2")"/libchorus.so.*) ok "$1 loads $got" ;;
    *) fail "$1 should load libchorus.so.0 from $2, ldd says '${got:-nothing}'" ;;
    esac
}

# needs_static PROG: PROG carries libchorus (no libchorus.so at run time).
needs_static() {
    if ldd "$1" | grep -q libchorus; then fail "$1 links libchorus.so: $(ldd "$1" | grep libchorus)"
    else ok "$1 has libchorus linked in statically"; fi
}
