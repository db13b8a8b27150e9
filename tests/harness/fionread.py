"""ioctl(FIONREAD) on a connection: what it counts before, during and after an answer.

SCRIPT runs under the client's target with argv: the family ("unix" or "tcp"), the address
(a socket path, or host:port), the repository root, and "epoll" or "poll": with "epoll" the
socket is first registered with an epoll set, so that the shim keeps it readable with
doorbell bytes (clientlib/channel.hpp) and the kernel's count on it is theirs. It speaks the
protocol on a Python socket, sends a query whose answer is about 3 kB and, once poll() says
the socket is readable, asks:
  idle      FIONREAD before the query: nothing to read
  first     FIONREAD as soon as poll() saw the answer's first bytes
  whole     with MSG_PEEK supported: FIONREAD once a peek shows the answer up to its
            ReadyForQuery, and that peek's length (a socket counts exactly those); else None
  got       what one recv() of 64 KiB then returned
  after     FIONREAD once all of the answer was read
The last stdout line is {"transport": <the fd's l5pg_fd_transport()>, "idle": ..., ...}.
"""

SCRIPT = r'''
import ctypes, errno, fcntl, json, select, socket, struct, sys, termios
family, address, repo, waiter = sys.argv[1:5]
sys.path.insert(0, repo)
from tests.harness import pgwire

def unread(s):
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0" * 4))[0]

def whole_answer(s):
    while True:
        try:
            seen = s.recv(65536, socket.MSG_PEEK)
        except OSError as e:
            if e.errno == errno.EOPNOTSUPP:
                return None  # RDMA: no MSG_PEEK
            raise
        if seen[-6:-1] == b"Z\0\0\0\x05":
            return [unread(s), len(seen)]
        select.select([s], [], [], 10)

if family == "unix":
    s = socket.socket(socket.AF_UNIX)
    s.connect(address)
else:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
s.sendall(pgwire.startup_packet(application_name="l5pg-fionread"))
pgwire.read_until_ready(s)
if waiter == "epoll":
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN)
shim = ctypes.CDLL(None)  # without the shim (a direct connection): transport 0
transport = shim.l5pg_fd_transport(s.fileno()) if hasattr(shim, "l5pg_fd_transport") else 0
out = {"transport": transport, "idle": unread(s)}
sql = b"select repeat('x', 3000)\0"
s.sendall(b"Q" + struct.pack("!I", 4 + len(sql)) + sql)
select.select([s], [], [], 10)
out["first"] = unread(s)
out["whole"] = whole_answer(s)
answer = s.recv(65536)
out["got"] = len(answer)
while answer[-6:-1] != b"Z\0\0\0\x05":
    answer += s.recv(65536)
out["after"] = unread(s)
print(json.dumps(out))
'''
