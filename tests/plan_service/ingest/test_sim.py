"""The provider simulator (sim/server.py and sim/data.py), through a real SimServer and
httpx. No database."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from lxml import etree

from pgenough_plans.sim.data import (
    BYTES_PER_PLAN,
    CHUNK_BYTES,
    SimPlan,
    SimZone,
    render_plans,
    render_snapshot,
    snapshot_plans,
)
from pgenough_plans.sim.server import SimServer, parse_fault
from tests.plan_service.ingest.records import parse_bytes

ROOT = Path(__file__).resolve().parents[2]
SEED = 7
PLANS = 1000
TIMEOUT = httpx.Timeout(10.0)
RESET_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError)


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(plans=PLANS, seed=SEED) as sim:
        yield sim


@pytest.fixture
def sim(server: SimServer) -> SimServer:
    """The module's server with an empty fault queue, no counts, and versions from 1."""
    server.reset()
    return server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=TIMEOUT) as c:
        yield c


def full_document(version: int, plans: int = PLANS, **kwargs: object) -> bytes:
    return b"".join(render_snapshot(SEED, version, plans, **kwargs))  # type: ignore[arg-type]


def parse_plans(document: bytes, variant: str = "planList") -> list[SimPlan]:
    """The plans of a document, read with lxml, as SimPlans."""
    base, plan = ("base_plan", "plan") if variant == "planList" else ("base_event", "event")
    root = etree.fromstring(document)
    assert root.tag == variant
    (output,) = root
    found = []
    for bp in output:
        assert bp.tag == base
        org = bp.get("organizer_company_id")
        for p in bp:
            assert p.tag == plan
            zones = tuple(
                SimZone(
                    zone_id=int(z.get("zone_id")),
                    capacity=int(z.get("capacity")),
                    price=z.get("price"),
                    name=z.get("name"),
                    numbered=z.get("numbered") == "true",
                )
                for z in p
            )
            found.append(
                SimPlan(
                    base_plan_id=int(bp.get(f"{base}_id")),
                    sell_mode=bp.get("sell_mode"),
                    title=bp.get("title"),
                    organizer_company_id=int(org) if org is not None else None,
                    plan_id=int(p.get(f"{plan}_id")),
                    plan_start_date=p.get(f"{plan}_start_date"),
                    plan_end_date=p.get(f"{plan}_end_date"),
                    sell_from=p.get("sell_from"),
                    sell_to=p.get("sell_to"),
                    sold_out=p.get("sold_out") == "true",
                    zones=zones,
                )
            )
    return found


# --- the generator -------------------------------------------------------------------------------


@pytest.mark.parametrize("plans", [0, 1, 2, 3, 10, 1001])
def test_a_snapshot_has_exactly_the_plans_asked_for(plans: int) -> None:
    content = list(snapshot_plans(SEED, 4, plans))
    assert len(content) == plans
    assert len({p.key for p in content}) == plans  # (base_plan_id, plan_id) identifies a plan
    assert parse_plans(full_document(4, plans)) == content


def test_snapshots_are_pure_functions_of_seed_version_and_plans() -> None:
    assert list(snapshot_plans(SEED, 3, 500)) == list(snapshot_plans(SEED, 3, 500))
    assert full_document(3) == full_document(3)
    assert full_document(3) != full_document(4)
    assert full_document(3) != b"".join(render_snapshot(SEED + 1, 3, PLANS))


@pytest.mark.parametrize("variant", ["planList", "eventList"])
@pytest.mark.parametrize("malformed", [0.0, 0.05])
def test_the_fast_renderer_writes_what_the_reference_renderer_writes(
    variant: str, malformed: float
) -> None:
    fast = b"".join(render_snapshot(SEED, 9, 3000, variant=variant, malformed=malformed))  # type: ignore[arg-type]
    content = snapshot_plans(SEED, 9, 3000, malformed=malformed)
    assert fast == "".join(render_plans(content, variant)).encode()  # type: ignore[arg-type]


