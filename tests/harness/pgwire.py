"""Minimal PostgreSQL v3 wire helpers for raw-socket tests."""
import socket
import struct

PROTO_3_0 = 196608
PROTO_3_2 = PROTO_3_0 | 2  # PostgreSQL 18's, with longer cancel keys
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


def connect(host, port, timeout=5.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.settimeout(timeout)
    return s


def unix_login(path, database="postgres", timeout=20.0, **params):
    """A raw connection over the Unix socket `path`, logged in (trust or peer), ready;
    `params` go into the StartupMessage (application_name=...)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(str(path))
    s.sendall(startup_packet(database=database, **params))
    read_until_ready(s)
    return s


def startup_packet(user="postgres", database="postgres", **params):
    return startup_packet_of(dict(user=user, database=database, **params).items())


def startup_packet_of(pairs, version=PROTO_3_0):
    """A StartupMessage with exactly these (name, value) pairs, repeated names included."""
    body = struct.pack("!I", version)
    for k, v in pairs:
        body += k.encode() + b"\0" + v.encode() + b"\0"
    body += b"\0"
    return struct.pack("!I", len(body) + 4) + body


def request_packet(code):
    return struct.pack("!II", 8, code)


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_message(s):
    """(type char, body bytes) of one backend message."""
    hdr = recv_exact(s, 5)
    typ = chr(hdr[0])
    (length,) = struct.unpack("!I", hdr[1:5])
    if length < 4 or length > 1 << 30:
        raise ValueError(f"bad message length {length} for type {typ!r}")
    return typ, recv_exact(s, length - 4)


def parse_fields(body):
    """ErrorResponse / NoticeResponse body -> {field char: value}."""
    out = {}
    for part in body.split(b"\0"):
        if part:
            out[chr(part[0])] = part[1:].decode("utf-8", "replace")
    return out


def at_eof(s, timeout=5.0):
    """True if the peer closes the connection (recv returns b'' or the connection is reset)."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
            # Extra bytes after the error are unexpected but keep reading until EOF.
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def read_until_ready(s):
    """Messages up to and including ReadyForQuery; returns the list of (type, body)."""
    msgs = []
    while True:
        typ, body = read_message(s)
        msgs.append((typ, body))
        if typ in ("Z", "E"):
            return msgs


def parameter_statuses(msgs):
    """The ParameterStatus reports among (type, body) messages: {name: value}."""
    out = {}
    for typ, body in msgs:
        if typ == "S":
            name, value = body.rstrip(b"\0").split(b"\0")
            out[name.decode()] = value.decode()
    return out


def query(s, sql):
    body = sql.encode() + b"\0"
    s.sendall(b"Q" + struct.pack("!I", len(body) + 4) + body)
    return read_until_ready(s)


def terminate(s):
    try:
        s.sendall(b"X" + struct.pack("!I", 4))
    except OSError:
        pass
