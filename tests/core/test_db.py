"""Connection errors name the server, never the password; pools and prepared statements."""

from __future__ import annotations

import traceback

import pytest

from pgenough.core import DatabaseError
from pgenough.core.db import open_pool, probe


@pytest.mark.parametrize(
    "url",
    [
        "postgresql//app:s3cret@127.0.0.1:1/nope",  # unparsable: libpq's error quotes it
        "postgresql://app:s3cret@127.0.0.1:1/nope?connect_timeout=1",
    ],
)
async def test_probe_errors_do_not_carry_the_password(url: str) -> None:
    with pytest.raises(DatabaseError) as caught:
        await probe(url, timeout=1)
    assert "s3cret" not in "".join(traceback.format_exception(caught.value))


@pytest.mark.db
@pytest.mark.parametrize("prepared", [True, False])
async def test_pools_prepare_repeated_statements_unless_told_not_to(
    database_url: str, prepared: bool
) -> None:
    """Off, nothing is prepared server-side: what a transaction-pooling PgBouncer < 1.21 needs
    (a prepared statement lives on one server session, the next transaction may get another)."""
    pool = await open_pool(database_url, max_size=1, prepared_statements=prepared)
    try:
        async with pool.connection() as conn:
            for i in range(10):  # psycopg prepares after 5 runs of one query
                await conn.execute("SELECT %s::int + 1", (i,))
            cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
            row = await cur.fetchone()
        assert row is not None
        assert (row[0] > 0) is prepared
    finally:
        await pool.close()
