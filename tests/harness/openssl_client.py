"""A TLS client on libssl itself (ctypes), for what Python's ssl module cannot do: send a TLS
1.3 KeyUpdate that asks the peer to update its keys as well (SSL_key_update). Blocking, on a
connected socket; recv()/sendall() as pgwire's helpers use them."""
import ctypes
import ctypes.util
import socket
import struct

from tests.harness import pgwire

_ssl = ctypes.CDLL(ctypes.util.find_library("ssl") or "libssl.so.3")
_P, _I = ctypes.c_void_p, ctypes.c_int
for _name, _args, _ret in (
        ("TLS_client_method", [], _P),
        ("SSL_CTX_new", [_P], _P),
        ("SSL_CTX_free", [_P], None),
        ("SSL_new", [_P], _P),
        ("SSL_free", [_P], None),
        ("SSL_set_fd", [_P, _I], _I),
        ("SSL_connect", [_P], _I),
        ("SSL_read", [_P, _P, _I], _I),
        ("SSL_write", [_P, _P, _I], _I),
        ("SSL_key_update", [_P, _I], _I),
        ("SSL_get_error", [_P, _I], _I),
        ("SSL_version", [_P], _I)):
    _fn = getattr(_ssl, _name)
    _fn.argtypes, _fn.restype = _args, _ret

SSL_KEY_UPDATE_REQUESTED = 1
TLS1_3_VERSION = 0x0304


class TlsClient:
    """TLS over `sock` after l5pgd answered an SSLRequest with 'S' (no certificate check)."""

    def __init__(self, sock, timeout=30.0):
        # libssl calls recv()/send() on the descriptor itself: blocking, with the kernel's
        # timeouts instead of Python's (which make the descriptor non-blocking).
        sock.setblocking(True)
        tv = struct.pack("ll", int(timeout), int(timeout % 1 * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self.sock = sock
        self.ctx = _ssl.SSL_CTX_new(_ssl.TLS_client_method())
        self.ssl = _ssl.SSL_new(self.ctx)
        _ssl.SSL_set_fd(self.ssl, sock.fileno())
        ret = _ssl.SSL_connect(self.ssl)
        if ret != 1:
            raise OSError(f"TLS handshake failed: SSL_get_error {_ssl.SSL_get_error(self.ssl, ret)}")

    @classmethod
    def connect(cls, host, port, timeout=30.0):
        sock = pgwire.connect(host, port, timeout=timeout)
        sock.sendall(pgwire.request_packet(pgwire.SSL_REQUEST))
        if pgwire.recv_exact(sock, 1) != b"S":
            raise OSError("l5pgd declined TLS")
        return cls(sock, timeout)

    def tls13(self):
        return _ssl.SSL_version(self.ssl) == TLS1_3_VERSION

    def recv(self, n):
        buf = ctypes.create_string_buffer(n)
        ret = _ssl.SSL_read(self.ssl, buf, n)
        if ret <= 0:
            err = _ssl.SSL_get_error(self.ssl, ret)
            if err == 6:  # SSL_ERROR_ZERO_RETURN: close_notify
                return b""
            raise OSError(f"SSL_read: SSL_get_error {err}")
        return buf.raw[:ret]

    def sendall(self, data):
        while data:
            ret = _ssl.SSL_write(self.ssl, data, len(data))
            if ret <= 0:
                raise OSError(f"SSL_write: SSL_get_error {_ssl.SSL_get_error(self.ssl, ret)}")
            data = data[ret:]

    def request_key_update(self):
        """Queues a KeyUpdate asking the peer to answer with its own; the next write sends it."""
        if _ssl.SSL_key_update(self.ssl, SSL_KEY_UPDATE_REQUESTED) != 1:
            raise OSError("SSL_key_update failed")

    def close(self):
        _ssl.SSL_free(self.ssl)
        _ssl.SSL_CTX_free(self.ctx)
        self.sock.close()
