"""A DNS server for one test: answers A and AAAA queries for the names it is given (NXDOMAIN
for the rest) on a UDP port of a loopback address of its own (a free port, not 53: a host's
own DNS daemon may hold that on every address), counts the queries, and can hold its answers
until released. `isolated_resolver()` runs a command in a mount namespace whose
/etc/resolv.conf names this server alone ("nameserver ADDRESS:PORT", which libevent's
resolver reads and glibc's does not) and whose /etc/hosts knows only localhost."""
import ipaddress
import os
import random
import socket
import struct
import subprocess
import threading
from pathlib import Path

A, AAAA = 1, 28
NXDOMAIN = 3


def _question(packet):
    """(qname lower-case, qtype, the question's bytes) of a query."""
    pos, labels = 12, []
    while packet[pos]:
        length = packet[pos]
        labels.append(packet[pos + 1:pos + 1 + length].decode("ascii", "replace"))
        pos += 1 + length
    end = pos + 5
    qtype = struct.unpack("!H", packet[pos + 1:pos + 3])[0]
    return ".".join(labels).lower(), qtype, packet[12:end]


class DnsServer:
    def __init__(self, records):
        """records: {"name": ["127.0.0.2", "::1", ...]} (answered in this order)."""
        self.records = {name.lower(): list(addrs) for name, addrs in records.items()}
        self.queries = []  # (name, qtype) as received
        self.address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((self.address, 0))
        self.port = self._sock.getsockname()[1]
        self._sock.settimeout(0.1)
        self._released = threading.Event()
        self._released.set()
        self._held = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def hold(self):
        """Answers wait from now until release()."""
        self._released.clear()

    def release(self):
        with self._lock:
            held, self._held = self._held, []
            self._released.set()
        for reply, peer in held:
            self._sock.sendto(reply, peer)

    def count(self, name, qtype=A):
        with self._lock:
            return sum(1 for q in self.queries if q == (name.lower(), qtype))

    def _answer(self, packet):
        name, qtype, question = _question(packet)
        with self._lock:
            self.queries.append((name, qtype))
        (query_id,) = struct.unpack("!H", packet[:2])
        addrs = self.records.get(name)
        if addrs is None:
            return struct.pack("!HHHHHH", query_id, 0x8180 | NXDOMAIN, 1, 0, 0, 0) + question
        answers = b""
        count = 0
        for text in addrs:
            ip = ipaddress.ip_address(text)
            if (qtype == A) != (ip.version == 4) or qtype not in (A, AAAA):
                continue
            rdata = ip.packed
            answers += struct.pack("!HHHIH", 0xC00C, qtype, 1, 60, len(rdata)) + rdata
            count += 1
        return struct.pack("!HHHHHH", query_id, 0x8180, 1, count, 0, 0) + question + answers

    def _serve(self):
        while not self._stop:
            try:
                packet, peer = self._sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                reply = self._answer(packet)
            except (IndexError, struct.error):
                continue
            with self._lock:
                if not self._released.is_set():
                    self._held.append((reply, peer))
                    continue
            self._sock.sendto(reply, peer)

    def close(self):
        self._stop = True
        self._thread.join(timeout=5)
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def can_isolate():
        """Whether this process may make mount namespaces (root with CAP_SYS_ADMIN), and
        there is a resolv.conf to cover (not missing, not a dangling link)."""
        if not os.path.exists(os.path.realpath("/etc/resolv.conf")):
            return False
        try:
            return subprocess.run(["unshare", "--mount", "true"], capture_output=True,
                                  timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def isolated_resolver(self, workdir, command):
        """`command` wrapped to run (exec'd: same pid) with this server as its only DNS
        server, waiting up to 30 s for it, and an /etc/hosts of localhost alone."""
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        resolv = workdir / "resolv.conf"
        resolv.write_text(f"nameserver {self.address}:{self.port}\n"
                          "options timeout:30 attempts:1\n")
        hosts = workdir / "hosts"
        hosts.write_text("127.0.0.1 localhost\n")
        # Over a symlink (resolvconf's) the bind mount needs a file to cover: the target.
        script = (f"mount --bind {resolv} \"$(readlink -f /etc/resolv.conf)\" && "
                  f"mount --bind {hosts} /etc/hosts && exec \"$@\"")
        return ["unshare", "--mount", "--", "sh", "-c", script, "sh"] + list(command)
