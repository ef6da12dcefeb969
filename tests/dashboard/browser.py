"""Chromium for the browser tests and the screenshots: Debian's /usr/bin/chromium driven by
Playwright (``playwright install`` is never run), in a throwaway profile."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

from tests.helpers.requirements import skip_unless

CHROMIUM: Final = Path(os.environ.get("PGENOUGH_CHROMIUM", "/usr/bin/chromium"))
ARGS: Final = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT: Final = {"width": 1280, "height": 800}


def require_browser() -> None:
    """Skip when Chromium or Playwright is missing, unless CI demands the browser tests
    (``PGENOUGH_REQUIRE_BROWSER=1``, set by .ci/run): then fail."""
    missing = None
    if not CHROMIUM.exists():
        missing = f"{CHROMIUM} is missing (apt-get install -y chromium)"
    else:
        try:
            import playwright.async_api  # noqa: F401
        except ImportError:
            missing = "playwright is not installed (pip install -e '.[test]')"
    skip_unless(missing, require="PGENOUGH_REQUIRE_BROWSER", what="Chromium for the browser tests")


@asynccontextmanager
async def chromium_page(*extra_args: str, **context: Any) -> AsyncIterator[Any]:
    """A page in a fresh Chromium profile, started with ``ARGS`` and ``extra_args``. The
    profile directory goes to ``launch_persistent_context``: Playwright refuses
    ``--user-data-dir`` among ``launch``'s arguments."""
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory(prefix="pgenough-chromium-") as profile:
        async with async_playwright() as p:
            ctx = await p.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                args=[*ARGS, *extra_args],
                headless=True,
                viewport=VIEWPORT,  # type: ignore[arg-type]
                **context,
            )
            try:
                page = ctx.pages[0] if ctx.pages else await ctx.new_page()
                yield page
            finally:
                await ctx.close()
