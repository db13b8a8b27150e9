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