def test_chunks_are_about_64_kib_and_plans_average_the_documented_size() -> None:
    sizes = [len(c) for c in render_snapshot(SEED, 1, 20_000)]
    assert all(0.75 * CHUNK_BYTES < s < 1.35 * CHUNK_BYTES for s in sizes[:-1])
    assert sum(sizes) / 20_000 == pytest.approx(BYTES_PER_PLAN, rel=0.05)
    zones = [len(p.zones) for p in snapshot_plans(SEED, 1, 20_000)]
    assert sum(zones) / len(zones) == pytest.approx(3.9, abs=0.3)


def test_versions_evolve_in_the_documented_ways() -> None:
    before = {p.key: p for p in snapshot_plans(SEED, 10, 5000)}
    after = {p.key: p for p in snapshot_plans(SEED, 11, 5000)}
    vanished, appeared = before.keys() - after.keys(), after.keys() - before.keys()
    assert len(before) == len(after) == 5000
    assert len(vanished) == len(appeared)
    assert 0 < len(vanished) < 0.1 * 5000
    common = before.keys() & after.keys()
    changed: Counter[str] = Counter()
    for key in common:
        a, b = before[key], after[key]
        changed["title"] += a.title != b.title
        changed["sell_mode"] += a.sell_mode != b.sell_mode
        changed["end"] += a.plan_end_date != b.plan_end_date
        changed["prices"] += [z.price for z in a.zones] != [z.price for z in b.zones]
        changed["any"] += a != b
    assert all(changed[k] > 0 for k in ("title", "sell_mode", "end", "prices")), changed
    assert changed["any"] < 0.3 * len(common), changed  # most plans stay as they were

    modes = defaultdict(set)  # base plans that were both online and offline over 40 versions
    for version in range(10, 50):
        for p in snapshot_plans(SEED, version, 2000):
            modes[p.base_plan_id].add(p.sell_mode)
    assert any(m == {"online", "offline"} for m in modes.values())


def test_traps_are_present_at_5k_plans() -> None:
    content = list(snapshot_plans(SEED, 1, 5000))
    base_plans_of_plan_id = defaultdict(set)
    for p in content:
        base_plans_of_plan_id[p.plan_id].add(p.base_plan_id)
    assert any(len(b) > 1 for b in base_plans_of_plan_id.values()), "plan_id reused"
    impossible = [p for p in content if p.starts_at is None]
    assert impossible and all(not p.valid and p.defect is None for p in impossible)
    assert any(p.sell_mode == "offline" for p in content)
    repeated = [
        p
        for p in content
        if any(
            len({z.price for z in p.zones if z.zone_id == zid}) > 1
            for zid, n in Counter(z.zone_id for z in p.zones).items()
            if n > 1
        )
    ]
    assert repeated, "a zone_id repeated with another price"
    assert any(z.capacity == 0 for p in content for z in p.zones)
    titles = {p.title for p in content}
    assert any("&" in t for t in titles)
    assert any('"' in t for t in titles)
    assert any("<" in t for t in titles)
    assert any(not t.isascii() for t in titles)
    assert parse_plans(full_document(1, 5000)) == content  # escaped, and read back as written


# --- the server ----------------------------------------------------------------------------------


def test_snapshot_is_xml_identical_for_a_pinned_version(
    sim: SimServer, client: httpx.Client
) -> None:
    first = client.get(sim.url, params={"version": 3})
    second = client.get(sim.url, params={"version": 3})
    assert first.status_code == 200
    assert first.headers["content-type"] == "application/xml"
    assert first.headers["x-sim-version"] == "3"
    assert first.content == second.content == full_document(3)


