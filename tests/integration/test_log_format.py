"""l5pgd's log lines: syslog priority prefixes for the journal (so `journalctl -p err`
filters), plain text without colour codes elsewhere."""
import os
import re

from tests.harness.client import psql, unix_target
from tests.harness.l5pgd import L5pgd

TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \d+ \[(info|warning|debug|error)\] ")


def start_with_journal_stream(workdir, cluster, monkeypatch, name, matching):
    d = L5pgd(workdir / name, cluster)
    d.base_dir.mkdir(parents=True, exist_ok=True)
    d.log_path.touch()
    st = os.stat(d.log_path)
    # systemd sets JOURNAL_STREAM to stderr's device:inode when stderr is the journal.
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + (0 if matching else 1)}")
    return d.start()


def refuse_one_client(d):
    r = psql(unix_target(d), "select 1", check=False, env={"PGUSER": "no_such_role_here"})
    assert r.returncode != 0


def test_journal_gets_priority_prefixes(workdir, cluster, monkeypatch):
    d = start_with_journal_stream(workdir, cluster, monkeypatch, "l5pgd-journal", True)
    try:
        refuse_one_client(d)
    finally:
        d.stop()
    lines = d.log_text().splitlines()
    assert any(ln.startswith("<6>l5pgd ready: ") for ln in lines), lines[:5]
    assert any(ln.startswith("<4>session ") and "refused" in ln for ln in lines), lines
    assert any(ln.startswith("<7>session ") for ln in lines)  # debug
    assert not any(TIMESTAMPED.match(ln) for ln in lines)  # journald adds time and pid


def test_elsewhere_plain_timestamped_lines_without_colour(workdir, cluster, monkeypatch):
    """A JOURNAL_STREAM inherited from a parent whose stderr was the journal does not count
    once stderr goes elsewhere (here: a file)."""
    d = start_with_journal_stream(workdir, cluster, monkeypatch, "l5pgd-plain", False)
    try:
        refuse_one_client(d)
    finally:
        d.stop()
    text = d.log_text()
    assert "\x1b[" not in text
    lines = [ln for ln in text.splitlines() if ln]
    assert all(TIMESTAMPED.match(ln) for ln in lines if not ln.startswith(" ")), lines[:5]
    assert any("[warning] session " in ln and "refused" in ln for ln in lines)


def test_client_names_cannot_start_log_lines(workdir, cluster, monkeypatch):
    """A newline in a name a client sends is written out (\\x0a), so it cannot forge a log line
    of its own, under the journal at a priority of its choosing; a double quote in it is
    escaped, so it cannot end the name and forge the fields after it either."""
    d = start_with_journal_stream(workdir, cluster, monkeypatch, "l5pgd-forged", True)
    forged = "<0>session 9: login: role \"postgres\" database \"app\""
    try:
        r = psql(unix_target(d), "select 1", check=False,
                 env={"PGUSER": "no_such_role_here", "PGDATABASE": f"app\n{forged}\r\x1b[2K"})
        assert r.returncode != 0
    finally:
        d.stop()
    lines = d.log_text().splitlines()
    assert not any(ln.startswith("<0>") for ln in lines), lines
    escaped = forged.replace('"', '\\"')
    assert any(ln.startswith("<4>session ") and
               f'database "app\\x0a{escaped}\\x0d\\x1b[2K")' in ln for ln in lines), lines
