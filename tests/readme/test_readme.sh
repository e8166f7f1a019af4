#!/bin/sh
# Runs README.md as a new user would (issue 16, acceptance 4), so that the README cannot
# drift from what works: every ```sh block, verbatim and in order, in a fresh clone of
# HEAD, each block as one `sh -e` script (a failing command fails the block). A fenced
# block preceded by a line `<!-- file: NAME -->` is written to NAME first (the C example
# the README tells you to save as ex.c). HOME is a temporary directory, so that paths such
# as $HOME/chorus stay inside the test; test traffic stays on loopback
# (CHORUS_SOCKET_IFNAME=lo).
#
#   sh tests/readme/test_readme.sh [--in-place] [--quickstart-done]
#
# --in-place runs in this tree instead of a fresh clone (CI, whose checkout is one), and
# removes what the blocks created. --quickstart-done skips the blocks of "## Quick start"
# (CI has just run them in this tree).
set -u
IN_PLACE=0
QS_DONE=0
for a in "$@"; do
    case "$a" in
    --in-place) IN_PLACE=1 ;;
    --quickstart-done) QS_DONE=1 ;;
    *) echo "usage: sh tests/readme/test_readme.sh [--in-place] [--quickstart-done]" >&2; exit 2 ;;
    esac
done
REPO=$(git rev-parse --show-toplevel) || exit 2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-readme.XXXXXX") || exit 2
BLOCKS=$TMP/blocks
mkdir -p "$BLOCKS" "$TMP/home"
if [ "$IN_PLACE" -eq 1 ]; then
    DIR=$REPO
    (cd "$DIR" && git status --porcelain --ignored | sort) >"$TMP/before"
else
    DIR=$TMP/clone
    git clone -q "$REPO" "$DIR" || exit 1
    echo "fresh clone of $(git -C "$DIR" rev-parse --short HEAD) in $DIR"
fi
cleanup() {
    if [ "$IN_PLACE" -eq 1 ]; then
        # Only what the blocks created; build/ and everything else that was there stays.
        (cd "$DIR" && git status --porcelain --ignored | sort) >"$TMP/after"
        comm -13 "$TMP/before" "$TMP/after" | sed 's/^.. //' | while read -r p; do
            (cd "$DIR" && rm -rf -- "$p")
        done
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Split README.md: blocks/NNN.sh (commands) and blocks/NNN.file (NAME<TAB>lines to write),
# each with the section it is in.
awk -v dir="$BLOCKS" -v qs_done="$QS_DONE" '
    /^## / { section = substr($0, 4) }
    /^<!-- file: .* -->$/ { file = $3; next }
    /^```/ {
        if (!inblock) {
            inblock = 1; n++; lang = substr($0, 4)
            skip = (qs_done && section ~ /^Quick start/)
            out = ""
            if (file != "") { out = sprintf("%s/%03d.file", dir, n); printf "%s\n", file > out }
            else if (lang == "sh" && !skip) { out = sprintf("%s/%03d.sh", dir, n)
                printf "# README.md, section \"%s\"\n", section > out }
            else if (lang == "sh") nleft++
            file = ""
            next
        }
        inblock = 0; if (out != "") close(out); out = ""; next
    }
    inblock && out != "" { print > out }
    !inblock && NF { file = ($0 ~ /^<!-- file:/) ? file : "" }
    END { print nleft + 0 > (dir "/../left_out") }
' "$REPO/README.md"
# Not a skip: the caller of --quickstart-done has run these blocks itself, just before.
[ "$QS_DONE" -eq 0 ] ||
    echo "left out $(cat "$TMP/left_out") Quick start blocks (--quickstart-done: the caller ran them)"

NPASS=0
NFAIL=0
export HOME="$TMP/home" CHORUS_SOCKET_IFNAME=lo
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_ROOT RANK WORLD_SIZE MASTER_ADDR \
    MASTER_PORT CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null
for b in "$BLOCKS"/*; do
    case "$b" in
    *.file)
        name=$(head -n 1 "$b")
        tail -n +2 "$b" >"$DIR/$name"
        echo "== wrote $name ($(($(wc -l <"$b") - 1)) lines) from README.md"
        ;;
    *.sh)
        echo "== $(head -n 1 "$b" | sed 's/^# //'):"
        tail -n +2 "$b" | sed 's/^/   $ /'
        t0=$(date +%s)
        (cd "$DIR" && timeout -k 10 3000 sh -e "$b") >"$b.log" 2>&1
        rc=$?
        t=$(($(date +%s) - t0))
        tail -n 6 "$b.log" | sed 's/^/   | /'
        if [ "$rc" -eq 0 ]; then
            NPASS=$((NPASS + 1)); echo "   ok ($t s)"
        else
            NFAIL=$((NFAIL + 1)); echo "   FAILED: exit $rc after $t s"
            tail -n 40 "$b.log" | sed 's/^/   | /'
        fi
        ;;
    esac
done
[ $((NPASS + NFAIL)) -gt 0 ] || { echo "FAIL: no sh block found in README.md"; exit 1; }
echo "readme: $NPASS command blocks passed, $NFAIL failed"
[ "$NFAIL" -eq 0 ]
