"""Several read replicas (``PGENOUGH_API_READ_URL`` as a list) and the dashboard's reads on
them: the syntax, the labels, the turn; on a real primary with two hot standbys
(``tests/helpers/standby``) started once for the module, a paused replica passed over, the
cache's fence per replica, both stopped then one restarted, a change on the dashboard within
the bound, an action's page showing its effect at once (read-your-writes), and the live
overview held to the change it announces."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue, publish
from pgenough.core.db import with_network_timeout
from pgenough.dashboard.auth import WROTE_COOKIE
from pgenough.dashboard.state import DashboardState, overview_event, reading
from pgenough.dashboard.views import READ_HEADER
from pgenough.jsonable import as_json
from pgenough_plans.api.errors import ApiConfigError
from pgenough_plans.api.models import StatusResponse
from pgenough_plans.api.replica import (
    PRIMARY,
    REPLICA,
    Lag,
    ReadUrlError,
    Replica,
    Replicas,
    as_user_of,
    label_of,
    labels_of,
    parse_read_urls,
)
from pgenough_plans.api.search import parse_query
from pgenough_plans.api.ui.reader import ReplicaReader
from pgenough_plans.ingest import inspect
from pgenough_plans.ingest.events import RUN_CHANGED
from pgenough_plans.settings import PlanSettings
from tests.helpers.standby import StandbyPair, standby_pair
from tests.plan_service.api.helpers import Plan, add_plans, api_settings, events, serving, state
from tests.plan_service.api.test_replica import WAIT, until

# The pure parts: the setting's syntax, the labels, the turn.


def test_a_read_url_is_one_url_or_conninfo_or_a_json_list() -> None:
    assert parse_read_urls(None) == ()
    assert parse_read_urls("  ") == ()
    assert parse_read_urls("postgresql://u@a,b:5433/db") == ("postgresql://u@a,b:5433/db",)
    assert parse_read_urls("host=a port=5433 dbname=db") == ("host=a port=5433 dbname=db",)
    assert parse_read_urls('["host=a dbname=db", " postgresql://b/db "]') == (
        "host=a dbname=db",
        "postgresql://b/db",
    )
    assert parse_read_urls(["postgresql://a/db", "postgresql://b/db"]) == (
        "postgresql://a/db",
        "postgresql://b/db",
    )
    for bad in ('["host=a"', "[1]", '["host=a", 3]', '[""]', '["a"] x'):
        with pytest.raises(ReadUrlError):
            parse_read_urls(bad)


def test_the_setting_takes_a_json_list_from_the_environment_and_a_bad_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "PGENOUGH_API_READ_URL", '["host=a port=5433 dbname=db", "postgresql://u:pw@b:5434/db"]'
    )
    settings = PlanSettings()
    # Each with the network timeouts added (the server's side too: replicas are direct).
    assert settings.api_config().read_urls == tuple(
        with_network_timeout(url, server_side=True)
        for url in ("host=a port=5433 dbname=db", "postgresql://u:pw@b:5434/db")
    )
    monkeypatch.setenv("PGENOUGH_API_READ_URL", "postgresql://u@c/db")
    assert PlanSettings().api_config().read_urls == (
        with_network_timeout("postgresql://u@c/db", server_side=True),
    )
    monkeypatch.setenv("PGENOUGH_API_READ_URL", '["postgresql://u@c/db"')
    with pytest.raises(ApiConfigError, match="PGENOUGH_API_READ_URL"):
        PlanSettings().api_config()


def test_labels_name_host_and_port_never_a_password() -> None:
    assert label_of("postgresql://u:s3cret@db2.example:5433/pg") == "db2.example:5433"
    assert label_of("host=a,b port=5433,5434 password=s3cret") == "a:5433,b:5434"
    assert label_of("dbname=pg") == "localhost:5432"
    # A multi-host URI leaves the port of a host given without one empty: the default.
    assert label_of("postgresql://u@[::1]:5433,h2/pg") == "[::1]:5433,h2:5432"
    assert label_of("host=/run/a,/run/b port=5432,5433") == "/run/a:5432,/run/b:5433"
    assert labels_of(["host=a dbname=x", "host=a dbname=y", "host=b"]) == (
        "a:5432#0",
        "a:5432#1",
        "b:5432",
    )
    assert all("s3cret" not in label for label in labels_of(["postgresql://u:s3cret@h/db"]))


def test_the_dashboards_role_reads_the_replicas_as_itself() -> None:
    """With PGENOUGH_UI_DATABASE_URL, the dashboard's pools on the API's replicas connect as
    its user, with its password; host, port and database stay the replica's."""
    dashboard = "postgresql://pgenough_ui:ui-pw@primary:5432/pgenough"
    url = as_user_of("postgresql://pgenough_api:api-pw@standby:5433/pgenough", dashboard)
    assert conninfo_to_dict(url) == {
        "user": "pgenough_ui",
        "password": "ui-pw",
        "host": "standby",
        "port": "5433",
        "dbname": "pgenough",
    }
    assert as_user_of("host=standby", "host=primary") == "host=standby"  # no user to take