def test_each_unpinned_request_takes_the_next_version(sim: SimServer, client: httpx.Client) -> None:
    versions = [int(client.get(sim.url).headers["x-sim-version"]) for _ in range(3)]
    assert versions == [1, 2, 3]
    assert client.get(sim.url, params={"version": 40}).headers["x-sim-version"] == "40"
    response = client.get(sim.base_url + "/snapshot")
    assert response.headers["x-sim-version"] == "4"  # a pinned request takes no version
    assert response.content == full_document(4)


def test_a_1k_document_parses_to_snapshot_plans(sim: SimServer, client: httpx.Client) -> None:
    response = client.get(sim.url, params={"version": 2})
    assert parse_plans(response.content) == list(snapshot_plans(SEED, 2, PLANS))


def test_query_overrides_plans_seed_and_variant(sim: SimServer, client: httpx.Client) -> None:
    response = client.get(sim.url, params={"version": 2, "plans": 50, "seed": 99})
    assert parse_plans(response.content) == list(snapshot_plans(99, 2, 50))
    for response in (
        client.get(sim.url, params={"version": 2, "variant": "eventList"}),
        client.get(sim.base_url + "/eventList", params={"version": 2}),
    ):
        assert parse_plans(response.content, "eventList") == list(snapshot_plans(SEED, 2, PLANS))


@pytest.mark.parametrize(
    "params",
    [
        {"plans": "-1"},
        {"plans": "x"},
        {"version": "-2"},
        {"variant": "xml"},
        {"fault": "bogus"},
        {"fault": "hostile:xxe-net", "net_port": "http"},
        {"fault": "hostile:xxe-file", "path": '/tmp/"x'},
    ],
)
def test_bad_query_parameters_get_400(
    sim: SimServer, client: httpx.Client, params: dict[str, str]
) -> None:
    response = client.get(sim.url, params=params)
    assert response.status_code == 400
    assert sim.stats()["next_version"] == 1


def test_health(sim: SimServer, client: httpx.Client) -> None:
    response = client.get(sim.base_url + "/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_other_requests_are_served_while_a_large_snapshot_streams(
    sim: SimServer, client: httpx.Client
) -> None:
    with client.stream("GET", sim.url, params={"plans": 1_000_000}) as response:
        first = next(response.iter_bytes())
        assert first.startswith(b"<?xml")
        health = client.get(sim.base_url + "/health", timeout=2.0)  # another connection
        assert health.status_code == 200


# --- faults --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "status"),
    [("500", 500), ("503", 503), ("5xx", 500), ("502", 502), ("404", 404), ("400", 400),
     ("401", 401)],
)  # fmt: skip
def test_status_faults(sim: SimServer, client: httpx.Client, fault: str, status: int) -> None:
    response = client.get(sim.url, params={"fault": fault})
    assert response.status_code == status
    assert "retry-after" not in response.headers
    assert len(response.content) < 200


@pytest.mark.parametrize(
    ("fault", "status", "retry_after"),
    [("429:3", 429, "3"), ("429", 429, "1"), ("429:0.2", 429, "1"), ("503:2", 503, "2")],
)
def test_retry_after_faults(
    sim: SimServer, client: httpx.Client, fault: str, status: int, retry_after: str
) -> None:
    response = client.get(sim.url, params={"fault": fault})
    assert response.status_code == status
    assert response.headers["retry-after"] == retry_after


def test_latency_delays_the_headers(sim: SimServer, client: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout):
        client.get(sim.url, params={"fault": "latency:1"}, timeout=0.2)
    started = time.monotonic()
    response = client.get(sim.url, params={"fault": "latency:0.3", "plans": 10})
    assert response.status_code == 200
    assert time.monotonic() - started >= 0.3


