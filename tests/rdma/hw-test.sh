#!/bin/sh
# Runs the RDMA end-to-end tests (tests/integration/test_rdma.py) on the `verbs` device:
# l5pgd and the shim both use rdma-core's libibverbs instead of the soft device.
#
# Usage: tests/rdma/hw-test.sh [pytest args...]
#   L5PG_BUILD_DIR   build directory (default: build/)
#   L5PG_TEST_RDMA_DEVICE_NAME   RDMA device (default: the first in /sys/class/infiniband)
#   L5PG_TEST_RDMA_GID_INDEX     GID index (default: InfiniBand -1, RoCE the first RoCE v2
#                                entry holding an IPv4 address, else the first RoCE v1 entry)
#
# Without an RDMA device it prints one line saying so and exits 0.
#
# No RDMA NIC? Soft-RoCE (rdma_rxe, in the stock Debian kernel) makes any Ethernet
# interface an RoCE v2 device, enough to run this (as root; rdma is in iproute2, the
# verbs provider in ibverbs-providers):
#   apt-get install rdma-core ibverbs-providers ibverbs-utils iproute2
#   modprobe rdma_rxe
#   rdma link add rxe0 type rxe netdev eth0     # an interface with an IPv4 address
#   ibv_devices; ibv_devinfo -d rxe0             # port 1 must be PORT_ACTIVE
#   ulimit -l unlimited                          # pinned memory for the rings
# and remove it again with `rdma link delete rxe0`. The tests connect to 127.0.0.1; rxe
# loops RDMA traffic back locally whatever the TCP address. In a container, Soft-RoCE
# needs the host's kernel module and the container's netdev (or --network host).
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd)
ib=/sys/class/infiniband

dev=${L5PG_TEST_RDMA_DEVICE_NAME:-}
if [ -z "$dev" ] && [ -d "$ib" ]; then
    for d in "$ib"/*; do
        [ -e "$d" ] || continue
        dev=$(basename "$d")
        break
    done
fi
if [ -z "$dev" ] || [ ! -d "$ib/$dev" ]; then
    echo "hw-test: skipped: no RDMA device in $ib (no NIC, no Soft-RoCE: see the header of $0)"
    exit 0
fi

gid=${L5PG_TEST_RDMA_GID_INDEX:-}
if [ -z "$gid" ]; then
    link=$(cat "$ib/$dev/ports/1/link_layer" 2>/dev/null || echo unknown)
    if [ "$link" = "InfiniBand" ]; then
        gid=-1
    else
        v1=
        for t in "$ib/$dev"/ports/1/gid_attrs/types/*; do
            [ -e "$t" ] || continue
            i=$(basename "$t")
            type=$(cat "$t" 2>/dev/null || true)
            value=$(cat "$ib/$dev/ports/1/gids/$i" 2>/dev/null || true)
            case "$value" in ""|0000:0000:0000:0000:0000:0000:0000:0000) continue ;; esac
            if [ "$type" = "RoCE v2" ]; then
                case "$value" in 0000:0000:0000:0000:0000:ffff:*) gid=$i; break ;; esac
            elif [ -z "$v1" ]; then
                v1=$i
            fi
        done
        gid=${gid:-${v1:-0}}
    fi
fi

ulimit -l unlimited 2>/dev/null || echo "hw-test: note: could not raise ulimit -l (pinned memory): $(ulimit -l) KiB"
echo "hw-test: verbs device $dev, port 1, GID index $gid"
cd "$repo"
L5PG_BUILD_DIR=${L5PG_BUILD_DIR:-$repo/build} \
L5PG_TEST_RDMA_DEVICE=verbs \
L5PG_TEST_RDMA_DEVICE_NAME=$dev \
L5PG_TEST_RDMA_GID_INDEX=$gid \
    exec /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration/test_rdma.py "$@"
