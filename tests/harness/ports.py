"""Free TCP ports on the loopback interface, for servers the tests start.

Taken outside the kernel's ephemeral range (net.ipv4.ip_local_port_range): an outgoing
connection, of this test or of another pytest worker's running beside it, gets its local port
from that range, and could take a port handed out here before its server binds it."""
import random
import socket

_FIRST, _LAST = 10000, 65535


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago, chosen at random outside the
    ephemeral range (the kernel's choice, from inside it, if none of 200 tries was free)."""
    low, high = _ephemeral_range()
    ranges = [(a, b) for a, b in ((_FIRST, low - 1), (high + 1, _LAST)) if a <= b]
    sizes = [b - a + 1 for a, b in ranges]
    for _ in range(200):
        if not ranges:
            break
        i = random.choices(range(len(ranges)), weights=sizes)[0]
        port = random.randint(*ranges[i])
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