def test_a_client_gone_during_latency_does_not_hold_up_the_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The demo stops a fetch mid-request, then the simulator: a handler still asleep for a
    client that left made uvicorn wait out its grace and log a traceback."""
    sim = SimServer(plans=10, seed=1).start()
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(sim.url, params={"fault": "latency:30"}, timeout=0.3)
    started = time.monotonic()
    with caplog.at_level("ERROR"):
        sim.stop()
    assert time.monotonic() - started < 1.0
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


def test_slow_delays_every_chunk(sim: SimServer, client: httpx.Client) -> None:
    with client.stream("GET", sim.url, params={"fault": "slow:1"}, timeout=0.2) as response:
        assert response.status_code == 200  # the headers come at once, the body does not
        with pytest.raises(httpx.ReadTimeout):
            response.read()
    response = client.get(sim.url, params={"fault": "slow:0.05", "plans": 300, "version": 1})
    assert response.content == full_document(1, 300)


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.99, 1.0])
def test_truncate_sends_a_prefix_and_ends_cleanly(
    sim: SimServer, client: httpx.Client, fraction: float
) -> None:
    response = client.get(sim.url, params={"fault": f"truncate:{fraction}", "version": 5})
    assert response.status_code == 200
    whole = full_document(5)
    assert whole.startswith(response.content)
    assert len(response.content) < len(whole)
    if 0 < fraction < 0.99:
        assert len(response.content) == pytest.approx(fraction * len(whole), rel=0.1)
    with pytest.raises(etree.XMLSyntaxError):
        etree.fromstring(response.content)


@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.99])
def test_reset_breaks_the_connection_mid_body(
    sim: SimServer, client: httpx.Client, fraction: float
) -> None:
    received = bytearray()
    with (
        pytest.raises(RESET_ERRORS),
        client.stream("GET", sim.url, params={"fault": f"reset:{fraction}", "version": 5}) as r,
    ):
        assert r.status_code == 200
        for chunk in r.iter_bytes():
            received += chunk
    assert full_document(5).startswith(bytes(received))
    assert client.get(sim.base_url + "/health").status_code == 200  # the server carries on


def test_malformed_records_in_a_well_formed_document(sim: SimServer, client: httpx.Client) -> None:
    response = client.get(sim.url, params={"fault": "malformed:0.05", "version": 6})
    expected = list(snapshot_plans(SEED, 6, PLANS, malformed=0.05))
    defects = Counter(p.defect for p in expected if p.defect)
    assert set(defects) == {"bad-date", "missing-attr", "negative-price", "bad-capacity"}
    assert 20 < sum(defects.values()) < 80
    root = etree.fromstring(response.content)  # well-formed
    elements = [p for bp in root[0] for p in bp]
    assert len(elements) == len(expected)
    for element, plan in zip(elements, expected, strict=True):
        first_zone = element[0]
        if plan.defect == "bad-date":
            assert element.get("plan_start_date") != plan.plan_start_date
        elif plan.defect == "missing-attr":
            assert element.get("plan_id") is None
        elif plan.defect == "negative-price":
            assert first_zone.get("price") == "-" + plan.zones[0].price
        elif plan.defect == "bad-capacity":
            assert not first_zone.get("capacity").isdigit()
        else:
            assert int(element.get("plan_id")) == plan.plan_id
            assert element.get("plan_start_date") == plan.plan_start_date


def test_the_parser_keeps_exactly_the_plans_the_simulator_calls_valid(
    sim: SimServer, client: httpx.Client
) -> None:
    """SimPlan.valid follows the feed's rules: a bad date, a missing plan_id or a negative
    price is skipped; a non-numeric capacity is not (capacity is never read)."""
    response = client.get(sim.url, params={"fault": "malformed:0.05", "version": 6})
    expected = list(snapshot_plans(SEED, 6, PLANS, malformed=0.05))
    records, parser = parse_bytes(response.content)
    assert [(int(r.base_plan_id), int(r.plan_id)) for r in records] == [
        p.key for p in expected if p.valid
    ]
    assert parser.skipped == sum(not p.valid for p in expected)
    assert any(p.defect == "bad-capacity" and p.valid for p in expected)


def test_hostile_billion_laughs(sim: SimServer, client: httpx.Client) -> None:
    response = client.get(sim.url, params={"fault": "hostile:laughs", "plans": 20})
    assert response.status_code == 200
    assert b"<!DOCTYPE planList [" in response.content
    assert b'<!ENTITY lol9 "&lol8;' in response.content
    assert b'title="&lol9;"' in response.content
    with pytest.raises(etree.XMLSyntaxError, match="amplification"):
        etree.fromstring(response.content)  # libxml2 refuses to expand it


@pytest.mark.parametrize(
    ("params", "entity"),
    [
        ({"fault": "hostile:xxe-file"}, b'<!ENTITY xxe SYSTEM "file:///etc/passwd">'),
        ({"fault": "hostile:xxe-file", "path": "/tmp/x"}, b'SYSTEM "file:///tmp/x"'),
        ({"fault": "hostile:xxe-file:/tmp/y"}, b'SYSTEM "file:///tmp/y"'),
        ({"fault": "hostile:xxe-net", "net_port": "8123"}, b'SYSTEM "http://127.0.0.1:8123/xxe"'),
        ({"fault": "hostile:xxe-net:8124"}, b'SYSTEM "http://127.0.0.1:8124/remote.dtd"'),
    ],
)
def test_hostile_external_entities(
    sim: SimServer, client: httpx.Client, params: dict[str, str], entity: bytes
) -> None:
    response = client.get(sim.url, params={"plans": 20, **params})
    assert response.status_code == 200
    assert entity in response.content
    assert b">&xxe;<" in response.content.replace(b"\n", b"")


def test_hostile_file_entity_is_real(sim: SimServer, client: httpx.Client, tmp_path: Path) -> None:
    """A parser that resolves external entities would read the file: the document is effective."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    params = {"fault": "hostile:xxe-file", "path": str(secret), "plans": 5}
    response = client.get(sim.url, params=params)
    naive = etree.XMLParser(resolve_entities=True, load_dtd=True)
    assert "TOP-SECRET" in etree.fromstring(response.content, naive)[0][0].text
    safe = etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True)
    assert "TOP-SECRET" not in (etree.fromstring(response.content, safe)[0][0].text or "")


