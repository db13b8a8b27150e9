"""What /proc says about a process (l5pgd under test): memory, CPU time, open fds."""
import os
from pathlib import Path


def status_kb(pid, field):
    """A '<field>: N kB' line of /proc/<pid>/status (VmRSS, RssAnon, RssShmem...), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} line in /proc/{pid}/status")


def vm_rss(pid):
    """Resident memory in bytes."""
    return status_kb(pid, "VmRSS") * 1024


def cpu_seconds(pid):
    """User plus system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def loopback_queues(local_port, remote_port):
    """(bytes not yet acknowledged by the peer, bytes received but not read) of the IPv4 TCP
    socket 127.0.0.1:local_port -> 127.0.0.1:remote_port, from /proc/net/tcp."""
    local, remote = f"0100007F:{local_port:04X}", f"0100007F:{remote_port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local and fields[2] == remote:
            tx, rx = fields[4].split(":")
            return int(tx, 16), int(rx, 16)
    raise AssertionError(f"no TCP socket 127.0.0.1:{local_port} -> 127.0.0.1:{remote_port}")


def in_kernel_between(server_port, client_port):
    """What the kernel holds of the server's stream to the client: queued at the server plus
    unread at the client."""
    return (loopback_queues(server_port, client_port)[0] +
            loopback_queues(client_port, server_port)[1])