def test_a_read_url_that_does_not_parse_is_a_config_error() -> None:
    with pytest.raises(ApiConfigError, match=r"^api_read_url: a read URL does not parse: [^\n]+$"):
        api_settings("host=primary", api_read_url="host=a port").api_config()


def _replicas(*lags: Lag) -> Replicas:
    return Replicas(tuple(Replica(None, lag) for lag in lags))  # type: ignore[arg-type]


def test_reads_take_turns_among_the_replicas_within_the_bound() -> None:
    a, b, c = (Lag(1.0, name) for name in "abc")
    replicas = _replicas(a, b, c)
    assert replicas.candidates() == [] and replicas.reading == PRIMARY
    for lag in (a, b, c):
        lag.up, lag.lag, lag.replayed = True, 0.1, 100
    firsts = [replicas.candidates()[0].label for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]
    b.lag = 2.0  # past the bound
    c.up, c.lag = False, math.inf  # away
    assert [r.label for r in replicas.candidates()] == ["a"]
    assert replicas.reading == REPLICA and replicas.lag == 0.1
    b.lag, c.up, c.lag = 0.1, True, 0.1
    c.replayed = 200
    # A read that must see position 150 (a browser's own write): only c has it.
    assert [r.label for r in replicas.candidates(at_least=150)] == ["c"]


# On a real primary with two standbys.


@pytest.fixture(scope="module")
def pair() -> Iterator[StandbyPair]:
    with standby_pair(standbys=2) as started:
        yield started


@pytest.fixture
async def fresh(pair: StandbyPair, primary: AsyncConnectionPool) -> StandbyPair:
    """No plans and no jobs, on every server; every standby running and replaying."""
    for i in range(2):
        if not pair.running(i):
            pair.start_standby(i)
    pair.resume_replay()
    async with primary.connection() as conn:
        await conn.execute("DELETE FROM plans.plans")
        await conn.execute("DELETE FROM pgenough.jobs")
    pair.wait_replayed()
    return pair


def settings(pair: StandbyPair, **overrides: Any) -> PlanSettings:
    """The API on the pair's primary, reading both standbys (given as a JSON list)."""
    values: dict[str, Any] = {"api_read_url": pair.standby_urls, "api_cache_ttl": 0.0}
    values.update(overrides)
    return api_settings(pair.primary_url, **values)


PLAN_A = Plan("a", "2021-06-01T10:00:00Z", "2021-06-01T12:00:00Z")
PLAN_B = Plan("b", "2021-06-02T10:00:00Z", "2021-06-02T12:00:00Z")


def page(limit: int = 10) -> str:
    return f"/search?starts_at=2021-06-01&ends_at=2021-07-01&limit={limit}"


def ids(response: httpx.Response) -> list[str]:
    return [e["id"] for e in events(response)]


