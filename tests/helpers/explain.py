"""The plans PostgreSQL executes, read as they run: ``auto_explain`` on one connection, each
statement's ``EXPLAIN (ANALYZE, FORMAT JSON)`` sent to the client as a notice and collected."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest


@dataclass
class Plans:
    """The plans auto_explain reported on one connection."""

    reports: list[dict[str, Any]] = field(default_factory=list)

    def on_notice(self, diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        if "plan:" in text:
            self.reports.append(json.loads(text.split("plan:", 1)[1]))


async def explain_on(conn: psycopg.AsyncConnection[Any], plans: Plans, *settings: str) -> None:
    """Load auto_explain on ``conn`` and send its plans to ``plans``, with ``settings`` (e.g.
    ``log_min_duration = 0``) besides analyze, buffers and JSON; skips the test where the
    server refuses the module."""
    try:
        await conn.execute("LOAD 'auto_explain'")
    except psycopg.errors.InsufficientPrivilege as exc:
        pytest.skip(f"auto_explain cannot be loaded on this server: {exc}")
    for setting in (
        "log_analyze = on",
        "log_buffers = on",
        "log_timing = off",
        "log_format = json",
        "log_level = notice",
        *settings,
    ):
        await conn.execute(f"SET auto_explain.{setting}")
    conn.add_notice_handler(plans.on_notice)
