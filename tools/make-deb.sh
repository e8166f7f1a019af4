#!/bin/sh
# Builds $BUILD/chorus_VERSION_ARCH.deb from an already built tree (`make deb`): the
# library (shared and static), the header, the tools, chorus.pc and the CMake package, and
# the CUDA plugin where it was built, all under /usr with Debian's multiarch libdir. Its
# Depends are computed from what the binaries link (dpkg-shlibdeps), so the package asks
# for exactly the runtime libraries of the optional parts this build has.
#
#   BUILD=build VERSION=0.1.0 sh tools/make-deb.sh
set -eu
BUILD=${BUILD:-build}
: "${VERSION:?VERSION is set by make deb}"
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "make-deb: $tool not found (apt-get install dpkg-dev)" >&2; exit 1; }
done
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
work=$BUILD/deb
root=$work/root
rm -rf "$work"
mkdir -p "$root/DEBIAN"

# The same install as `make install`, staged.
# Without the Python package: its torch backend would make every node depend on torch.
make --no-print-directory -s install CHORUS_QUIET_CONFIG=1 BUILD="$BUILD" DESTDIR="$(pwd)/$root" PREFIX=/usr \
    LIBDIR="/usr/lib/$multiarch" INSTALL_PYTHON=0 >/dev/null
doc=$root/usr/share/doc/chorus
mkdir -p "$doc/examples"
install -m 644 README.md "$doc/"
install -m 644 examples/*.c examples/Makefile examples/CMakeLists.txt examples/README.md \
    "$doc/examples/"

# dpkg-shlibdeps reads debian/control of the package being built.
mkdir -p "$work/debian"
cat >"$work/debian/control" <<CTRL
Source: chorus
Maintainer: Chorus developers <chorus@localhost>

Package: chorus
Architecture: $arch
CTRL
depends=$(cd "$work" && dpkg-shlibdeps -O --ignore-missing-info \
    $(find root/usr/bin root/usr/lib -type f \( -perm -u+x -o -name '*.so*' \)) 2>/dev/null |
    sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "make-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

# chorus.pc names its private dependencies (Requires.private), and pkg-config needs their
# .pc files even for --cflags: recommend the packages that own them, found with dpkg -S.
requires=$(sed -n 's/^PC_REQUIRES_PRIVATE *:= *//p' "$BUILD/config.mk" | tr ',' ' ')
recommends=pkg-config
for pc in $requires; do
    file=$(pkg-config --variable=pcfiledir "$pc")/$pc.pc
    owner=$(dpkg -S "$file" 2>/dev/null | head -n 1 | cut -d: -f1)
    [ -n "$owner" ] && recommends="$recommends, $owner"
done

size=$(du -sk "$root/usr" | cut -f1)
cat >"$root/DEBIAN/control" <<CTRL
Package: chorus
Version: $VERSION
Architecture: $arch
Maintainer: Chorus developers <chorus@localhost>
Installed-Size: $size
Depends: $depends
Recommends: $recommends
Section: libs
Priority: optional
Description: collective communication for distributed training
 Chorus is a C library of collective operations (allreduce, allgather,
 reduce-scatter, broadcast, reduce, alltoall, send/recv, barrier) over shared
 memory, TCP, UCX and InfiniBand/RoCE verbs, on host and CUDA device buffers.
 This package holds the library (shared and static), its header, pkg-config
 and CMake files, chorusrun, chorus-sim, chorus-trace, chorus-bench and chorus-fabric.
CTRL
# The new shared library must be known to the loader at once.
echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"
(cd "$root" && find usr -type f -exec md5sum {} + | sort -k 2) >"$root/DEBIAN/md5sums"
chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/triggers" "$root/DEBIAN/md5sums"
out=$BUILD/chorus_${VERSION}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "make-deb: $out"
echo "make-deb: Depends: $depends"
echo "make-deb: Recommends: $recommends"
