"""recv()/send() flags the rings cannot carry, asked of an upgraded connection and of a plain
socket pair of the same family (clientlib/interpose_io.cpp, "flags the rings cannot carry").

SCRIPT runs under the client's target with argv: the family ("unix" or "tcp"), l5pgd's
address (the socket path, or host:port), the repository root. It speaks the protocol itself
on a Python socket, sends "select 42" and, while the answer waits unread, asks:
  oob_recv     recv(MSG_OOB): no urgent data is pending
  errqueue     recv(MSG_ERRQUEUE): the error queue (the plain AF_UNIX socket is not asked:
               the kernel hands out stream bytes there)
  oob_send     send(MSG_OOB) of one byte
  sendto_addr  sendto() of nothing with an address, the connection's own family's
  sendmsg_addr sendmsg() of nothing with that address
  sendto_badlen sendto() with an address length beyond sockaddr_storage
  null_send    send() of 5 bytes from a null buffer (EFAULT: the shim's copy used to crash)
  null_recv    recv() of 5 bytes into a null buffer while the answer waits (EFAULT, nothing read)
  trunc        recv_into(MSG_TRUNC) of 5 bytes into 0xff bytes: what came back, and the
               buffer's first byte after it (TCP discards; AF_UNIX copies)
  rest         the next 10 bytes: what follows the first 5 of the answer
  big_trunc    on a second answer (43 bytes of head, 600,000 'x', then 'C'):
               recv(NULL, 500000, MSG_TRUNC | MSG_WAITALL) after the head, the number of 'x'
               that follow it, and the byte after them (TCP discards all 500,000 at once;
               AF_UNIX fails to copy into null and reads nothing)
Before the query, with nothing to read, both are also asked (the "idle" answers):
  poll_null    poll(NULL, 1, 0) (EFAULT: the shim read the null array and crashed)
  recvfrom_fail recvfrom(MSG_DONTWAIT) with a null address and an address length of 77: the
               error, and the length, which a failing call leaves alone (the shim zeroed it)
  recvmsg_fail recvmsg(MSG_DONTWAIT) with msg_namelen 7 and msg_flags 99: the error, and both
               fields, which a failing call leaves alone (the shim zeroed them first)
The plain pair's peer sends the first 15 bytes of the same answer (its oob_recv is EINVAL
where the kernel has AF_UNIX urgent data, 5.15 and later, EOPNOTSUPP before). Answers are [result] or
[errno name]; the last stdout line is {"transport": <upgraded fd's>, "idle": {"shim": {...},
"socket": {...}}, "shim": {...}, "socket": {...}}.
"""

from tests.harness.libc_types import MSGHDR

