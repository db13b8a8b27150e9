"""psql through l5pgd: simple queries, scripts, errors, unicode."""
import pytest

from tests.harness.client import psql, psql_cmd, run


@pytest.mark.timeout(60)
def test_select(target):
    assert psql(target, "select 1+1") == "2"
    assert psql(target, "select current_user") == "postgres"


@pytest.mark.timeout(60)
def test_multi_statement_script(target):
    script = """
create temp table ms (id int primary key, v text);
insert into ms select g, 'v' || g from generate_series(1, 100) g;
update ms set v = upper(v) where id % 10 = 0;
select count(*) from ms;
select sum(id) from ms;
select string_agg(v, ',' order by id) from ms where id % 10 = 0;
"""
    r = run(psql_cmd("-f", "-"), target, input=script, timeout=60)
    lines = r.stdout.split("\n")
    # -At prints command tags for non-SELECT commands; keep only the query results.
    results = [ln for ln in lines if ln and not ln.startswith(("CREATE", "INSERT", "UPDATE"))]
    assert results == ["100", "5050", "V10,V20,V30,V40,V50,V60,V70,V80,V90,V100"], r.stdout


@pytest.mark.timeout(60)
def test_error_query(target):
    r = psql(target, "select 1/0", check=False)
    assert r.returncode != 0
    assert "ERROR:  division by zero" in r.stderr, r.stderr
    r = psql(target, "select * from no_such_table_l5pg", check=False)
    assert r.returncode != 0
    assert 'relation "no_such_table_l5pg" does not exist' in r.stderr, r.stderr
    # An error inside a session does not break the next statement of the same session.
    r = run(psql_cmd("-v", "ON_ERROR_STOP=0", "-f", "-"), target, input="select 1/0;\nselect 42;\n",
            check=False)
    assert "division by zero" in r.stderr
    assert r.stdout.strip() == "42"


@pytest.mark.timeout(60)
def test_unicode_round_trip(target):
    s = "héllo wörld ✓ 日本語 Ελληνικά 🐘 \u00e9\u0301"
    out = run(psql_cmd("-v", f"s={s}", "-f", "-"), target,
              input="select :'s', length(:'s'), octet_length(:'s');\n").stdout.strip()
    val, nchars, nbytes = out.split("|")
    assert val == s
    assert int(nchars) == len(s)
    assert int(nbytes) == len(s.encode("utf-8"))
