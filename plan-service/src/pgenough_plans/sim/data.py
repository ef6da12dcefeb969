"""Generated Fever snapshots for the provider simulator (``server``): what a snapshot says, and
its XML. Pure functions, no I/O.

A snapshot is a pure function of ``(seed, version, plans)``:

* :func:`snapshot_plans` yields its logical content, one :class:`SimPlan` per plan, in document
  order. Tests and benchmarks use it as the expected truth.
* :func:`render_snapshot` yields the same content as UTF-8 XML in chunks of about 64 KiB, never
  holding the document. :func:`render_plans` renders SimPlans the slow, obvious way; the fast
  renderer uses it for defective records, and the tests check that both agree.

Structure. The ``plans`` plan slots are grouped into base_plan slots of 1 to 3 plans (about 1.9
on average), fixed for a seed. Each slot draws its static random bits once, in order, from one
``random.Random(seed)`` stream. Whatever changes between versions is a function of those bits
and an *epoch* ``(version + phase) // period``, with a period and a phase per slot and per kind
of change: a value holds for ``period`` versions and then changes, and any version is computed
directly, without replaying history.

Evolution between consecutive versions (approximate share of plans or base_plans affected):

* a plan vanishes and a new plan (new ``plan_id``, date and venue) takes its slot: ~2%;
* a base_plan vanishes and a new one (new ``base_plan_id``, title and plans) takes its slot:
  ~1.5% (so ~3.5% of the plans vanish in all). A snapshot always holds exactly ``plans`` plans;
* a base_plan turns offline or back online (only ~30% of base_plans ever do): ~1.5%;
* a title changes (a suffix such as " - Nueva fecha" comes, changes or goes): ~2%;
* a plan's end time moves (22:00 becomes 21:20): ~4%; its zone prices change: ~8%.

Ids: ``plan_id = 1 + slot + plans * generation`` and likewise for ``base_plan_id``, so an id is
never handed to a different plan later (except the reused-id trap below).

Real-world traps, deterministic for a seed, at low rates:

* a base_plan's first plan reuses the ``plan_id`` of the previous base_plan's first plan
  (~3% of base_plans), so only ``(base_plan_id, plan_id)`` identifies a plan;
* impossible dates such as ``2021-09-31`` for a plan's start and end (~0.3% of plans): a parser
  skips that plan (``SimPlan.valid`` is false: its start is not a date);
* a ``zone_id`` repeated inside a plan with another price (~7% of plans); capacity 0 (~2% of
  zones);
* titles with ``&``, quotes, ``<`` and non-ASCII (``Tom & "Jerry" ñ``, 🎭), escaped in the XML.

``malformed`` (a rate) adds defective records to a still well-formed document: a start date in
another format, a missing ``plan_id``, a negative price or a non-numeric capacity
(``SimPlan.defect`` names it). The first three are skipped; a bad capacity is not, as nothing
reads the capacity (``SKIPPED_DEFECTS``). ``hostile_prologue`` builds the DOCTYPE and the first
base_plan of entity-expansion and external-entity documents.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal, TypeAlias
from xml.sax.saxutils import escape

Variant: TypeAlias = Literal["planList", "eventList"]
SellMode: TypeAlias = Literal["online", "offline"]
Defect: TypeAlias = Literal["bad-date", "missing-attr", "negative-price", "bad-capacity"]
HostileKind: TypeAlias = Literal["laughs", "xxe-file", "xxe-net"]

VARIANTS: Final[tuple[Variant, ...]] = ("planList", "eventList")
DEFECTS: Final[tuple[Defect, ...]] = ("bad-date", "missing-attr", "negative-price", "bad-capacity")
SKIPPED_DEFECTS: Final[frozenset[Defect]] = frozenset(
    {"bad-date", "missing-attr", "negative-price"}
)
"""The defects a parser skips a plan for (pgenough_plans.ingest.feed's rules)."""
CHUNK_BYTES: Final = 64 * 1024
BYTES_PER_PLAN: Final = 576  # measured average for the planList variant


# --- logical content -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimZone:
    """One ``zone`` element: values as the XML states them (``price`` is the decimal text)."""

    zone_id: int
    capacity: int
    price: str
    name: str
    numbered: bool

    @property
    def price_decimal(self) -> Decimal:
        return Decimal(self.price)


@dataclass(frozen=True, slots=True)
class SimPlan:
    """One ``plan`` with its ``base_plan``'s attributes, as the snapshot states them.

    Date-times are the attribute text (``YYYY-MM-DDTHH:MM:SS``, possibly impossible such as
    ``2021-09-31T20:00:00``). When ``defect`` is set, the XML shows that defect instead of the
    value given here (see :func:`render_plans`).
    """

    base_plan_id: int
    sell_mode: SellMode
    title: str
    organizer_company_id: int | None
    plan_id: int
    plan_start_date: str
    plan_end_date: str
    sell_from: str
    sell_to: str
    sold_out: bool
    zones: tuple[SimZone, ...]
    defect: Defect | None = None

    @property
    def key(self) -> tuple[int, int]:
        """The plan's identity within one provider: ``(base_plan_id, plan_id)``."""
        return (self.base_plan_id, self.plan_id)

    @property
    def starts_at(self) -> dt.datetime | None:
        """The start as a UTC datetime; None when the date is impossible."""
        return _parse_when(self.plan_start_date)

    @property
    def ends_at(self) -> dt.datetime | None:
        return _parse_when(self.plan_end_date)

    @property
    def valid(self) -> bool:
        """The parser keeps this plan: no defect it skips for, and its start and end exist
        (a bad ``sell_from``/``sell_to`` or capacity is read as missing, never skipped)."""
        return self.defect not in SKIPPED_DEFECTS and all(
            _parse_when(s) is not None for s in (self.plan_start_date, self.plan_end_date)
        )

    @property
    def min_price(self) -> Decimal:
        return min(z.price_decimal for z in self.zones)

    @property
    def max_price(self) -> Decimal:
        return max(z.price_decimal for z in self.zones)


def _parse_when(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


# --- precomputed tables ----------------------------------------------------------------------
# Everything a plan needs is looked up, not formatted: dates, prices and whole zone lists.

_FIRST_DAY = dt.date(2020, 1, 1)
_DAY0 = 366  # 2021-01-01: plans start within two years from here
_START_DAYS = 730
_DAYS_T = tuple(f"{_FIRST_DAY + dt.timedelta(days=d)}T" for d in range(4 * 366))
_MIDNIGHT = tuple(f"{d}00:00:00" for d in _DAYS_T)
_CLOCK = tuple(f"{m // 60:02d}:{m % 60:02d}:00" for m in range(1440))
_SHOWTIMES = (600, 690, 720, 1020, 1080, 1110, 1140, 1170, 1200, 1230, 1260, 1260, 1290, 1320,
              1350, 1380)  # fmt: skip
_DURATIONS = (60, 80, 90, 100, 120, 150, 180, 240)  # minutes
_IMPOSSIBLE_DAYS = ("2021-09-31T", "2021-02-29T", "2021-04-31T", "2021-06-31T", "2021-11-31T",
                    "2022-02-30T", "2022-09-31T", "2021-02-30T")  # fmt: skip

# A price row per plan price level: the zone price for each of the zone price factors.
_PRICE_FACTORS = (2, 3, 4, 5, 6, 8, 12)  # quarters: 0.5x .. 3x the plan's price level
_PRICE_LEVELS = 140  # levels 10 .. 149, in steps of 0.50 (5.00 .. 74.50)
_PRICE_ROWS = tuple(
    tuple(
        f"{c // 100}.{c % 100:02d}"
        for c in ((level + 10) * 50 * f // 4 // 50 * 50 for f in _PRICE_FACTORS)
    )
    for level in range(_PRICE_LEVELS)
)

_ZONE_NAMES = ("Platea", "Grada 1", "Grada 2", "Anfiteatro", "Amfiteatre", "Palco", "A28",
               "A42", "General", "VIP", "Pista", "Tribuna Norte", "Preferente", "Entresuelo",
               "Gallinero", "Butaca Patio", "Zona Ñ", "Palco & Cena")  # fmt: skip
_ZONE_COUNTS = (1, 1, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5, 6, 7, 8)  # mean 3.9 (4 with repeats)
_VENUES = 256
_XML_QUOTE = {'"': "&quot;"}


def _xml(text: str) -> str:
    return escape(text, _XML_QUOTE)


def _make_venues() -> tuple[tuple[tuple[int, int, str, bool, int], ...], ...]:
    """256 zone layouts ``(zone_id, capacity, name, numbered, price_factor_index)``; ~1 in 16
    repeats a zone_id with another price; ~3% of zones have capacity 0."""
    rng = random.Random(20210630)
    venues = []
    for _ in range(_VENUES):
        zones = []
        for zone_id in rng.sample(range(1, 1000), rng.choice(_ZONE_COUNTS)):
            capacity = 0 if rng.random() < 0.03 else rng.randint(1, 500)
            zones.append(
                (zone_id, capacity, rng.choice(_ZONE_NAMES), rng.random() < 0.5, rng.randrange(7))
            )
        if rng.random() < 1 / 16:  # the same zone again, another price (like "Amfiteatre")
            zone_id, _, name, numbered, factor = rng.choice(zones)
            zones.append((zone_id, rng.randint(1, 50), name, not numbered, (factor + 3) % 7))
        venues.append(tuple(zones))
    return tuple(venues)


_VENUE_ZONES = _make_venues()

_ARTISTS = ("Camela", "Pantomima Full", "Los Morancos", "Rosalía", "C. Tangana", "Vetusta Morla",
            "Love of Lesbian", "Izal", "Dani Martín", "Estopa", "Mägo de Oz", "Björk",
            "Orquesta Sinfónica", "Ballet Nacional", "Cirque du Soleil", "El Rey León",
            "Tom & \"Jerry\" ñ", "Les Luthiers", "Sílvia Pérez Cruz", "Buika", "Melendi",
            "Joaquín Sabina", "Ara Malikian", "Zahara", "Niña Pastori", "Antílopez", "Toundra",
            "Berri Txarrak", "Ojete Calor", "La M.O.D.A.", "Morat", "Aitana")  # fmt: skip
_FORMATS = ("en concierto", "- Gira 2021", "Live", "en el Teatro Real", "Stand-up", "acústico",
            "- Último show", "en familia", "- 20 aniversario", "Sessions", "& amigos",
            "«Grandes éxitos»", "<Unplugged>", "🎭 Noche de humor", "en directo",
            "'Tour' 2022")  # fmt: skip
_TITLES = tuple(f"{a} {f}" for a in _ARTISTS for f in _FORMATS)
_TITLES_XML = tuple(_xml(t) for t in _TITLES)
_SUFFIXES = ("", " - Nueva fecha", " (últimas entradas)", " - Segunda función", " ¡Cambio de sala!",
             " & invitados")  # fmt: skip
_SUFFIXES_XML = tuple(_xml(s) for s in _SUFFIXES)
_ORG_ATTRS = ("", *(f' organizer_company_id="{i}"' for i in range(1, 64)))


def _make_schedules(seed: int, ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, ...], ...]:
    """4096 entries ``(period_1, phase_1, period_2, phase_2, ...)`` for the given period ranges."""
    rng = random.Random(seed)
    table = []
    for _ in range(4096):
        entry: list[int] = []
        for low, high in ranges:
            period = rng.randrange(low, high)
            entry += (period, rng.randrange(period))
        table.append(tuple(entry))
    return tuple(table)


# Plans: vanish, end time, prices. Base plans: vanish, sell mode, title.
_PLAN_SCHEDULES = _make_schedules(1, ((30, 94), (10, 42), (6, 22)))
_BP_SCHEDULES = _make_schedules(2, ((40, 104), (8, 40), (20, 84)))
_BP_SIZES = (1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3)  # mean 1.94 plans per base_plan


# --- the one generator both outputs come from ----------------------------------------------
# A base plan record: (base_plan_id, offline, title_index, suffix_index, org_index, plans), and
# a plan record: (plan_id, start, end, sell_from, sell_to, sold_out, venue, price_level, defect).

_PlanRecord: TypeAlias = tuple[int, str, str, str, str, bool, int, int, "Defect | None"]
_BaseRecord: TypeAlias = tuple[int, bool, int, int, int, list[_PlanRecord]]


def _check(version: int, plans: int, malformed: float) -> None:
    if version < 0 or plans < 0:
        raise ValueError("version and plans must be >= 0")
    if not 0.0 <= malformed <= 1.0:
        raise ValueError("malformed is a rate in [0, 1]")


def _base_records(seed: int, version: int, plans: int, malformed: float) -> Iterator[_BaseRecord]:
    _check(version, plans, malformed)
    draw = random.Random(seed).getrandbits
    days_t, midnight, clock, impossible = _DAYS_T, _MIDNIGHT, _CLOCK, _IMPOSSIBLE_DAYS
    showtimes, durations, plan_schedules = _SHOWTIMES, _DURATIONS, _PLAN_SCHEDULES
    day0, start_days, venues, levels = _DAY0, _START_DAYS, _VENUES - 1, _PRICE_LEVELS
    defect_threshold = int(malformed * (1 << 24))
    slot = 0
    bp_slot = 0
    previous_first_id = 0
    while slot < plans:
        b = draw(64)
        gen_per, gen_ph, mode_per, mode_ph, title_per, title_ph = _BP_SCHEDULES[b & 4095]
        bgen = (version + gen_ph) // gen_per
        offline = (b >> 42) & 7 == 0
        if (b >> 38) & 15 < 5:  # a base_plan that flips between online and offline
            offline ^= ((version + mode_ph) // mode_per) & 1 == 1
        size = min(_BP_SIZES[(b >> 12) & 15], plans - slot)
        records: list[_PlanRecord] = []
        for j in range(size):
            # Static bits: 0-11 schedule, 12-19 venue, 22-31 day, 32-35 showtime, 36-42 sale
            # lead, 43 sell_to, 44-48 sold_out, 49-58 impossible date, 59-63 reused id,
            # 64-71 price level, 72-74 duration, 75-95 defects.
            p = draw(96)
            van_per, van_ph, end_per, end_ph, price_per, price_ph = plan_schedules[p & 4095]
            generation = bgen + (version + van_ph) // van_per
            plan_id = 1 + slot + plans * generation
            if j == 0:
                if bp_slot and (p >> 59) & 31 == 0:  # trap: the previous base_plan's plan_id
                    plan_id = previous_first_id
                previous_first_id = plan_id
            day = day0 + (((p >> 22) & 1023) + generation * 37) % start_days
            start = day * 1440 + showtimes[(p >> 32) & 15]
            end = start + durations[((p >> 72) + (version + end_ph) // end_per * 3) & 7]
            sell_to = start - (70 if (p >> 43) & 1 else 10)
            if (p >> 49) & 1023 < 3:  # trap: a date that does not exist
                bad = impossible[(p >> 22) & 7]
                start_s = bad + clock[start % 1440]
                end_s = bad + clock[end % 1440]
            else:
                start_s = days_t[start // 1440] + clock[start % 1440]
                end_s = days_t[end // 1440] + clock[end % 1440]
            defect: Defect | None = None
            if defect_threshold:
                roll = ((p >> 75) * 0x9E3779B97F4A7C15 * (version + 1) >> 40) & 0xFFFFFFF
                if roll & 0xFFFFFF < defect_threshold:
                    defect = DEFECTS[roll >> 26]
            records.append(
                (
                    plan_id,
                    start_s,
                    end_s,
                    midnight[day - 3 - ((p >> 36) & 127)],
                    days_t[sell_to // 1440] + clock[sell_to % 1440],
                    (p >> 44) & 31 < 2,
                    ((p >> 12) + generation * 89) & venues,
                    (((p >> 64) & 255) + (version + price_ph) // price_per * 53) % levels,
                    defect,
                )
            )
            slot += 1
        yield (
            1 + bp_slot + plans * bgen,
            offline,
            (((b >> 16) & 4095) + bgen * 1187) % len(_TITLES),
            ((version + title_ph) // title_per) % len(_SUFFIXES),
            (b >> 32) & 63 if (b >> 28) & 15 < 10 else 0,
            records,
        )
        bp_slot += 1


def _sim_plans(base: _BaseRecord) -> Iterator[SimPlan]:
    bp_id, offline, title, suffix, org, records = base
    for plan_id, start, end, sell_from, sell_to, sold_out, venue, level, defect in records:
        row = _PRICE_ROWS[level]
        yield SimPlan(
            base_plan_id=bp_id,
            sell_mode="offline" if offline else "online",
            title=_TITLES[title] + _SUFFIXES[suffix],
            organizer_company_id=org or None,
            plan_id=plan_id,
            plan_start_date=start,
            plan_end_date=end,
            sell_from=sell_from,
            sell_to=sell_to,
            sold_out=sold_out,
            zones=tuple(
                SimZone(zone_id, capacity, row[factor], name, numbered)
                for zone_id, capacity, name, numbered, factor in _VENUE_ZONES[venue]
            ),
            defect=defect,
        )


def snapshot_plans(
    seed: int, version: int, plans: int, *, malformed: float = 0.0
) -> Iterator[SimPlan]:
    """The logical content of snapshot ``(seed, version, plans)``, in document order."""
    for base in _base_records(seed, version, plans, malformed):
        yield from _sim_plans(base)


# --- XML ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Names:
    """Element and attribute names of one variant, and the templates built from them."""

    root: str
    base: str
    plan: str

    @property
    def head(self) -> str:
        return (
            f'<{self.root} xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" version="1.0"'
            f' xsi:noNamespaceSchemaLocation="{self.root}.xsd">\n<output>\n'
        )

    @property
    def tail(self) -> str:
        return f"</output>\n</{self.root}>\n"

    @property
    def base_open(self) -> str:  # %-template: id, mode, organizer attribute, title
        return f'<{self.base} {self.base}_id="%s" sell_mode="%s"%s title="%s">\n'

    @property
    def base_close(self) -> str:
        return f"</{self.base}>\n"

    @property
    def plan_open(self) -> str:  # %-template: start, end, id, sell_from, sell_to, sold_out
        p = self.plan
        return (
            f'<{p} {p}_start_date="%s" {p}_end_date="%s" {p}_id="%s" sell_from="%s"'
            ' sell_to="%s" sold_out="%s">\n'
        )


_NAMES: Final[dict[Variant, _Names]] = {
    "planList": _Names("planList", "base_plan", "plan"),
    "eventList": _Names("eventList", "base_event", "event"),
}
XML_DECLARATION: Final = '<?xml version="1.0" encoding="UTF-8"?>\n'
_BOOL = ("false", "true")


def _zone_xml(zone_id: object, capacity: object, price: str, name: str, numbered: bool) -> str:
    return (
        f'<zone zone_id="{zone_id}" capacity="{capacity}" price="{price}" name="{_xml(name)}"'
        f' numbered="{_BOOL[numbered]}" />\n'
    )


@functools.cache
def _zones_xml() -> tuple[tuple[str, ...], ...]:
    """The zone elements of every venue at every price level (~13 MB, built on first use)."""
    return tuple(
        tuple(
            "".join(_zone_xml(z, c, row[f], n, num) for z, c, n, num, f in zones)
            for row in _PRICE_ROWS
        )
        for zones in _VENUE_ZONES
    )


def _reformat_date(when: str) -> str:
    """``2021-06-30T21:00:00`` as ``30/06/2021 21:00``: a date in a format the feed never uses."""
    return f"{when[8:10]}/{when[5:7]}/{when[0:4]} {when[11:16]}"


def _plan_xml(plan: SimPlan, names: _Names) -> str:
    """One plan element, its zones and its defect, the obvious way."""
    p = names.plan
    start = _reformat_date(plan.plan_start_date) if plan.defect == "bad-date" else None
    id_attr = "" if plan.defect == "missing-attr" else f' {p}_id="{plan.plan_id}"'
    parts = [
        f'<{p} {p}_start_date="{start or plan.plan_start_date}"'
        f' {p}_end_date="{plan.plan_end_date}"{id_attr} sell_from="{plan.sell_from}"'
        f' sell_to="{plan.sell_to}" sold_out="{_BOOL[plan.sold_out]}">\n'
    ]
    for i, z in enumerate(plan.zones):
        price = "-" + z.price if plan.defect == "negative-price" and i == 0 else z.price
        capacity = "n/a" if plan.defect == "bad-capacity" and i == 0 else z.capacity
        parts.append(_zone_xml(z.zone_id, capacity, price, z.name, z.numbered))
    parts.append(f"</{p}>\n")
    return "".join(parts)


def _base_open(names: _Names, plan: SimPlan) -> str:
    org = plan.organizer_company_id
    return names.base_open % (
        plan.base_plan_id,
        plan.sell_mode,
        f' organizer_company_id="{org}"' if org is not None else "",
        _xml(plan.title),
    )


def render_plans(
    plans: Iterable[SimPlan],
    variant: Variant = "planList",
    *,
    doctype: str = "",
    preamble: str = "",
) -> Iterator[str]:
    """A whole document for ``plans``, element by element: the slow reference renderer.
    Consecutive plans of the same base_plan share one base_plan element."""
    names = _NAMES[variant]
    yield XML_DECLARATION + doctype + names.head + preamble
    current: int | None = None  # base_plan_id of the open element
    for plan in plans:
        if current != plan.base_plan_id:
            if current is not None:
                yield names.base_close
            current = plan.base_plan_id
            yield _base_open(names, plan)
        yield _plan_xml(plan, names)
    if current is not None:
        yield names.base_close
    yield names.tail


def render_snapshot(
    seed: int,
    version: int,
    plans: int,
    *,
    variant: Variant = "planList",
    malformed: float = 0.0,
    doctype: str = "",
    preamble: str = "",
) -> Iterator[bytes]:
    """The XML of snapshot ``(seed, version, plans)`` in UTF-8 chunks of about 64 KiB.

    ``doctype`` goes between the XML declaration and the root element, ``preamble`` right after
    ``<output>`` (both empty for an ordinary snapshot; see :func:`hostile_prologue`).
    """
    names = _NAMES[variant]
    base_open, base_close, plan_open = names.base_open, names.base_close, names.plan_open
    zones_xml, plan_close = _zones_xml(), f"</{names.plan}>\n"
    titles, suffixes, orgs, modes = _TITLES_XML, _SUFFIXES_XML, _ORG_ATTRS, ("online", "offline")
    parts = [XML_DECLARATION + doctype + names.head + preamble]
    append = parts.append
    chunk_plans = CHUNK_BYTES // BYTES_PER_PLAN
    pending = 0
    for base in _base_records(seed, version, plans, malformed):
        bp_id, offline, title, suffix, org, records = base
        append(base_open % (bp_id, modes[offline], orgs[org], titles[title] + suffixes[suffix]))
        for plan_id, start, end, sell_from, sell_to, sold_out, venue, level, defect in records:
            if defect is None:
                append(plan_open % (start, end, plan_id, sell_from, sell_to, _BOOL[sold_out]))
                append(zones_xml[venue][level])
                append(plan_close)
            else:
                plan = next(p for p in _sim_plans(base) if p.plan_id == plan_id)
                append(_plan_xml(plan, names))
        append(base_close)
        pending += len(records)
        if pending >= chunk_plans:
            yield "".join(parts).encode()
            parts.clear()
            pending = 0
    append(names.tail)
    yield "".join(parts).encode()


# --- hostile documents -------------------------------------------------------------------------


def hostile_prologue(
    kind: HostileKind, variant: Variant = "planList", target: str = ""
) -> tuple[str, str]:
    """``(doctype, preamble)`` for :func:`render_snapshot`: a DOCTYPE declaring the hostile
    entities, and a first base_plan (id 0) that uses them.

    * ``laughs``: nested internal entities expanding to 10**9 "lol"s (billion laughs), used in
      the base_plan's title;
    * ``xxe-file``: an external entity on ``file://<target>`` (default ``/etc/passwd``), used as
      the base_plan's text content (XML forbids external entities in attribute values);
    * ``xxe-net``: the same on ``http://127.0.0.1:<target>/xxe``, plus an external parameter
      entity on ``.../remote.dtd`` referenced from the DTD (``target`` is the port a test
      listens on; default 9, the discard port).
    """
    names = _NAMES[variant]
    title, content = "Hostile", ""
    if kind == "laughs":
        levels = ['<!ENTITY lol0 "lol">'] + [
            f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
        ]
        declarations, title = "\n".join(levels) + "\n", "&lol9;"
    elif kind == "xxe-file":
        path = target or "/etc/passwd"
        if not path.startswith("/") or any(c in path for c in '"<>%&'):
            raise ValueError(f"xxe-file needs an absolute path without quotes: {path!r}")
        declarations = f'<!ENTITY xxe SYSTEM "file://{path}">\n'
        content = "&xxe;"
    elif kind == "xxe-net":
        if target and not (target.isdigit() and 0 < int(target) < 65536):
            raise ValueError(f"xxe-net needs a port: {target!r}")
        url = f"http://127.0.0.1:{int(target or 9)}/"
        declarations = (
            f'<!ENTITY xxe SYSTEM "{url}xxe">\n'
            f'<!ENTITY % remote SYSTEM "{url}remote.dtd">\n%remote;\n'
        )
        content = "&xxe;"
    else:
        raise ValueError(f"unknown hostile document {kind!r}")
    plan = next(snapshot_plans(0, 0, 1))
    preamble = (
        names.base_open % (0, "online", "", title)
        + content
        + _plan_xml(plan, names)
        + names.base_close
    )
    return f"<!DOCTYPE {names.root} [\n{declarations}]>\n", preamble
