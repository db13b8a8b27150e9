"""A minimal pure-Python L5 SHM client, for driving l5pgd's shared-memory transport directly
(well-behaved or hostile) from the test process without the shim.

Layout: see transport/shm/layout.hpp and docs/wire-format.md. Layout version 2: records are
[u32 length][payload][zero padding to 8], and the length word is the publication flag (0 =
nothing published yet). The writer's position is private; only read_pos is shared.
"""
import ctypes
import fcntl
import mmap
import os
import select
import socket
import struct
import tempfile
import time

from . import pgwire

L5_UPGRADE_CODE = (1234 << 16) | 5750
L5_VERSION = 1          # upgrade-request version (protocol/startup.hpp kL5UpgradeVersion)
L5_TRANSPORT_SHM = 1
L5_TRANSPORT_RDMA = 2

MAGIC = 0x314D485347503545
LAYOUT_VERSION = 2      # transport/shm/layout.hpp kLayoutVersion
HEADER_SIZE = 4096
RECORD_ALIGN = 8
RECORD_HEADER = 4       # the u32 length word

F_SEAL_SEAL = 1
F_SEAL_SHRINK = 2
F_SEAL_GROW = 4
F_SEAL_WRITE = 8
F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)

# Header field offsets (little-endian).
OFF_MAGIC = 0
OFF_VERSION = 8
OFF_HEADER_SIZE = 12
OFF_C2S_SIZE = 16
OFF_S2C_SIZE = 24
OFF_CLIENT_CLOSED = 64
OFF_SERVER_CLOSED = 128
OFF_C2S = 192
OFF_S2C = 384
# Within a RingControl (sizeof 192: one 64-byte line per field). There is no shared
# write_pos: the records' length words publish the data.
RC_READ_POS = 0
RC_READER_WAITING = 64
RC_WRITER_WAITING = 128


def footprint(payload_len):
    return (RECORD_HEADER + payload_len + RECORD_ALIGN - 1) & ~(RECORD_ALIGN - 1)


def max_record_payload(ring_size):
    return ring_size // 2 - RECORD_HEADER


def upgrade_packet(c2s, s2c, version=L5_VERSION, transport=L5_TRANSPORT_SHM):
    return struct.pack("!iIIIQQ", 32, L5_UPGRADE_CODE, version, transport, c2s, s2c)


