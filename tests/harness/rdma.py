"""RDMA targets: libpq over TCP to l5pgd with the shim preloaded and L5PG_TRANSPORT=rdma.

The device both sides use comes from L5PG_TEST_RDMA_DEVICE (default "soft"; tests/rdma/
hw-test.sh sets "verbs"). For verbs, L5PG_TEST_RDMA_DEVICE_NAME and L5PG_TEST_RDMA_GID_INDEX
pick the device and GID index (Soft-RoCE needs a GID index) for both l5pgd and the shim.
"""
import os
import re

from .client import Target, shim_debug_lines, shm_target, unix_target


def rdma_device():
    return os.environ.get("L5PG_TEST_RDMA_DEVICE", "soft")


def _verbs_settings():
    return (os.environ.get("L5PG_TEST_RDMA_DEVICE_NAME", ""),
            os.environ.get("L5PG_TEST_RDMA_GID_INDEX", ""))


def rdma_overrides(device=None):
    """l5pgd -o overrides enabling RDMA upgrades on its TCP listener."""
    device = device or rdma_device()
    out = ["rdma.enabled=true", f"rdma.device={device}"]
    if device == "verbs":
        name, gid = _verbs_settings()
        if name:
            out.append(f"rdma.device_name={name}")
        if gid:
            out.append(f"rdma.gid_index={gid}")
    return out


def rdma_env(l5pgd, device=None, port=None, **extra):
    """Shim settings that upgrade TCP connections to l5pgd's port (or `port`) to RDMA."""
    device = device or rdma_device()
    env = {"L5PG_TRANSPORT": "rdma", "L5PG_RDMA_DEVICE": device,
           "L5PG_RDMA_PORTS": str(port if port is not None else l5pgd.port)}
    if device == "verbs":
        name, gid = _verbs_settings()
        if name:
            env["L5PG_RDMA_DEVICE_NAME"] = name
        if gid:
            env["L5PG_RDMA_GID_INDEX"] = gid
    env.update({k: str(v) for k, v in extra.items()})
    return env


def rdma_target(l5pgd, device=None, host=None, **extra):
    """libpq over TCP to l5pgd, shim preloaded, upgraded to the RDMA channel."""
    return Target("rdma", host or l5pgd.host, l5pgd.port, preload=True, transport_off=False,
                  extra=rdma_env(l5pgd, device, **extra))


def upgraded_rdma(stderr):
    return any("upgraded to rdma" in ln for ln in shim_debug_lines(stderr))


def rdma_debug_reason(stderr):
    """The shim's L5PG_DEBUG lines about RDMA decisions."""
    return [ln for ln in shim_debug_lines(stderr) if re.search(r"RDMA|rdma", ln)]


# A target maker per transport, for tests that must hold over every one of them (with the
# every_transport_daemon fixture).
EVERY_TRANSPORT = {"shm": shm_target, "unix": unix_target, "rdma": rdma_target}
