#!/bin/sh
# Linking like a user (issue 16, acceptance 2): `make install PREFIX=<tmp>`, then the
# examples (examples/Makefile and examples/CMakeLists.txt, exactly as a user copies them)
# built against that prefix through pkg-config (shared and --static) and through CMake
# (Chorus::chorus and Chorus::chorus_static), and from the build tree (-Lbuild/lib, its
# chorus.pc and its CMake package); each program runs on 2 ranks under chorusrun and as
# two processes that pass the id by file. Needs a built tree (make); without cmake the
# CMake builds are skipped, each with a PART-SKIP line, and the rest still runs.
set -u
BUILD=${BUILD:-build}
[ -f "$BUILD/config.mk" ] && [ -x "$BUILD/bin/chorusrun" ] || {
    echo "missing $BUILD/config.mk or chorusrun (run make first)"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-install.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
. tests/install/install_lib.sh
P=$TMP/prefix
TREE=$(cd "$BUILD" && pwd)

make --no-print-directory -s install BUILD="$BUILD" PREFIX="$P" >"$TMP/install.log" 2>&1 || {
    cat "$TMP/install.log"; echo "FAIL: make install PREFIX=$P"; exit 1; }
for f in include/chorus.h lib/libchorus.a lib/libchorus.so lib/pkgconfig/chorus.pc \
    lib/cmake/Chorus/ChorusConfig.cmake lib/cmake/Chorus/ChorusConfigVersion.cmake \
    bin/chorusrun bin/chorus-bench; do
    [ -e "$P/$f" ] || fail "make install did not install $f"
done
# The versioned chain: libchorus.so -> libchorus.so.MAJOR -> libchorus.so.MAJOR.MINOR.PATCH
ver=$(sed -n 's/^CHORUS_VERSION *:= *//p' "$BUILD/config.mk")
[ "$(readlink "$P/lib/libchorus.so")" = "libchorus.so.${ver%%.*}" ] &&
    [ "$(readlink "$P/lib/libchorus.so.${ver%%.*}")" = "libchorus.so.$ver" ] &&
    [ -f "$P/lib/libchorus.so.$ver" ] || fail "the .so chain in $P/lib: $(ls -l "$P/lib" | grep libchorus.so)"
soname=$(readelf -d "$P/lib/libchorus.so.$ver" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libchorus.so.${ver%%.*}" ] && ok "SONAME $soname" || fail "SONAME is '$soname'"

# pkg-config: --static must list every private dependency the build used.
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
static_libs=$(pkg-config --static --libs chorus) || fail "pkg-config --static --libs chorus"
for l in $(sed -n 's/^CONFIG_LIBS *:= *//p' "$BUILD/config.mk"); do
    case " $static_libs " in *" $l "*) ;; *) fail "pkg-config --static lacks $l: $static_libs" ;; esac
done

mk() { make --no-print-directory -s -f examples/Makefile "$@"; }
mkdir -p "$TMP/pc-shared" "$TMP/pc-static"
if mk OUT="$TMP/pc-shared" && mk OUT="$TMP/pc-static" STATIC=1; then
    needs_shared "$TMP/pc-shared/allreduce" "$P/lib"
    needs_static "$TMP/pc-static/allreduce"
    run_examples "pkg-config shared" "$TMP/pc-shared" "$P/bin/chorusrun"
    run_examples "pkg-config --static" "$TMP/pc-static" "$P/bin/chorusrun"
else
    fail "examples/Makefile against $P"
fi
unset PKG_CONFIG_PATH

if command -v cmake >/dev/null 2>&1; then
    for kind in shared static; do
        flag=OFF
        [ "$kind" = static ] && flag=ON
        if cmake -S examples -B "$TMP/cmake-$kind" -DCMAKE_PREFIX_PATH="$P" \
            -DCHORUS_STATIC=$flag >"$TMP/cmake-$kind.log" 2>&1 &&
            cmake --build "$TMP/cmake-$kind" >>"$TMP/cmake-$kind.log" 2>&1; then
            if [ "$kind" = shared ]; then needs_shared "$TMP/cmake-shared/allreduce" "$P/lib"
            else needs_static "$TMP/cmake-static/allreduce"; fi
            run_examples "cmake $kind" "$TMP/cmake-$kind" "$P/bin/chorusrun"
        else
            tail -n 20 "$TMP/cmake-$kind.log"; fail "cmake $kind build against $P"
        fi
    done
    # find_package refuses a version it cannot meet.
    mkdir -p "$TMP/toonew"
    printf 'cmake_minimum_required(VERSION 3.13)\nproject(x C)\nfind_package(Chorus 9.0 REQUIRED)\n' \
        >"$TMP/toonew/CMakeLists.txt"
    if cmake -S "$TMP/toonew" -B "$TMP/toonew/b" -DCMAKE_PREFIX_PATH="$P" >"$TMP/toonew.log" 2>&1; then
        fail "find_package(Chorus 9.0) accepted version $ver"
    else ok "find_package(Chorus 9.0) refused $ver"; fi
else
    echo "PART-SKIP cmake-prefix: skipped: cmake not found (apt-get install cmake)"
fi

# From the build tree, without installing: plain -L, its chorus.pc, its CMake package.
mkdir -p "$TMP/tree"
cc -std=c11 examples/allreduce.c -Iinclude -L"$TREE/lib" -lchorus -Wl,-rpath,"$TREE/lib" \
    -o "$TMP/tree/allreduce" && cc -std=c11 examples/id_by_file.c \
    $(PKG_CONFIG_PATH="$TREE/lib/pkgconfig" pkg-config --cflags --libs chorus) \
    -Wl,-rpath,"$TREE/lib" -o "$TMP/tree/id_by_file" || fail "linking from the build tree"
needs_shared "$TMP/tree/allreduce" "$TREE/lib"
run_examples "build tree" "$TMP/tree" "$BUILD/bin/chorusrun"
if command -v cmake >/dev/null 2>&1; then
    if cmake -S examples -B "$TMP/cmake-tree" -DChorus_DIR="$TREE/lib/cmake/Chorus" \
        >"$TMP/cmake-tree.log" 2>&1 && cmake --build "$TMP/cmake-tree" >>"$TMP/cmake-tree.log" 2>&1
    then
        needs_shared "$TMP/cmake-tree/allreduce" "$TREE/lib"
        run_examples "cmake build tree" "$TMP/cmake-tree" "$BUILD/bin/chorusrun"
    else
        tail -n 20 "$TMP/cmake-tree.log"; fail "cmake against the build tree"
    fi
else
    echo "PART-SKIP cmake-tree: skipped: cmake not found (apt-get install cmake)"
fi

[ "$FAILED" -eq 0 ] || exit 1
if command -v cmake >/dev/null 2>&1; then
    echo "install: prefix, pkg-config (shared, --static), CMake (shared, static) and build tree: ok"
else
    echo "install: prefix, pkg-config (shared, --static) and build tree: ok (CMake skipped)"
fi
