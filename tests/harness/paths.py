"""Locations of the repository, the build outputs and the PostgreSQL binaries."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("L5PG_BUILD_DIR") or (REPO / "build")).resolve()
L5PGD = BUILD_DIR / "bin" / "l5pgd"
SHIM = BUILD_DIR / "lib" / "libl5pg.so"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PSQL = str(PG_BIN / "psql")  # the real binary, not the /usr/bin perl wrapper
PGBENCH = str(PG_BIN / "pgbench")
