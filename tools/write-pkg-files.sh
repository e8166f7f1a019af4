#!/bin/sh
# Writes chorus.pc and the CMake package (ChorusConfig.cmake, ChorusConfigVersion.cmake)
# for one place the library lives: the build tree, or an install prefix.
#
#   VERSION=0.1.0 SOVERSION=0 REQUIRES="libcrypto, jansson" LIBS="-lcrypto ..." \
#       sh tools/write-pkg-files.sh OUTDIR PREFIX LIBDIR INCLUDEDIR
#
# OUTDIR receives pkgconfig/chorus.pc and cmake/Chorus/; the paths written in them are
# PREFIX, LIBDIR and INCLUDEDIR (OUTDIR differs from LIBDIR under DESTDIR).
set -eu
[ $# -eq 4 ] || { echo "usage: write-pkg-files.sh OUTDIR PREFIX LIBDIR INCLUDEDIR" >&2; exit 2; }
out=$1 prefix=$2 libdir=$3 includedir=$4
major=${VERSION%%.*}
rest=${VERSION#*.}
minor=${rest%%.*}
# CMake wants a list: "-lucp -luct" becomes "-lucp;-luct".
static_libs=$(echo "$LIBS" | tr -s ' ' | sed 's/^ //; s/ $//; s/ /;/g')

subst() {
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" \
        -e "s|@INCLUDEDIR@|$includedir|g" -e "s|@VERSION@|$VERSION|g" \
        -e "s|@SOVERSION@|$SOVERSION|g" -e "s|@MAJOR@|$major|g" -e "s|@MINOR@|$minor|g" \
        -e "s|@REQUIRES@|$REQUIRES|g" -e "s|@STATIC_LIBS@|$static_libs|g" "$1" >"$2"
}
mkdir -p "$out/pkgconfig" "$out/cmake/Chorus"
subst tools/chorus.pc.in "$out/pkgconfig/chorus.pc"
subst tools/ChorusConfig.cmake.in "$out/cmake/Chorus/ChorusConfig.cmake"
subst tools/ChorusConfigVersion.cmake.in "$out/cmake/Chorus/ChorusConfigVersion.cmake"
chmod 644 "$out/pkgconfig/chorus.pc" "$out/cmake/Chorus/"*.cmake
