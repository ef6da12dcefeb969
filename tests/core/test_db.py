"""Connection errors name the server, never the password."""

from __future__ import annotations

import traceback

import pytest

from pgenough.core import DatabaseError
from pgenough.core.db import probe


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