def make_memfd(c2s, s2c, size=None, seal=True, magic=MAGIC, layout_version=LAYOUT_VERSION,
               header_size=HEADER_SIZE, hdr_c2s=None, hdr_s2c=None, name="l5wire",
               allocate=True, extra_seals=0):
    """A memfd laid out as an L5 segment (header written), every page written as the
    shim does (unless `allocate` is false), optionally sealed as the shim seals it (l5pgd
    adds FUTURE_WRITE and SEAL itself)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    total = HEADER_SIZE + c2s + s2c if size is None else size
    os.ftruncate(fd, total)
    if allocate:  # written: a page only fallocate()d is a hole to tmpfs (and to l5pgd)
        os.pwrite(fd, bytes(total), 0)
    hdr = struct.pack("<QIIQQ", magic, layout_version, header_size,
                      c2s if hdr_c2s is None else hdr_c2s, s2c if hdr_s2c is None else hdr_s2c)
    os.pwrite(fd, hdr, 0)
    if seal:
        fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | extra_seals)
    return fd


def make_regular_file(c2s, s2c, dir="/tmp"):
    """A regular (unsealable) file with a valid-looking header."""
    f = tempfile.TemporaryFile(dir=dir)
    f.truncate(HEADER_SIZE + c2s + s2c)
    f.seek(0)
    f.write(struct.pack("<QIIQQ", MAGIC, LAYOUT_VERSION, HEADER_SIZE, c2s, s2c))
    f.flush()
    fd = os.dup(f.fileno())
    f.close()
    return fd


def connect_unix(path, timeout=5.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    return s


def send_upgrade(sock, c2s, s2c, fd=None, **kw):
    """Send the upgrade request (with fd attached if given); return the one-byte answer."""
    pkt = upgrade_packet(c2s, s2c, **kw)
    if fd is None:
        sock.sendall(pkt)
    else:
        socket.send_fds(sock, [pkt], [fd])
    return pgwire.recv_exact(sock, 1)


class PeerClosed(Exception):
    pass


class ShmClient:
    """One L5 SHM session driven by hand from Python."""

    def __init__(self, socket_path, c2s=64 * 1024, s2c=64 * 1024, timeout=5.0):
        self.socket_path = str(socket_path)
        self.c2s_size = c2s
        self.s2c_size = s2c
        self.timeout = timeout
        self.sock = None
        self.fd = None
        self.mm = None
        self.c2s_write = 0      # our (private, never published) write position in c2s
        self.s2c_read = 0       # our read_pos in s2c
        self.eof = False        # socket EOF seen
        self.doorbells_sent = 0
        self.doorbells_received = 0
        self.nudges = 0         # doorbells sent without the flag being set (lost-wakeup fallback)
        self._inbuf = b""       # PG bytes read from s2c not yet consumed as messages

    # ------------------------------------------------------------------ setup
    def upgrade(self):
        """Connect, send the upgrade with a fresh sealed memfd; return the answer byte."""
        self.sock = connect_unix(self.socket_path, self.timeout)
        self.fd = make_memfd(self.c2s_size, self.s2c_size)
        self.mm = mmap.mmap(self.fd, HEADER_SIZE + self.c2s_size + self.s2c_size,
                            mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        answer = send_upgrade(self.sock, self.c2s_size, self.s2c_size, self.fd)
        # From now on the socket only carries doorbell bytes: never block on it.
        self.sock.setblocking(False)
        return answer

    def startup(self, **params):
        """Send a StartupMessage through the ring; return messages up to ReadyForQuery."""
        self.write_bytes(pgwire.startup_packet(**params))
        return self.read_until_ready()

    def close(self, clean=True):
        if clean and self.mm is not None and not self.eof:
            try:
                self.write_bytes(b"X" + struct.pack("!I", 4))
                self.poke32(OFF_CLIENT_CLOSED, 1)
            except (OSError, PeerClosed):
                pass
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(clean=exc[0] is None)
        return False

    # ------------------------------------------------------------------ raw fields
    # Positions, flags and record length words are std::atomic on the other side.
    # struct.pack_into/unpack_from copy byte by byte, so l5pgd could see a torn value
    # (e.g. 0xf8 -> 0x100 observed as 0x000, or a half-written length) and rightly call
    # it corrupt. A ctypes field access is one aligned native load or store, which is what
    # the C++ side does on x86-64.
    def peek64(self, off):
        return ctypes.c_uint64.from_buffer(self.mm, off).value

    def poke64(self, off, value):
        ctypes.c_uint64.from_buffer(self.mm, off).value = value & 0xFFFFFFFFFFFFFFFF

    def peek32(self, off):
        return ctypes.c_uint32.from_buffer(self.mm, off).value

    def poke32(self, off, value):
        ctypes.c_uint32.from_buffer(self.mm, off).value = value & 0xFFFFFFFF

    def c2s_field(self, field):
        return OFF_C2S + field

    def s2c_field(self, field):
        return OFF_S2C + field

    @property
    def c2s_base(self):
        return HEADER_SIZE

    @property
    def s2c_base(self):
        return HEADER_SIZE + self.c2s_size

    def ring_write(self, ring_base, size, pos, data):
        """Write data into a ring at logical position pos, wrapping modulo size."""
        idx = pos & (size - 1)
        first = min(len(data), size - idx)
        self.mm[ring_base + idx:ring_base + idx + first] = data[:first]
        if first < len(data):
            rest = data[first:]
            self.mm[ring_base:ring_base + len(rest)] = rest

    def ring_word_off(self, ring_base, size, pos):
        """mmap offset of the (8-aligned, hence never wrapping) length word at pos."""
        assert pos % RECORD_ALIGN == 0, pos
        return ring_base + (pos & (size - 1))

    def ring_read(self, ring_base, size, pos, n):
        idx = pos & (size - 1)
        first = min(n, size - idx)
        out = bytes(self.mm[ring_base + idx:ring_base + idx + first])
        if first < n:
            out += bytes(self.mm[ring_base:ring_base + n - first])
        return out

    # ------------------------------------------------------------------ doorbell
    def doorbell(self):
        """Send one doorbell byte. Returns False if the socket is gone."""
        try:
            self.sock.send(b"\x01", socket.MSG_NOSIGNAL)
            self.doorbells_sent += 1
            return True
        except OSError:
            return False

    def _ring_if_flag(self, off):
        if self.peek32(off) != 0:
            self.poke32(off, 0)
            return self.doorbell()
        return True

    def drain_socket(self):
        """Read pending doorbell bytes without blocking; sets self.eof on EOF."""
        while not self.eof:
            try:
                data = self.sock.recv(4096, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError, socket.timeout):
                return
            except ConnectionResetError:
                self.eof = True
                return
            if not data:
                self.eof = True
                return
            self.doorbells_received += len(data)

    def wait_eof(self, timeout=5.0):
        """True if l5pgd closes the socket within timeout (doorbell bytes are skipped)."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self.sock], [], [], left)
            if r:
                self.drain_socket()
        return True

    # ------------------------------------------------------------------ c2s writer
    def _publish_c2s(self, length_field, body):
        """Writer protocol at our write position: body (payload + padding) after the
        length word, zero the next record's length word, then publish with one aligned
        4-byte store of the length word. Advances our private write position."""
        pos = self.c2s_write
        self.ring_write(self.c2s_base, self.c2s_size, pos + RECORD_HEADER, body)
        nxt = pos + RECORD_HEADER + len(body)
        self.poke32(self.ring_word_off(self.c2s_base, self.c2s_size, nxt), 0)
        self.poke32(self.ring_word_off(self.c2s_base, self.c2s_size, pos), length_field)
        self.c2s_write = nxt

    def write_record_raw(self, length_field, payload=b"", ring=True):
        """Hostile-capable: write payload (zero-padded to 8) at our write position, zero the
        next length word, then store length_field (whatever it is) as this record's length
        word. No space check. A length_field of 0 publishes nothing, so our write position
        stays put and the next record overwrites this one."""
        body = payload + b"\0" * (footprint(len(payload)) - RECORD_HEADER - len(payload))
        pos = self.c2s_write
        self._publish_c2s(length_field, body)
        if length_field & 0xFFFFFFFF == 0:
            self.c2s_write = pos
        if ring:
            self.doorbell()

    def write_bytes(self, data, timeout=None):
        """Publish data as records in the c2s ring, waiting for space; doorbell if the
        server's reader_waiting flag is set."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        maxrec = max_record_payload(self.c2s_size)
        off = 0
        while off < len(data):
            read_pos = self.peek64(OFF_C2S + RC_READ_POS)
            if read_pos > self.c2s_write or read_pos % RECORD_ALIGN:
                raise AssertionError(f"server published an impossible c2s read_pos {read_pos} "
                                     f"(our write position {self.c2s_write})")
            free = self.c2s_size - (self.c2s_write - read_pos)
            # The last 8 free bytes are kept for the next record's length word.
            usable = (free & ~(RECORD_ALIGN - 1)) - RECORD_ALIGN
            n = min(len(data) - off, maxrec, max(usable - RECORD_HEADER, 0))
            if n <= 0:
                # Ring full: ask for a doorbell when the server consumes, then wait.
                self.poke32(OFF_C2S + RC_WRITER_WAITING, 1)
                read_pos2 = self.peek64(OFF_C2S + RC_READ_POS)
                if read_pos2 == read_pos:
                    self._wait_socket(min(0.05, max(deadline - time.monotonic(), 0)))
                    if self.eof:
                        raise PeerClosed("l5pgd closed the socket while we waited for space")
                if time.monotonic() > deadline:
                    raise TimeoutError("c2s ring stayed full")
                continue
            chunk = data[off:off + n]
            self._publish_c2s(n, chunk + b"\0" * (footprint(n) - RECORD_HEADER - n))
            off += n
            if not self._ring_if_flag(OFF_C2S + RC_READER_WAITING):
                raise PeerClosed("doorbell failed")

    # ------------------------------------------------------------------ s2c reader
    def _wait_socket(self, timeout):
        if timeout <= 0:
            return
        r, _, _ = select.select([self.sock], [], [], timeout)
        if r:
            self.drain_socket()

    def s2c_next_length(self):
        """The length word at our s2c read position (one aligned 4-byte load)."""
        return self.peek32(self.ring_word_off(self.s2c_base, self.s2c_size, self.s2c_read))

    def read_available(self):
        """Consume every complete record in the s2c ring; return the payload bytes."""
        out = b""
        size = self.s2c_size
        while True:
            length = self.s2c_next_length()
            if length == 0:
                break  # nothing published (yet)
            if length > max_record_payload(size):
                raise AssertionError(f"server wrote a corrupt s2c record length {length} "
                                     f"(our read_pos {self.s2c_read}, size {size})")
            out += self.ring_read(self.s2c_base, size, self.s2c_read + RECORD_HEADER, length)
            self.s2c_read += footprint(length)
            self.poke64(OFF_S2C + RC_READ_POS, self.s2c_read)
        if out:
            self._ring_if_flag(OFF_S2C + RC_WRITER_WAITING)
        return out

    def read_bytes(self, n_min=1, timeout=None):
        """Wait until at least n_min bytes are available from s2c (or timeout/EOF)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        out = b""
        last_progress = time.monotonic()
        while len(out) < n_min:
            got = self.read_available()
            if got:
                out += got
                last_progress = time.monotonic()
                continue
            if self.eof or self.peek32(OFF_SERVER_CLOSED):
                # Everything published before server_closed is readable; re-check once.
                got = self.read_available()
                out += got
                if not got:
                    break
                continue
            now = time.monotonic()
            if now > deadline:
                break
            # Arm reader_waiting, re-check, then sleep on the socket.
            self.poke32(OFF_S2C + RC_READER_WAITING, 1)
            if self.s2c_next_length() != 0:
                self.poke32(OFF_S2C + RC_READER_WAITING, 0)
                continue
            if now - last_progress > 1.0:
                # Fallback against a lost wakeup on our (fence-less, Python) side.
                self.nudges += 1
                self.doorbell()
                last_progress = now
            self._wait_socket(min(0.05, deadline - now))
        return out

    # ------------------------------------------------------------------ PG messages
    def read_message(self, timeout=None):
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if len(self._inbuf) >= 5:
                (length,) = struct.unpack("!I", self._inbuf[1:5])
                if len(self._inbuf) >= 1 + length:
                    typ = chr(self._inbuf[0])
                    body = self._inbuf[5:1 + length]
                    self._inbuf = self._inbuf[1 + length:]
                    return typ, body
            left = deadline - time.monotonic()
            got = self.read_bytes(1, timeout=max(left, 0))
            if not got:
                if self.eof or self.peek32(OFF_SERVER_CLOSED):
                    raise PeerClosed("l5pgd closed the session")
                if time.monotonic() >= deadline:
                    raise TimeoutError("no message from l5pgd")
            self._inbuf += got

    def read_until_ready(self, timeout=None):
        msgs = []
        while True:
            typ, body = self.read_message(timeout)
            msgs.append((typ, body))
            if typ == "Z":
                return msgs
            if typ == "E" and not any(t == "R" for t, _ in msgs):
                return msgs  # startup failure: no ReadyForQuery follows

    def query(self, sql, timeout=None):
        body = sql.encode() + b"\0"
        self.write_bytes(b"Q" + struct.pack("!I", len(body) + 4) + body)
        return self.read_until_ready(timeout)
