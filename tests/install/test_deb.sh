#!/bin/sh
# The Debian package (issue 16, acceptance 3): `make deb`, `dpkg -i` of the result, the
# examples built with only the installed package (the system pkg-config and CMake search
# paths, no prefix given) and run on 2 ranks, then `dpkg -r`, after which none of its
# files remains and the loader no longer knows libchorus. Needs root and dpkg-dev, and no
# chorus package installed already (it would be replaced); skips saying why otherwise.
set -u
BUILD=${BUILD:-build}
[ "$(id -u)" = 0 ] || { echo "skipped: dpkg -i needs root"; exit 77; }
command -v dpkg-shlibdeps >/dev/null 2>&1 || { echo "skipped: no dpkg-dev (apt-get install dpkg-dev)"; exit 77; }
if dpkg-query -W -f='${Status}' chorus 2>/dev/null | grep -q "install ok installed"; then
    echo "skipped: a chorus package is installed already ($(dpkg-query -W -f='${Version}' chorus)); dpkg -r chorus first"
    exit 77
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-deb.XXXXXX") || exit 1
installed=0
cleanup() {
    [ "$installed" -eq 1 ] && dpkg -r chorus >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
. tests/install/install_lib.sh

make --no-print-directory -s deb BUILD="$BUILD" >"$TMP/deb.log" 2>&1 || {
    cat "$TMP/deb.log"; echo "FAIL: make deb"; exit 1; }
cat "$TMP/deb.log"
deb=$(sed -n 's/^make-deb: \(.*\.deb\)$/\1/p' "$TMP/deb.log")
[ -f "$deb" ] || { echo "FAIL: make deb made no package"; exit 1; }
echo "package: $deb"
dpkg-deb -f "$deb" Package Version Architecture Depends Recommends
# Depends come from what the binaries link: libc, and the runtime of each optional part
# this build has.
depends=$(dpkg-deb -f "$deb" Depends)
for need in libc6 libssl3 libjansson4; do
    case "$depends" in *"$need"*) ;; *) fail "Depends lacks $need: $depends" ;; esac
done
grep -q '^HAVE_UCX *:= *1' "$BUILD/config.mk" && case "$depends" in
    *libucx0*) ;; *) fail "built with ucx but Depends lacks libucx0: $depends" ;; esac

dpkg -i "$deb" >"$TMP/dpkg-i.log" 2>&1 || { cat "$TMP/dpkg-i.log"; echo "FAIL: dpkg -i"; exit 1; }
installed=1
ok "dpkg -i $deb"
dpkg -L chorus | sort >"$TMP/files"
libdir=$(pkg-config --variable=libdir chorus)
pkg-config --cflags --libs chorus >/dev/null || fail "pkg-config --cflags --libs chorus after dpkg -i"
echo "pkg-config --cflags --libs chorus: $(pkg-config --cflags --libs chorus)"
ldconfig -p | grep -q 'libchorus.so.0 ' || fail "ldconfig does not know libchorus.so.0 after dpkg -i"

# Built with only the installed package: the system's search paths, no prefix, no rpath.
mkdir -p "$TMP/pc"
cc -std=c11 examples/allreduce.c $(pkg-config --cflags --libs chorus) -o "$TMP/pc/allreduce" &&
    cc -std=c11 examples/id_by_file.c $(pkg-config --cflags --libs chorus) -o "$TMP/pc/id_by_file" ||
    fail "building the examples with the package's pkg-config file"
needs_shared "$TMP/pc/allreduce" "$libdir"
run_examples "deb pkg-config" "$TMP/pc" /usr/bin/chorusrun
if command -v cmake >/dev/null 2>&1; then
    if cmake -S examples -B "$TMP/cmake" >"$TMP/cmake.log" 2>&1 &&
        cmake --build "$TMP/cmake" >>"$TMP/cmake.log" 2>&1; then
        needs_shared "$TMP/cmake/allreduce" "$libdir"
        run_examples "deb cmake" "$TMP/cmake" /usr/bin/chorusrun
    else
        tail -n 20 "$TMP/cmake.log"; fail "cmake find_package(Chorus) with the package"
    fi
else
    echo "PART-SKIP cmake: skipped: cmake not found (apt-get install cmake)"
fi
/usr/bin/chorus-bench --version | grep -q '^chorus ' || fail "/usr/bin/chorus-bench --version"

dpkg -r chorus >"$TMP/dpkg-r.log" 2>&1 || { cat "$TMP/dpkg-r.log"; fail "dpkg -r chorus"; }
installed=0
left=0
while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    echo "left behind: $f"; left=1
done <"$TMP/files"
[ "$left" -eq 0 ] && ok "dpkg -r chorus removed all $(wc -l <"$TMP/files") paths" ||
    fail "dpkg -r left files"
dpkg-query -W -f='${Status}' chorus 2>/dev/null | grep -q "install ok installed" &&
    fail "dpkg still lists chorus as installed"
ldconfig -p | grep -q 'libchorus.so.0 ' && fail "ldconfig still lists libchorus.so.0 after dpkg -r"
[ "$FAILED" -eq 0 ] || exit 1
echo "deb: make deb, dpkg -i, examples through pkg-config and CMake, dpkg -r: ok"