SCRIPT = r'''
import ctypes, errno, json, select, socket, struct, sys, threading
family, address, repo = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, repo)
from tests.harness import pgwire

libc = ctypes.CDLL(None, use_errno=True)
ANSWER_HEAD = b"T\x00\x00\x00\x21\x00\x01?column?"  # RowDescription of select 42
BIG_SQL = b"select repeat('x', 600000) as repeat\0"
BIG_HEAD = 43  # RowDescription (32 bytes: one column "repeat"), DataRow's header (11)

def attempt(f):
    try:
        r = f()
        return [r.hex() if isinstance(r, bytes) else r]
    except OSError as e:
        return [errno.errorcode[e.errno]]

def libc_call(f):
    ctypes.set_errno(0)
    rc = f()
    return [rc] if rc >= 0 else [errno.errorcode[ctypes.get_errno()]]

def bad_length_sendto(s):
    addr = ctypes.create_string_buffer(256)
    return libc_call(lambda: libc.sendto(s.fileno(), b"", 0, 0, addr, 200))

def big_trunc(s):
    pgwire.recv_exact(s, BIG_HEAD)
    n = libc_call(lambda: libc.recv(s.fileno(), None, 500000,
                                    socket.MSG_TRUNC | socket.MSG_WAITALL))
    skipped = n[0] if isinstance(n[0], int) else 0
    rest = pgwire.recv_exact(s, 600000 - skipped + 1)
    return n + [rest.count(b"x"), rest[-1:].hex()]

''' + MSGHDR + r'''

def idle_cases(s):
    buf = ctypes.create_string_buffer(8)
    addrlen = ctypes.c_uint32(77)
    failed = libc_call(lambda: libc.recvfrom(s.fileno(), buf, 8, socket.MSG_DONTWAIT, None,
                                             ctypes.byref(addrlen)))
    iov = Iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
    msg = Msghdr(None, 7, ctypes.pointer(iov), 1, None, 0, 99)
    failed_msg = libc_call(lambda: libc.recvmsg(s.fileno(), ctypes.byref(msg),
                                                socket.MSG_DONTWAIT))
    return {"poll_null": libc_call(lambda: libc.poll(None, 1, 0)),
            "recvfrom_fail": failed + [addrlen.value],
            "recvmsg_fail": failed_msg + [msg.msg_namelen, msg.msg_flags]}

def cases(s, peer_addr, ask_errqueue, big_answer):
    select.select([s], [], [], 5)
    out = {"null_send": libc_call(lambda: libc.send(s.fileno(), None, 5, 0)),
           "null_recv": libc_call(lambda: libc.recv(s.fileno(), None, 5, socket.MSG_DONTWAIT))}
    out["oob_recv"] = attempt(lambda: s.recv(16, socket.MSG_OOB | socket.MSG_DONTWAIT))
    if ask_errqueue:
        out["errqueue"] = attempt(lambda: s.recv(16, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT))
    out["oob_send"] = attempt(lambda: s.send(b"x", socket.MSG_OOB))
    out["sendto_addr"] = attempt(lambda: s.sendto(b"", peer_addr))
    out["sendmsg_addr"] = attempt(lambda: s.sendmsg([b""], [], 0, peer_addr))
    out["sendto_badlen"] = bad_length_sendto(s)
    buf = bytearray(b"\xff" * 5)
    n = attempt(lambda: s.recv_into(buf, 5, socket.MSG_TRUNC))
    out["trunc"] = n + [buf[:1].hex()]
    out["rest"] = pgwire.recv_exact(s, 10).hex()
    big_answer()
    out["big_trunc"] = big_trunc(s)
    return out

def query_big(s):
    pgwire.recv_exact(s, 1 + 0x21 - len(ANSWER_HEAD))  # the rest of its RowDescription
    pgwire.read_until_ready(s)  # and of select 42's answer
    s.sendall(b"Q" + struct.pack("!I", 4 + len(BIG_SQL)) + BIG_SQL)

def send_big(b):  # from a thread: the pair's buffers hold less than the answer
    threading.Thread(target=b.sendall, args=(bytes(BIG_HEAD) + b"x" * 600000 + b"C",),
                     daemon=True).start()

if family == "unix":
    s = socket.socket(socket.AF_UNIX)
    s.connect(address)
    peer_addr = address
    a, b = socket.socketpair()
else:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    peer_addr = (host, int(port))
    listener = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(listener.getsockname())
    b, _ = listener.accept()
s.sendall(pgwire.startup_packet(application_name="l5pg-socket-flags"))
pgwire.read_until_ready(s)
idle = {"shim": idle_cases(s), "socket": idle_cases(a)}
sql = b"select 42\0"
s.sendall(b"Q" + struct.pack("!I", 4 + len(sql)) + sql)
b.sendall(ANSWER_HEAD)
print(json.dumps({"transport": ctypes.CDLL(None).l5pg_fd_transport(s.fileno()), "idle": idle,
                  "shim": cases(s, peer_addr, True, lambda: query_big(s)),
                  "socket": cases(a, peer_addr, family != "unix", lambda: send_big(b))}))
'''
