"""CPU time of processes from /proc: a process, its threads and its children (live or exited)."""
import os
import time
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    ppid: int
    utime: int   # clock ticks, all threads of the process
    stime: int
    cutime: int  # ticks of children the process has waited for
    cstime: int

    @property
    def own_ticks(self):
        return self.utime + self.stime

    @property
    def reaped_children_ticks(self):
        return self.cutime + self.cstime


def read_stat(pid):
    """/proc/<pid>/stat parsed, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = text[text.rindex(")") + 2:].split()
    return ProcStat(pid=pid, state=rest[0], ppid=int(rest[1]), utime=int(rest[11]),
                    stime=int(rest[12]), cutime=int(rest[13]), cstime=int(rest[14]))


def all_stats():
    """ProcStat of every process on the machine, by pid."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(int(name))
            if st is not None:
                out[st.pid] = st
    return out


def descendants(root, stats):
    """pids of every live descendant of root (not root itself)."""
    children = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st.pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_cpu_seconds(root):
    """CPU seconds used so far by root, its live descendants and every descendant already
    reaped (counted in the reaper's cutime/cstime). Zombies are skipped: their time lands in
    the parent's cutime once reaped, so measure only when the tree is quiet."""
    stats = all_stats()
    if root not in stats:
        return 0.0
    ticks = stats[root].own_ticks + stats[root].reaped_children_ticks
    for pid in descendants(root, stats):
        st = stats[pid]
        if st.state != "Z":
            ticks += st.own_ticks + st.reaped_children_ticks
    return ticks / CLK_TCK


def children_set(root):
    stats = all_stats()
    return frozenset(descendants(root, stats))


def wait_until_quiet(root, settle=0.2, timeout=5.0):
    """Wait until root's set of descendants has stayed the same for `settle` seconds, so
    backends of a finished client have exited and been reaped. Returns False on timeout."""
    deadline = time.monotonic() + timeout
    last = children_set(root)
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now_set = children_set(root)
        if now_set != last:
            last, stable_since = now_set, time.monotonic()
        elif time.monotonic() - stable_since >= settle:
            return True
    return False


def thread_ids(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []
