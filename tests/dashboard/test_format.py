"""How the dashboard writes values, and its session and flash signatures: pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgenough.dashboard import format
from pgenough.dashboard.auth import Auth, Flash, cookie_path, safe_next
from pgenough.dashboard.defaults import DEFAULT_UI_SESSION_MAX_AGE


def test_values_are_written_for_people() -> None:
    assert format.count(1234567) == "1,234,567" and format.count(None) == "—"
    assert format.seconds(0.25) == "250 ms"
    assert format.seconds(4.25) == "4.2 s"
    assert format.seconds(42) == "42 s"
    assert format.seconds(185) == "3 min 5 s"
    assert format.seconds(7800) == "2 h 10 min"
    assert format.seconds(3 * 86400 + 4 * 3600) == "3 d 4 h"
    assert format.rate(12345.6) == "12,346/s" and format.rate(2.5) == "2.5/s"
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert format.instant(at) == "2025-01-02 03:04:05 UTC"
    assert format.instant("2025-01-02T04:04:05+01:00") == "2025-01-02 03:04:05 UTC"
    assert format.span(at, at + timedelta(seconds=90)) == 90.0
    assert format.span(at, None) is None
    assert format.status_class("PROCESSED") == "st-processed"
    assert format.relative(at + timedelta(seconds=12), at) == "in 12 s"
    assert format.relative(at - timedelta(seconds=185), at) == "3 min 5 s ago"
    assert format.relative(at + timedelta(milliseconds=300), at) == "now"
    assert format.relative(None, at) == "—"
    assert format.pretty_json({"b": [1], "a": "é"}) == '{\n  "a": "é",\n  "b": [\n    1\n  ]\n}'


def test_sessions_expire_and_do_not_cross_tokens() -> None:
    auth = Auth("token", now=1_000_000.0)
    value = auth.new_session()
    session = auth.session(value)
    assert session is not None and session.expires_at == 1_000_000 + DEFAULT_UI_SESSION_MAX_AGE
    assert "token" not in value
    assert Auth("other", now=1_000_000.0).session(value) is None
    assert Auth("token", now=1_000_000.0 + DEFAULT_UI_SESSION_MAX_AGE).session(value) is None
    assert Auth("token", session_max_age=60, now=1_000_060.0).session(value) is None
    assert auth.session(value.replace(".", ".0", 1)) is None
    assert Auth("token", now=1_000_000.0).session(value) == session  # replicas agree
    assert auth.session(auth.new_session()) != session  # each login is its own session


def test_tokens_compare_whatever_their_length() -> None:
    auth = Auth("s3cret")
    assert auth.token_matches("s3cret")
    for guess in ("", "s", "s3cre", "s3cret ", "S3CRET", "s3cret" * 100, "\x00"):
        assert not auth.token_matches(guess)


def test_only_dashboard_paths_are_redirect_targets() -> None:
    """Wherever the dashboard is mounted: its own pages, never another host's nor the
    application's other paths."""
    assert safe_next("/ui/jobs?state=dead", "/ui") == "/ui/jobs?state=dead"
    assert safe_next("/ui", "/ui") == "/ui"
    hostile = ("//evil.example/ui", "https://evil.example", "/\\evil", "", None, "/docs", "/uix")
    for value in hostile:
        assert safe_next(value, "/ui") == "/ui/"
    assert safe_next("/jobs", "") == "/jobs"  # at the root of its server
    for value in ("//evil.example", "https://evil.example", "/\\evil", "", None):
        assert safe_next(value, "") == "/"
    assert safe_next("/queue/failures", "/queue") == "/queue/failures"
    assert safe_next("/ui/failures", "/queue") == "/queue/"


def test_cookies_belong_to_where_the_dashboard_is_mounted() -> None:
    assert cookie_path("/queue") == "/queue"
    assert cookie_path("") == "/"


def test_flash_messages_are_signed() -> None:
    auth = Auth(None)
    assert isinstance(Flash("ok", "x"), Flash)
    value = auth.flash_cookie(Flash("ok", "job 7 will run again"))
    assert auth.read_flash_value(value) == Flash("ok", "job 7 will run again")
    assert auth.read_flash_value(value[:-1] + ("0" if value[-1] != "0" else "1")) is None
    assert Auth(None).read_flash_value(value) is None  # another process's secret
