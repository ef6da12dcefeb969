"""The fetch worker's memory on one huge attribute value (issue 21): a planList whose single
title is 400 MB, sent plain and gzip-compressed (then 400 kB on the wire), fails its run with
the reason while it is read, and costs the worker no more than a normal snapshot does; the
normal provider fetched by the same worker at the same time is unharmed.

Measured on a real ``pgenough-plans worker fetch --once`` process, spawned through
``bench/_rusage.py`` (as ``test_bounds.py`` does) so that its peak RSS (``ru_maxrss``) is its
own. Before the gap bound the worker peaked at 840 MiB on such a document, against 78 MiB on the
normal snapshot alone (libxml2's push parser buffered the whole unfinished start tag, in a
buffer that doubled as it grew); now at 87 MiB plain and 80 MiB gzip."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.ingest.feed import MAX_GAP_BYTES
from tests.helpers.procs import ROOT
from tests.plan_service.ingest.badprovider import BadProvider, respond, streamed
from tests.plan_service.ingest.feedgen import huge_value, render, synthetic
from tests.plan_service.ingest.pipeline import assert_finished, dump, process

pytestmark = [pytest.mark.db, pytest.mark.slow]

HUGE_VALUE = 400_000_000
NORMAL_PLANS = 10_000
RSS_RATIO = 1.5
LAUNCHER = ROOT / "bench" / "_rusage.py"  # reports the worker's own peak RSS (os.wait4)
PGENOUGH = Path(sys.executable).with_name("pgenough-plans")
REASON = f"more than {MAX_GAP_BYTES} bytes without a new element"


@pytest.fixture(scope="module")
def normal_snapshot() -> bytes:
    return render(synthetic(NORMAL_PLANS, seed=21))


def measured_worker(
    env: dict[str, str], tmp_path: Path, tag: str, providers: dict[str, str]
) -> dict[str, int]:
    """Run ``pgenough-plans worker fetch --once`` for ``providers`` (name: URL) in one process; its
    exit code and peak RSS in KiB."""
    out = tmp_path / f"{tag}.json"
    command = [str(PGENOUGH), "worker", "fetch", "--once"]
    for name, url in providers.items():
        command += ["--provider", f"{name}={url}"]
    launched = subprocess.run(
        [sys.executable, str(LAUNCHER), str(out), "120", *command],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert launched.returncode == 0, launched.stderr
    usage = json.loads(out.read_text())
    return {"code": usage["code"], "maxrss_kib": usage["maxrss_kib"]}


async def runs_of(db: AsyncConnectionPool, provider: str) -> list[tuple[int, str, str | None]]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT id, status::text, reason FROM plans.runs WHERE provider = %s ORDER BY id",
            (provider,),
        )
        return [(int(r[0]), str(r[1]), r[2]) for r in await cur.fetchall()]


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
async def test_a_huge_attribute_value_costs_the_worker_no_more_than_a_normal_snapshot(
    db: AsyncConnectionPool,
    worker_env: dict[str, str],
    tmp_path: Path,
    normal_snapshot: bytes,
    gzip: bool,
    record_property: Callable[[str, object], None],
) -> None:
    with BadProvider() as provider:
        provider["/normal"] = respond(normal_snapshot)
        provider["/huge"] = streamed(functools.partial(huge_value, HUGE_VALUE), gzip=gzip)
        normal = provider.url("/normal")
        baseline = measured_worker(worker_env, tmp_path, "baseline", {"normal": normal})
        both = measured_worker(
            worker_env, tmp_path, "both", {"normal": normal, "huge": provider.url("/huge")}
        )
    record_property("peak_rss_kib_normal_snapshot", baseline["maxrss_kib"])  # in the JUnit XML
    record_property("peak_rss_kib_with_huge_value", both["maxrss_kib"])
    assert baseline["code"] == 0
    assert both["code"] == 1  # --once exits 1 when a run failed
    assert both["maxrss_kib"] <= RSS_RATIO * baseline["maxrss_kib"], (baseline, both)

    [(huge_run, status, reason)] = await runs_of(db, "huge")
    assert status == "FAILED"
    assert reason is not None and REASON in reason, reason
    await process(db)
    await assert_finished(db, huge_run, "FAILED", REASON)
    normal_runs = await runs_of(db, "normal")
    assert [s for _, s, _ in normal_runs] == ["PROCESSED", "PROCESSED"]
    run = await assert_finished(db, normal_runs[-1][0], "PROCESSED")
    assert (run["plans_staged"], run["plans_skipped"]) == (NORMAL_PLANS, 0)
    assert len(await dump(db, "normal")) == NORMAL_PLANS
    assert await dump(db, "huge") == []
