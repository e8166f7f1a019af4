#!/bin/sh
# The ib transport on real hardware: where `ibv_devices` lists an RDMA device, runs the
# transport contract suite over it (build/tests/test_transport_ib: 2 to 4 ranks on this
# host, through the NIC's loopback), once as configured and once with every message by the
# zero-copy rendezvous. Elsewhere prints "skipped: no RDMA device" and exits
# 77. BUILD=dir picks the build (default build); CHORUS_IB_HCA / CHORUS_IB_GID_INDEX pass
# through to choose the port and the RoCE GID.
BUILD=${BUILD:-build}
bin=$BUILD/tests/test_transport_ib

# ibv_devices prints two header lines, then one line per device. Without ibverbs-utils,
# the kernel's list of RDMA devices says the same.
if command -v ibv_devices >/dev/null 2>&1; then
    ndev=$(ibv_devices 2>/dev/null | awk 'NR > 2 && NF > 0' | wc -l)
else
    ndev=$(ls /sys/class/infiniband 2>/dev/null | wc -l)
fi
if [ "$ndev" -eq 0 ]; then
    echo "skipped: no RDMA device"
    exit 77
fi
if [ ! -x "$bin" ]; then
    echo "ib.sh: $bin is missing: run make BUILD=$BUILD $bin first" >&2
    exit 1
fi
echo "ib.sh: $ndev RDMA device(s)"
# Without a device the binary reports a skipped cmocka test: with one, every case must run.
# Twice: with the default CHORUS_IB_ZCOPY_MIN (small messages through the slots, the 1 MiB
# and 8 MiB ones by the zero-copy rendezvous), then with every non-empty message by
# rendezvous (registration, RTS/RTR, RDMA WRITE, FIN on a real NIC). GPUDirect (device
# buffers through dma-buf) needs a GPU and the core's device memory calls: the chorus
# device tests cover it on a node that has both; here it is tested through fakes
# (test_ib_zcopy).
run_suite() {
    out=$(env "$@" "$bin" 2>&1)
    rc=$?
    echo "$out"
    if [ $rc -eq 0 ] && echo "$out" | grep -q 'test_no_device'; then
        echo "ib.sh: the suite skipped although ibv_devices lists a device (no usable port?)" >&2
        return 1
    fi
    return $rc
}
echo "ib.sh: pass 1: default CHORUS_IB_ZCOPY_MIN"
run_suite CHORUS_IB_ZCOPY_MIN="${CHORUS_IB_ZCOPY_MIN:-1M}" || exit 1
echo "ib.sh: pass 2: every message by zero-copy rendezvous (CHORUS_IB_ZCOPY_MIN=1)"
run_suite CHORUS_IB_ZCOPY_MIN=1 || exit 1
exit 0