def test_hostile_document_in_the_older_variant(sim: SimServer, client: httpx.Client) -> None:
    response = client.get(sim.base_url + "/eventList", params={"fault": "hostile:laughs"})
    assert b"<!DOCTYPE eventList [" in response.content
    assert b'<base_event base_event_id="0"' in response.content


@pytest.mark.parametrize(
    "spec",
    ["bogus", "latency:x", "slow:-1", "truncate:2", "reset:nan", "404:1", "600", "399",
     "hostile:nope", "hostile:xxe-net:abc", "hostile:xxe-file:etc/passwd", "malformed:1.5"],
)  # fmt: skip
def test_unknown_faults_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="fault"):
        parse_fault(spec)


def test_fault_specs() -> None:
    assert parse_fault("ok").kind == parse_fault("").kind == "ok"
    assert parse_fault("429").retry_after == 1
    assert parse_fault("503").retry_after is None
    assert parse_fault("latency:2.5").seconds == 2.5
    assert parse_fault("reset").fraction == 0.5
    assert parse_fault("hostile:xxe-file:/etc/hosts").target == "/etc/hosts"


# --- control -------------------------------------------------------------------------------------


def test_the_fault_queue_is_consumed_one_per_snapshot_request(
    sim: SimServer, client: httpx.Client
) -> None:
    queued = client.post(
        sim.base_url + "/_control/faults", json={"faults": ["503", "ok", "429:0", "truncate:0.5"]}
    )
    assert queued.status_code == 200
    assert client.get(sim.base_url + "/health").status_code == 200  # takes no fault
    assert client.get(sim.url, params={"fault": "404"}).status_code == 404  # takes none either
    statuses = [client.get(sim.url).status_code for _ in range(3)]
    assert statuses == [503, 200, 429]
    truncated = client.get(sim.url)
    assert truncated.headers["x-sim-fault"] == "truncate:0.5"
    assert len(truncated.content) < len(full_document(int(truncated.headers["x-sim-version"])))
    normal = client.get(sim.url)
    assert normal.headers["x-sim-fault"] == "ok"
    assert normal.content == full_document(int(normal.headers["x-sim-version"]))

    stats = client.get(sim.base_url + "/_control/stats").json()
    assert stats["paths"]["/planList"] == 6
    assert stats["paths"]["/_control/faults"] == 1
    assert stats["paths"]["/health"] == 1
    assert stats["snapshots"] == 6
    assert stats["versions"] == {str(v): 1 for v in range(1, 7)}
    assert stats["faults"] == {"404": 1, "503": 1, "ok": 2, "429:0": 1, "truncate:0.5": 1}
    assert stats["statuses"]["503"] == stats["statuses"]["429"] == 1
    assert stats["queued_faults"] == []
    assert stats["next_version"] == 7
    assert [r["fault"] for r in stats["recent"]] == [
        "404", "503", "ok", "429:0", "truncate:0.5", "ok"
    ]  # fmt: skip
    assert sim.stats()["faults"] == stats["faults"]