def reads(reader: str, label: str) -> float:
    """``pgenough_api_replica_reads_total`` of ``reader`` on replica ``label`` so far."""
    value = REGISTRY.get_sample_value(
        "pgenough_api_replica_reads_total",
        {"reader": reader, "target": REPLICA, "replica": label},
    )
    return value or 0.0


@pytest.mark.slow
async def test_a_paused_replica_past_the_bound_is_passed_over_for_the_other(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    first, second = fresh.standby_label(0), fresh.standby_label(1)
    async with serving(settings(fresh, api_max_replica_lag=1.0)) as (app, client):
        replicas = state(app).replicas
        assert replicas is not None
        lag0, lag1 = replicas.measures
        assert (lag0.label, lag1.label) == (first, second)
        await until(lambda: lag0.within and lag1.within, "both replicas are read")
        fresh.pause_replay(0)
        await add_plans(primary, PLAN_A)
        await until(lambda: not lag0.within, "the paused replica passes the bound")
        assert lag1.within
        before = reads("search", first), reads("search", second)
        for _ in range(6):
            assert ids(await client.get(page())) == [PLAN_A.id]  # never the stale answer
        assert reads("search", first) == before[0]
        assert reads("search", second) == before[1] + 6

        body = (await client.get("/health/ready")).json()
        StatusResponse.model_validate(body)  # as the OpenAPI document says
        ready = body["data"]["replica"]
        assert ready["reading"] == REPLICA
        shown = {r["replica"]: r for r in ready["replicas"]}
        assert shown[first]["within"] is False and shown[first]["lag_seconds"] > 1.0
        assert shown[second]["within"] is True
        metrics = (await client.get("/metrics")).text
        for label in (first, second):
            assert f'pgenough_api_replica_lag_seconds{{replica="{label}"}}' in metrics

        fresh.resume_replay(0)
        await until(lambda: lag0.within, "the paused replica catches up")
        for _ in range(4):
            assert ids(await client.get(page())) == [PLAN_A.id]
        assert reads("search", first) == before[0] + 2  # its turn again


@pytest.mark.slow
async def test_the_cache_fence_holds_per_replica(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    """With one standby paused within the bound, searches alternate: the paused one's
    answers (without PLAN_B) are served but never cached; the other's are."""
    async with serving(settings(fresh, api_max_replica_lag=60.0, api_cache_ttl=60.0)) as (
        app,
        client,
    ):
        api = state(app)
        replicas = api.replicas
        assert replicas is not None
        await until(lambda: all(lag.within for lag in replicas.measures), "both are read")
        await add_plans(primary, PLAN_A)
        fresh.wait_replayed()
        fresh.pause_replay(1)
        seen = api.cache.invalidations
        await add_plans(primary, PLAN_B, notify=True)
        await until(lambda: api.cache.invalidations > seen, "the invalidation arrives")
        await until(lambda: api.cache.fence is not None, "the fence is read")
        fresh.wait_replayed(i=0)

        answers = []
        for limit in range(10, 18):  # each its own cache key: every one asks a replica
            answers.append(ids(await client.get(page(limit))))
            key = parse_query([("starts_at", "2021-06-01"), ("ends_at", "2021-07-01"),
                               ("limit", str(limit))], api.cursor_key).cache_key  # fmt: skip
            cached = api.cache.get(key)
            if cached is not None:
                assert PLAN_B.id.encode() in cached.body, "a stale page was cached"
        assert [PLAN_A.id] in answers, "the paused replica was never read"
        assert [PLAN_A.id, PLAN_B.id] in answers, "the other replica was never read"
        assert len(api.cache) == answers.count([PLAN_A.id, PLAN_B.id])


@pytest.mark.slow
async def test_both_stopped_read_the_primary_and_a_restarted_one_is_read_again(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    first = fresh.standby_label(0)
    async with serving(settings(fresh)) as (app, client):
        replicas = state(app).replicas
        assert replicas is not None
        lag0, lag1 = replicas.measures
        await until(lambda: lag0.within and lag1.within, "both replicas are read")
        labels = {"reader": "search", "reason": "unreachable"}
        unreachable = REGISTRY.get_sample_value("pgenough_api_replica_fallbacks_total", labels)
        fresh.stop_standby(0)
        fresh.stop_standby(1)
        await add_plans(primary, PLAN_A)
        # The first searches may still try a replica: they fall back, never a 500.
        assert ids(await client.get(page())) == [PLAN_A.id]
        await until(lambda: replicas.reading == PRIMARY, "both replicas are seen gone")
        for _ in range(3):
            assert ids(await client.get(page())) == [PLAN_A.id]
        ready = (await client.get("/health/ready")).json()["data"]["replica"]
        assert ready["reading"] == PRIMARY and ready["lag_seconds"] is None
        assert [r["up"] for r in ready["replicas"]] == [False, False]
        now = REGISTRY.get_sample_value("pgenough_api_replica_fallbacks_total", labels)
        assert now is not None and now - (unreachable or 0.0) >= 3

        fresh.start_standby(0)
        await until(lambda: lag0.within, "the restarted replica is read again")
        assert not lag1.up
        before = reads("search", first)
        await add_plans(primary, PLAN_B)
        fresh.wait_replayed(i=0)
        for _ in range(3):
            assert ids(await client.get(page())) == [PLAN_A.id, PLAN_B.id]
        assert reads("search", first) == before + 3


# The dashboard on the replicas.

JOB_PAGE = re.compile(r"<dt>state</dt><dd>(\w+)</dd>")


def job_state(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    match = JOB_PAGE.search(response.text)
    assert match, "the job page shows no state"
    return match.group(1)


def csrf_of(text: str) -> str:
    match = re.search(r'name="csrf" (?:value|content)="([^"]+)"', text)
    assert match, "the page has no CSRF field"
    return match.group(1)


async def new_job(primary: AsyncConnectionPool) -> int:
    async with primary.connection() as conn:
        job_id = await enqueue(conn, "noop", queue="replica-ops")
    assert job_id is not None
    return job_id


@pytest.mark.slow
async def test_a_change_on_the_primary_shows_on_the_dashboard_within_the_bound(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    bound = 2.0
    async with serving(settings(fresh, api_max_replica_lag=bound)) as (app, client):
        replicas = state(app).replicas
        assert replicas is not None
        await until(lambda: replicas.reading == REPLICA, "the replicas are read")
        before = sum(reads("dashboard", fresh.standby_label(i)) for i in range(2))
        job_id = await new_job(primary)
        sources = []

        async def shown() -> bool:
            response = await client.get("/ui/jobs?queue=replica-ops")
            assert response.status_code == 200, response.text
            sources.append(response.headers[READ_HEADER])
            return f"/ui/jobs/{job_id}" in response.text

        await until(shown, "the new job is on the dashboard", timeout=bound)
        assert all(source.startswith(f"{REPLICA} ") for source in sources), sources
        after = sum(reads("dashboard", fresh.standby_label(i)) for i in range(2))
        assert after >= before + len(sources)
        text = (await client.get("/ui/jobs")).text
        assert re.search(r"read from replica \S+, at most [0-9.]+ s behind", text)


@pytest.mark.slow
async def test_an_actions_page_shows_its_effect_at_once_read_your_writes(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    """Replay paused on both standbys, well within a 60 s bound: the page an action
    redirects to reads the primary and shows the action done, while a browser that did
    nothing still reads a replica, as it may; once the replicas replay the write the
    acting browser reads them again."""
    job_id = await new_job(primary)
    fresh.wait_replayed()
    job_page = f"/ui/jobs/{job_id}"
    async with (
        serving(settings(fresh, api_max_replica_lag=60.0, ui_actions=True)) as (app, client),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=str(client.base_url)
        ) as bystander,
    ):
        replicas = state(app).replicas
        assert replicas is not None
        await until(lambda: all(lag.within for lag in replicas.measures), "both are read")
        fresh.pause_replay(0)
        fresh.pause_replay(1)
        seen = await client.get(job_page)
        assert job_state(seen) == "ready"
        assert seen.headers[READ_HEADER].startswith(REPLICA)

        response = await client.post(
            f"{job_page}/discard", data={"csrf": csrf_of(seen.text), "next": job_page}
        )
        assert response.status_code == 303 and response.headers["location"] == job_page
        assert WROTE_COOKIE in response.cookies
        after = await client.get(job_page)
        assert job_state(after) == "cancelled"
        assert after.headers[READ_HEADER] == PRIMARY
        assert "read from the primary" in after.text
        # Not because the replicas were out: another browser still reads them, stale.
        other = await bystander.get(job_page)
        assert job_state(other) == "ready" and other.headers[READ_HEADER].startswith(REPLICA)

        fresh.resume_replay()
        fresh.wait_replayed()
        await until(lambda: all(lag.within for lag in replicas.measures), "both are read")

        async def on_a_replica() -> bool:
            again = await client.get(job_page)
            assert job_state(again) == "cancelled"
            return again.headers[READ_HEADER].startswith(REPLICA)

        # The cookie still holds; the replicas have the write, so they are read again.
        await until(on_a_replica, "the acting browser reads a replica again", timeout=WAIT)


@pytest.mark.slow
async def test_the_live_overview_never_shows_a_change_it_announced_missing(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    """Replay paused within the bound: after a run_changed message, the feed's snapshot
    reads only a replica that has the change (here none: the primary), while a plain read
    still gets a replica without it."""
    async with serving(settings(fresh, api_max_replica_lag=60.0)) as (app, _):
        replicas = state(app).replicas
        ui: DashboardState = app.state.dashboard.state
        assert replicas is not None and isinstance(ui.reader, ReplicaReader)
        await until(lambda: all(lag.within for lag in replicas.measures), "both are read")
        await until(lambda: ui.feed.fence is not None, "the feed's first fence is read")
        fresh.pause_replay(0)
        fresh.pause_replay(1)
        before = ui.feed.fence
        async with primary.connection() as conn, conn.transaction():
            await enqueue(conn, "noop", queue="replica-live")
            await publish(conn, RUN_CHANGED, "{}")
        await until(lambda: ui.feed.fence != before, "the feed reads a new fence")

        event = await overview_event(ui)
        assert event.name == "overview" and "replica-live" in event.data
        async with reading(ui) as read:  # no fence: a replica, as of before the change
            assert read.source is not None and read.source.startswith(f"{REPLICA} ")
            stale = as_json(await inspect.overview(read.conn))
        assert "replica-live" not in json.dumps(stale)


@pytest.mark.slow
async def test_past_the_bound_the_dashboard_reads_the_primary_and_says_so(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    async with serving(settings(fresh, api_max_replica_lag=1.0)) as (app, client):
        replicas = state(app).replicas
        assert replicas is not None
        await until(lambda: all(lag.within for lag in replicas.measures), "both are read")
        fresh.pause_replay(0)
        fresh.pause_replay(1)
        job_id = await new_job(primary)
        await until(lambda: replicas.reading == PRIMARY, "both pass the bound")
        labels = {"reader": "dashboard", "reason": "lag"}
        before = REGISTRY.get_sample_value("pgenough_api_replica_fallbacks_total", labels)
        response = await client.get("/ui/jobs?queue=replica-ops")
        assert response.status_code == 200, response.text
        assert f"/ui/jobs/{job_id}" in response.text  # fresh: read on the primary
        assert response.headers[READ_HEADER] == PRIMARY
        assert "read from the primary" in response.text
        after = REGISTRY.get_sample_value("pgenough_api_replica_fallbacks_total", labels)
        assert after is not None and after - (before or 0.0) == 1
