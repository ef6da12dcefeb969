"""Build Fever feed documents (bytes) from plain dicts, for round-trip tests and benchmarks.

A snapshot is a list of base_plan dicts; keys are the planList attribute names, whatever the
variant rendered::

    {"base_plan_id": "291", "sell_mode": "online", "title": "Camela", "organizer_company_id": None,
     "plans": [{"plan_id": "291", "plan_start_date": "2021-06-30T21:00:00",
                "plan_end_date": "2021-06-30T22:00:00", "sell_from": ..., "sell_to": ...,
                "sold_out": "false",
                "zones": [{"zone_id": "40", "capacity": "243", "price": "20.00",
                           "name": "Platea", "numbered": "true"}]}]}

Every other key becomes an attribute as well, in dict order. Values are written as given
(``str()`` of non-strings, ``true``/``false`` for booleans), so invalid values can be built on
purpose; ``None`` leaves the attribute out (a plan without ``plan_end_date`` or ``sold_out``,
a zone without ``capacity`` or ``price``), and a missing or empty ``zones`` list renders a
plan without zones. This module never parses: tests compute what they expect from the dicts
themselves. ``deep_document`` streams a document nested as deep as asked (a depth bomb), and
``huge_value`` one with a title as long as asked.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

Snapshot = Sequence[Mapping[str, Any]]

_EVENT_NAMES = {
    "base_plan_id": "base_event_id",
    "plan_id": "event_id",
    "plan_start_date": "event_start_date",
    "plan_end_date": "event_end_date",
}
_TAGS = {
    "planList": ("planList", "base_plan", "plan"),
    "eventList": ("eventList", "base_event", "event"),
}
_CHILDREN = {"plans", "zones"}


def render(
    snapshot: Snapshot,
    *,
    variant: str = "planList",
    charrefs: bool = False,
    pretty: bool = True,
) -> bytes:
    """The document for ``snapshot``: ``variant`` is ``planList`` or ``eventList``;
    ``charrefs`` writes every non-ASCII character as a character reference (``&#233;``);
    ``pretty`` indents like the real feed."""
    return b"".join(_chunks(snapshot, variant=variant, charrefs=charrefs, pretty=pretty))


def _chunks(snapshot: Snapshot, *, variant: str, charrefs: bool, pretty: bool) -> Iterator[bytes]:
    root, base_tag, plan_tag = _TAGS[variant]
    rename = _EVENT_NAMES if variant == "eventList" else {}
    nl = "\n" if pretty else ""
    i1, i2, i3, i4 = (" " * (3 * level) if pretty else "" for level in range(1, 5))

    def attrs(element: Mapping[str, Any]) -> str:
        return "".join(
            f' {rename.get(key, key)}="{_escape(_text(value), charrefs)}"'
            for key, value in element.items()
            if key not in _CHILDREN and value is not None
        )

    yield f'<?xml version="1.0" encoding="UTF-8"?>{nl}<{root} version="1.0">{nl}'.encode()
    yield f"{i1}<output>{nl}".encode()
    for base in snapshot:
        parts = [f"{i2}<{base_tag}{attrs(base)}>{nl}"]
        for plan in base.get("plans", ()):
            parts.append(f"{i3}<{plan_tag}{attrs(plan)}>{nl}")
            parts.extend(f"{i4}<zone{attrs(zone)} />{nl}" for zone in plan.get("zones", ()))
            parts.append(f"{i3}</{plan_tag}>{nl}")
        parts.append(f"{i2}</{base_tag}>{nl}")
        yield "".join(parts).encode()
    yield f"{i1}</output>{nl}</{root}>{nl}".encode()


def deep_document(
    depth: int, snapshot: Snapshot = (), *, piece: int = 64 * 1024
) -> Iterator[bytes]:
    """A planList holding ``snapshot`` and then an unknown element ``<x>`` nested ``depth``
    levels deep inside ``output``, streamed in chunks of about ``piece`` bytes and never held
    whole: 7 bytes a level, so 10 million levels are a 70 MB document."""
    *head, tail = _chunks(snapshot, variant="planList", charrefs=False, pretty=False)
    yield from head
    for tag in (b"<x>", b"</x>"):
        per_piece = max(1, piece // len(tag))
        block = tag * per_piece
        for _ in range(depth // per_piece):
            yield block
        yield tag * (depth % per_piece)
    yield tail


def huge_value(size: int, *, piece: int = 64 * 1024) -> Iterator[bytes]:
    """A planList with one base_plan whose title is ``size`` bytes (``x``), then a valid
    plan: streamed in chunks of about ``piece`` bytes and never held whole."""
    yield (
        b'<?xml version="1.0" encoding="UTF-8"?>\n<planList version="1.0"><output>\n'
        b'<base_plan base_plan_id="1" sell_mode="online" title="'
    )
    block = b"x" * piece
    for _ in range(size // piece):
        yield block
    yield b"x" * (size % piece)
    yield (
        b'"><plan plan_id="1" plan_start_date="2021-06-30T21:00:00"><zone zone_id="1"'
        b' price="1.00"/></plan></base_plan></output></planList>'
    )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _escape(value: str, charrefs: bool) -> str:
    escaped = (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        # attribute-value normalisation would turn these into spaces
        .replace("\t", "&#9;")
        .replace("\n", "&#10;")
        .replace("\r", "&#13;")
    )
    if charrefs and not escaped.isascii():
        escaped = "".join(c if c.isascii() else f"&#{ord(c)};" for c in escaped)
    return escaped


def synthetic(
    plans: int, *, zones_per_plan: int = 5, plans_per_base: int = 2, seed: int = 0
) -> list[dict[str, Any]]:
    """A valid snapshot of ``plans`` plans shaped like the real feed (about 570 bytes a plan
    rendered pretty with 5 zones), for benchmarks and size tests."""
    rng = random.Random(seed)
    epoch = datetime(2021, 1, 1)
    snapshot: list[dict[str, Any]] = []
    for number in range(plans):
        if number % plans_per_base == 0:
            base_number = number // plans_per_base
            snapshot.append(
                {
                    "base_plan_id": str(1000 + base_number),
                    "sell_mode": "online" if base_number % 4 else "offline",
                    "organizer_company_id": str(base_number % 7),
                    "title": f"Concierto número {base_number} & amigos",
                    "plans": [],
                }
            )
        starts = epoch + timedelta(minutes=rng.randrange(0, 2 * 365 * 24 * 60))
        snapshot[-1]["plans"].append(
            {
                "plan_start_date": starts.isoformat(),
                "plan_end_date": (starts + timedelta(minutes=rng.randrange(30, 240))).isoformat(),
                "plan_id": str(10_000 + number),
                "sell_from": (starts - timedelta(days=60)).isoformat(),
                "sell_to": (starts - timedelta(minutes=10)).isoformat(),
                "sold_out": rng.random() < 0.1,
                "zones": [
                    {
                        "zone_id": str(rng.randrange(1, 400)),
                        "capacity": str(rng.randrange(0, 500)),
                        "price": f"{rng.randrange(500, 20_000) / 100:.2f}",
                        "name": f"Zona {zone}",
                        "numbered": rng.random() < 0.5,
                    }
                    for zone in range(zones_per_plan)
                ],
            }
        )
    return snapshot