def test_set_faults_from_the_owner_and_reset(sim: SimServer, client: httpx.Client) -> None:
    sim.set_faults(["500", "500"])
    assert sim.stats()["queued_faults"] == ["500", "500"]
    assert client.get(sim.url).status_code == 500
    assert client.post(sim.base_url + "/_control/reset").status_code == 200
    assert sim.stats()["queued_faults"] == []
    assert client.get(sim.url).headers["x-sim-version"] == "1"
    with pytest.raises(ValueError, match="fault"):
        sim.set_faults(["nope"])


@pytest.mark.parametrize(
    "payload", [{"faults": ["bogus"]}, {"faults": "503"}, {"nope": []}, [1, 2], {"faults": [503]}]
)
def test_a_bad_fault_queue_is_refused_whole(
    sim: SimServer, client: httpx.Client, payload: object
) -> None:
    sim.set_faults(["503"])
    response = client.post(sim.base_url + "/_control/faults", json=payload)
    assert response.status_code == 400
    assert sim.stats()["queued_faults"] == ["503"]


# --- memory and the foreground entry point ------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    return env


def test_generating_200k_plans_keeps_memory_flat() -> None:
    script = textwrap.dedent(
        """
        import resource, tracemalloc
        from pgenough_plans.sim.data import render_snapshot
        for _ in render_snapshot(1, 1, 5000):  # warm up: tables, first chunks
            pass
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        size = 0
        for chunk in render_snapshot(1, 1, 200_000):
            size += len(chunk)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        tracemalloc.start()
        for chunk in render_snapshot(1, 2, 5_000):
            pass
        peak = tracemalloc.get_traced_memory()[1]
        print(size, grown, peak)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    size, grown_kib, peak = map(int, result.stdout.split())
    assert size > 100_000_000  # the document: ~115 MB
    assert grown_kib < 4 * 1024, f"RSS grew {grown_kib} KiB"
    assert peak < 2 * 1024 * 1024, f"tracemalloc peak {peak} bytes"


def test_serve_runs_in_the_foreground_until_interrupted() -> None:
    code = "from pgenough_plans.sim.server import serve; serve(plans=20, port=0, seed=3)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 30)
        assert readable, "serve() printed nothing within 30 s"
        line = proc.stdout.readline()  # printed once the socket listens
        assert line.startswith("provider simulator: http://127.0.0.1:")
        response = httpx.get(line.split()[2], params={"version": 1}, timeout=10)
        assert response.content == b"".join(render_snapshot(3, 1, 20))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait(timeout=10)
