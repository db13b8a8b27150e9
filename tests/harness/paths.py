"""Locations of the repository, the build outputs and the PostgreSQL binaries."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("L5PG_BUILD_DIR") or (REPO / "build")).resolve()
L5PGD = BUILD_DIR / "bin" / "l5pgd"
# L5PG_SHIM_BUILD_DIR: the shim from another build (make test's sanitizer pass runs an
# instrumented l5pgd with the plain shim).
SHIM = Path(os.environ.get("L5PG_SHIM_BUILD_DIR") or BUILD_DIR).resolve() / "lib" / "libl5pg.so"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PSQL = str(PG_BIN / "psql")  # the real binary, not the /usr/bin perl wrapper
PGBENCH = str(PG_BIN / "pgbench")
