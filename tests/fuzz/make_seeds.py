#!/usr/bin/env python3
"""Writes the seed corpora in corpus/<target>/: small valid inputs for each fuzz target, so
libFuzzer starts from the formats' real shapes. Run it again after a format changes."""
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent


def startup(user="postgres", database="postgres", **params):
    body = struct.pack("!I", 3 << 16)
    for k, v in dict(user=user, database=database, **params).items():
        body += k.encode() + b"\0" + v.encode() + b"\0"
    body += b"\0"
    return struct.pack("!I", len(body) + 4) + body


def message(kind, body):
    return kind + struct.pack("!I", len(body) + 4) + body


def shm_ring(payloads):
    out = b""
    for p in payloads:
        rec = struct.pack("<I", len(p)) + p
        out += rec + b"\0" * (-len(rec) % 8)
    return out


def rdma_ring(payloads):
    out = b""
    for p in payloads:
        rec = struct.pack("<II", len(p), ~len(p) & 0xFFFFFFFF) + p + b"\x01"
        out += rec + b"\0" * (-len(rec) % 8)
    return out


def hello(kind=2, role=1):
    p = struct.pack("<IHBBIIHBB", 0x4452354C, 1, kind, role, 0x1234, 0x42, 0, 3, 0)
    p += b"\0" * 16 + b"\0" * 4
    p += struct.pack("<QIIQQQII", 0x7F0000001000, 0x99, 0, 4096, 4096, 0, 0, 0)
    return p


SEEDS = {
    "startup": {
        "startup": startup(),
        "startup_options": startup(application_name="x", options="-c work_mem=1MB"),
        "ssl_request": struct.pack("!II", 8, (1234 << 16) | 5679),
        "gssenc_request": struct.pack("!II", 8, (1234 << 16) | 5680),
        "cancel": struct.pack("!IIII", 16, (1234 << 16) | 5678, 4242, 0xDEADBEEF),
        "l5_upgrade": struct.pack("!IIII", 32, (1234 << 16) | 5750, 1, 1) + struct.pack("!QQ", 1 << 20, 1 << 20),
    },
    "framing": {
        "query": message(b"Q", b"select 1\0") + message(b"X", b""),
        "parse_bind": message(b"P", b"\0select $1\0\0\0") + message(b"B", b"\0\0\0\0\0\0\0\0") + message(b"S", b""),
    },
    "shm_ring": {
        "records": b"\xff\x10" + shm_ring([message(b"Q", b"select 1\0"), b"x" * 100]),
        "big_record": b"\x55\xff" + shm_ring([b"y" * 2000]),
    },
    "rdma_handshake": {
        "hello_client": hello(),
        "hello_server": hello(role=2),
        "offer_soft": bytes([2, 1]) + struct.pack("!H", 40000) + b"\0" * 4 + b"T" * 16,
    },
    "rdma_ring": {
        "records": b"\x20" + rdma_ring([message(b"Q", b"select 1\0"), b"z" * 300]),
    },
    "config": {
        "example": (HERE.parents[1] / "config" / "l5pgd.example.yaml").read_bytes(),
        "overrides": b"listen:\n  port: 6433\n\0auth.tcp=trust\nlimits.max_sessions=10\n",
        "tls": b"tls:\n  mode: require\n  cert_file: /c\n  key_file: /k\n",
    },
    "admin_console": {
        "show": message(b"Q", b"SHOW SESSIONS;\0") + message(b"Q", b"  show   version \0")
        + message(b"Q", b"show config\0") + message(b"Q", b"SHOW STATS\0"),
        "other": message(b"Q", b"select 1\0") + message(b"Q", b"\0") + message(b"Q", b"SHOW HELP"),
    },
    "pool_protocol": {
        "greeting": b"\x07" + message(b"R", struct.pack("!I", 0))
        + message(b"S", b"server_version\x0015.8\0") + message(b"K", struct.pack("!II", 42, 7))
        + message(b"Z", b"I"),
        "reset_answer": b"\x03" + message(b"C", b"DISCARD ALL\0") + message(b"Z", b"I")
        + message(b"C", b"RESET\0")
        + message(b"T", b"\0\x01?column?\0" + b"\0" * 18)
        + message(b"D", b"\0\x01" + struct.pack("!I", 28) + b"l5pgd-reset-0000000000000000")
        + message(b"C", b"SELECT 1\0") + message(b"Z", b"I"),
        "terminate": b"\x01" + message(b"Q", b"select 1\0") + message(b"X", b""),
        # the login check's answer that passes (protocol/pool_login_check.cpp: eight columns)
        "login_check": b"\x05" + message(b"T", b"\0\x08" + b"?column?\0" * 8)
        + message(b"D", b"\0\x08" + b"".join(
            struct.pack("!I", len(v)) + v for v in (b"postgres", b"postgres", b"t", b"t",
                                                     b"0 5 {work_mem=8MB}", b"t", b"t", b"t")))
        + message(b"C", b"SELECT 1\0") + message(b"Z", b"I"),
    },
    "ident_map": {
        "rules": b"# comment\nalice postgres\n1000 app\n  bob  writer # tail\n",
    },
}

for target, files in SEEDS.items():
    d = HERE / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
