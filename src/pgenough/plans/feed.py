"""The incremental, hardened parser of Fever "planList" snapshots.

Feed it bytes in chunks of any size as they arrive; it hands back each plan as soon as its
closing tag has been read, and keeps nothing else: no tree is built (an lxml *parser target*
receives start/end events and maps them), so memory does not grow with the snapshot.

Format
------
Every value is an XML attribute::

    <planList>
      <output>
        <base_plan base_plan_id sell_mode title [organizer_company_id]>         (0..n)
          <plan plan_id plan_start_date plan_end_date sell_from sell_to sold_out>  (1..n)
            <zone zone_id capacity price name numbered/>   (1..n; zone_id may repeat)

    <eventList> <output> <base_event base_event_id ...> <event event_id event_start_date
    event_end_date ...> <zone .../>             the older variant, otherwise the same

The root element chooses the variant; both map to the same ``PlanRecord``. Date-times are
``YYYY-MM-DDTHH:MM:SS`` without a zone and are read as UTC (fractional seconds and an explicit
``Z``/``±HH:MM`` offset are accepted too and converted to UTC). Unknown attributes are ignored,
and so are unknown elements with their whole subtree, so the provider may add to the format.
Only this nesting is read: a ``plan`` outside a ``base_plan`` or a ``base_plan`` outside
``output`` is an unknown element. Elements are not namespaced (a namespaced root is rejected).
Text content, comments and processing instructions are ignored.

Validation: skip the plan, count it, go on
------------------------------------------
A plan that breaks a rule is skipped: ``FeedParser.skipped`` counts it, the first
``MAX_SKIP_SAMPLES`` skips are kept in ``skip_samples`` with a short, stable reason such as
``invalid plan_start_date '2021-09-31T20:00:00'``, and its neighbours are unaffected.

- base_plan (every plan under a bad base_plan is skipped, each with the base_plan's reason):
  ``base_plan_id`` present and an id; ``sell_mode`` is ``online`` or ``offline``; ``title``
  present (an empty title is allowed). ``organizer_company_id`` is optional; empty means absent.
- plan: ``plan_id`` present and an id; ``plan_start_date`` and ``plan_end_date`` present and
  real date-times (``2021-09-31`` is not); the end is not before the start; ``sell_from`` and
  ``sell_to`` are optional (missing or empty gives ``None``) but must be valid when given;
  ``sold_out`` present and one of ``true``, ``false``, ``1``, ``0``; at least one zone.
- zone: ``price`` present and a non-negative decimal (``12``, ``12.50``; no sign, exponent,
  ``NaN`` or ``Infinity``); ``capacity`` present and a non-negative integer (0 is allowed).
  ``zone_id``, ``name`` and ``numbered`` are not read: nothing downstream uses them.
- An id is 1 to 64 printable ASCII characters without spaces.

``min_price``/``max_price`` span every zone of the plan, capacity 0 included. Plans repeat
their ``plan_id`` across base_plans; a record carries both ids and the caller keys on them.
``plans_seen`` counts every plan element read, so ``records + skipped == plans_seen``.

Failing the whole document: ``FeedError``
-----------------------------------------
Malformed XML, a wrong root element, a document that ends before its root closes (a
truncated body), and any hostile construct raise ``FeedError`` with a one-line reason. After
that the parser is dead: every later call raises the same error. A truncated body is only
known as such at ``close()``: records that ``feed()`` returned before a ``FeedError`` belong
to a failed document, and the caller must discard them (never seal the run).

Hardening
---------
- Any ``<!DOCTYPE>`` is rejected from the target's ``doctype`` callback, which libxml2 calls
  when it reads the declaration's name, before it parses a single declaration of the internal
  subset. So no entity can be declared: billion laughs and XXE (``file:``, ``http:`` or
  parameter entities) fail before anything is expanded, read or fetched.
- The libxml2 parser runs with ``no_network=True``, ``load_dtd=False``,
  ``dtd_validation=False`` and ``huge_tree=False`` (its default limits on depth, name and
  text sizes apply), and ``resolve_entities="internal"``: external entities are refused and
  parameter entities disabled even if a declaration got through. With no DTD the only
  references left are the five predefined entities and character references, which are
  expanded as XML requires. (``resolve_entities=False`` is *not* safer here: libxml2 then hands
  ``&amp;`` to the target as the literal text ``&#38;`` inside attribute values, which would
  corrupt every title with an ampersand.)
- An undefined entity reference is a well-formedness error, hence a ``FeedError``.
- lxml's exceptions are mapped to ``FeedError`` here, with ``raise ... from``; a ``FeedError``
  raised inside a target callback stops libxml2 and propagates unchanged from ``feed()``.
- Values quoted in reasons and ids kept in skip samples are clipped, so a hostile document
  cannot bloat the run's record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from lxml import etree

from pgenough.plans.errors import FeedError

if TYPE_CHECKING:  # a stub-only protocol; at run time lxml looks the callbacks up by name
    from lxml.etree import ParserTarget

    _Target = ParserTarget[None]
else:
    _Target = object

MAX_SKIP_SAMPLES: Final = 20
"""How many skips ``FeedParser.skip_samples`` keeps (all of them are counted)."""

DEFAULT_CHUNK_SIZE: Final = 64 * 1024
"""The chunk size ``parse_bytes`` feeds; a good size for the HTTP body stream too."""

_CLIP: Final = 40
_ID_CLIP: Final = 64


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """One plan of a snapshot, validated and typed."""

    base_plan_id: str
    plan_id: str
    title: str
    sell_mode: str
    """``online`` or ``offline``."""
    organizer_company_id: str | None
    starts_at: datetime
    """Timezone-aware, UTC."""
    ends_at: datetime
    """Timezone-aware, UTC; never before ``starts_at``."""
    sell_from: datetime | None
    sell_to: datetime | None
    sold_out: bool
    min_price: Decimal
    """The lowest price over every zone of the plan, capacity 0 included."""
    max_price: Decimal
    zones: int
    """How many zone elements the plan has (at least 1)."""


@dataclass(frozen=True, slots=True)
class Skip:
    """Why a plan was left out of the records."""

    reason: str
    base_plan_id: str | None
    plan_id: str | None


@dataclass(frozen=True, slots=True)
class _Variant:
    """Element and attribute names of one variant of the feed."""

    root: str
    base: str
    plan: str
    base_id: str
    plan_id: str
    start: str
    end: str


_VARIANTS: Final = {
    "planList": _Variant(
        "planList", "base_plan", "plan", "base_plan_id", "plan_id", "plan_start_date",
        "plan_end_date",
    ),
    "eventList": _Variant(
        "eventList", "base_event", "event", "base_event_id", "event_id", "event_start_date",
        "event_end_date",
    ),
}  # fmt: skip

_SELL_MODES: Final = frozenset({"online", "offline"})
_BOOLEANS: Final = {"true": True, "false": False, "1": True, "0": False}
_ID: Final = re.compile(r"[!-~]{1,64}")
_DATETIME: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})?"
)
_PRICE: Final = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?")
_NEGATIVE: Final = re.compile(r"-[0-9]+(?:\.[0-9]+)?")

# Where the mapper is in the document.
_BEFORE_ROOT: Final = 0
_IN_ROOT: Final = 1
_IN_OUTPUT: Final = 2
_IN_BASE: Final = 3
_IN_PLAN: Final = 4
_IN_ZONE: Final = 5
_AFTER_ROOT: Final = 6


def _clip(value: str, limit: int = _CLIP) -> str:
    """``value`` cut to a readable length for a reason or a sample."""
    return value if len(value) <= limit else value[:limit] + "..."


def _show(value: str) -> str:
    """A value quoted for a reason, clipped."""
    return repr(_clip(value))


def _clip_id(value: str | None) -> str | None:
    return None if value is None else _clip(value, _ID_CLIP)


def _parse_datetime(value: str) -> datetime | None:
    """The UTC date-time ``value`` denotes, or ``None`` when it is not a real one."""
    try:
        if len(value) == 19 and value[4::3] == "--T::":
            # The feed's own format, the hot path: fromisoformat checks the digits (ASCII
            # only) and the calendar, "Z" makes it UTC (datetime.replace costs 10 times more).
            return datetime.fromisoformat(value + "Z")
        if _DATETIME.fullmatch(value) is None:
            return None
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # 2021-09-31; an offset pushing past year 1 or 9999
        return None


class _Mapper(_Target):
    """The lxml parser target: maps start/end events to records, keeping only the current
    base_plan's and plan's fields."""

    def __init__(self) -> None:
        self.records: list[PlanRecord] = []
        self.skipped = 0
        self.skip_samples: list[Skip] = []
        self.plans_seen = 0
        self.variant: str | None = None
        self.level = _BEFORE_ROOT
        self._ignore = 0  # depth inside an element we do not read
        self._names = _VARIANTS["planList"]  # until the root says otherwise
        self._base_tag = ""  # no element matches before the root is read
        self._plan_tag = ""
        # current base_plan: the attribute as given, and the id once valid
        self._base_id: str | None = None
        self._base_key = ""
        self._base_reason: str | None = None
        self._title = ""
        self._sell_mode = ""
        self._organizer: str | None = None
        # current plan
        self._plan_id: str | None = None
        self._plan_key = ""
        self._plan_reason: str | None = None
        self._starts_at = self._ends_at = datetime.min
        self._sell_from: datetime | None = None
        self._sell_to: datetime | None = None
        self._sold_out = False
        self._zones = 0
        self._min: Decimal | None = None
        self._max: Decimal | None = None

    # -- lxml target callbacks --------------------------------------------------------------

    def doctype(self, name: str | None, public_id: str | None, system_url: str | None) -> None:
        raise FeedError(
            f"DOCTYPE is not allowed (found <!DOCTYPE {_clip(name or '')}>): "
            "DTDs and entity declarations are rejected"
        )

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if self._ignore:
            self._ignore += 1
            return
        level = self.level
        if level == _IN_PLAN:
            if tag == "zone":
                self.level = _IN_ZONE
                self._zone(attrib)
                return
        elif level == _IN_BASE:
            if tag == self._plan_tag:
                self.level = _IN_PLAN
                self._begin_plan(attrib)
                return
        elif level == _IN_OUTPUT:
            if tag == self._base_tag:
                self.level = _IN_BASE
                self._begin_base(attrib)
                return
        elif level == _IN_ROOT:
            if tag == "output":
                self.level = _IN_OUTPUT
                return
        elif level == _BEFORE_ROOT:
            self._begin_root(tag)
            return
        self._ignore = 1

    def end(self, tag: str) -> None:
        if self._ignore:
            self._ignore -= 1
            return
        level = self.level
        if level == _IN_ZONE:
            self.level = _IN_PLAN
        elif level == _IN_PLAN:
            self.level = _IN_BASE
            self._end_plan()
        elif level == _IN_BASE:
            self.level = _IN_OUTPUT
        elif level == _IN_OUTPUT:
            self.level = _IN_ROOT
        elif level == _IN_ROOT:
            self.level = _AFTER_ROOT

    def close(self) -> None:
        """Called by lxml when parsing stops, also after an error; ``FeedParser`` decides."""

    # -- mapping ----------------------------------------------------------------------------

    def take(self) -> list[PlanRecord]:
        """The records completed since the last call."""
        records = self.records
        self.records = []
        return records

    def _begin_root(self, tag: str) -> None:
        variant = _VARIANTS.get(tag)
        if variant is None:
            raise FeedError(
                f"unexpected root element <{_clip(tag)}>; expected planList or eventList"
            )
        self.variant = variant.root
        self._names = variant
        self._base_tag = variant.base
        self._plan_tag = variant.plan
        self.level = _IN_ROOT

    def _begin_base(self, attrib: dict[str, str]) -> None:
        id_name = self._names.base_id
        base_id = attrib.get(id_name)
        sell_mode = attrib.get("sell_mode")
        title = attrib.get("title")
        reason = None
        if base_id is None:
            reason = f"missing {id_name}"
        elif _ID.fullmatch(base_id) is None:
            reason = f"invalid {id_name} {_show(base_id)}"
        elif sell_mode is None:
            reason = "missing sell_mode"
        elif sell_mode not in _SELL_MODES:
            reason = f"invalid sell_mode {_show(sell_mode)}"
        elif title is None:
            reason = "missing title"
        self._base_id = base_id
        self._base_key = base_id if reason is None and base_id is not None else ""
        self._base_reason = reason
        self._title = title or ""
        self._sell_mode = sell_mode or ""
        self._organizer = attrib.get("organizer_company_id") or None

    def _begin_plan(self, attrib: dict[str, str]) -> None:
        self.plans_seen += 1
        self._plan_id = attrib.get(self._names.plan_id)
        self._zones = 0
        self._min = self._max = None
        reason = self._base_reason
        self._plan_reason = reason if reason is not None else self._read_plan(attrib)

    def _read_plan(self, attrib: dict[str, str]) -> str | None:
        """Validate and keep the plan's own attributes; the reason to skip it, if any."""
        names = self._names
        plan_id = self._plan_id
        if plan_id is None:
            return f"missing {names.plan_id}"
        if _ID.fullmatch(plan_id) is None:
            return f"invalid {names.plan_id} {_show(plan_id)}"
        raw = attrib.get(names.start)
        if raw is None:
            return f"missing {names.start}"
        starts_at = _parse_datetime(raw)
        if starts_at is None:
            return f"invalid {names.start} {_show(raw)}"
        raw = attrib.get(names.end)
        if raw is None:
            return f"missing {names.end}"
        ends_at = _parse_datetime(raw)
        if ends_at is None:
            return f"invalid {names.end} {_show(raw)}"
        if ends_at < starts_at:
            return f"{names.end} before {names.start}"
        sell_from = sell_to = None
        raw = attrib.get("sell_from")
        if raw and (sell_from := _parse_datetime(raw)) is None:
            return f"invalid sell_from {_show(raw)}"
        raw = attrib.get("sell_to")
        if raw and (sell_to := _parse_datetime(raw)) is None:
            return f"invalid sell_to {_show(raw)}"
        raw = attrib.get("sold_out")
        if raw is None:
            return "missing sold_out"
        sold_out = _BOOLEANS.get(raw)
        if sold_out is None:
            return f"invalid sold_out {_show(raw)}"
        self._plan_key = plan_id
        self._starts_at = starts_at
        self._ends_at = ends_at
        self._sell_from = sell_from
        self._sell_to = sell_to
        self._sold_out = sold_out
        return None

    def _zone(self, attrib: dict[str, str]) -> None:
        self._zones += 1
        if self._plan_reason is not None:
            return
        raw = attrib.get("price")
        if raw is None:
            self._plan_reason = "zone without price"
            return
        if _PRICE.fullmatch(raw) is None:
            kind = "negative" if _NEGATIVE.fullmatch(raw) else "invalid"
            self._plan_reason = f"{kind} price {_show(raw)}"
            return
        capacity = attrib.get("capacity")
        if capacity is None:
            self._plan_reason = "zone without capacity"
            return
        if not (capacity.isascii() and capacity.isdigit()):
            kind = "negative" if capacity[1:].isdigit() and capacity[:1] == "-" else "invalid"
            self._plan_reason = f"{kind} capacity {_show(capacity)}"
            return
        price = Decimal(raw)
        low, high = self._min, self._max
        if low is None or high is None:
            self._min = self._max = price
        elif price < low:
            self._min = price
        elif price > high:
            self._max = price

    def _end_plan(self) -> None:
        reason = self._plan_reason
        low, high = self._min, self._max
        if reason is not None:
            self._skip(reason)
            return
        if low is None or high is None:
            self._skip("no zones")
            return
        self.records.append(
            PlanRecord(
                base_plan_id=self._base_key,
                plan_id=self._plan_key,
                title=self._title,
                sell_mode=self._sell_mode,
                organizer_company_id=self._organizer,
                starts_at=self._starts_at,
                ends_at=self._ends_at,
                sell_from=self._sell_from,
                sell_to=self._sell_to,
                sold_out=self._sold_out,
                min_price=low,
                max_price=high,
                zones=self._zones,
            )
        )

    def _skip(self, reason: str) -> None:
        self.skipped += 1
        if len(self.skip_samples) < MAX_SKIP_SAMPLES:
            self.skip_samples.append(Skip(reason, _clip_id(self._base_id), _clip_id(self._plan_id)))


class FeedParser:
    """Push parser: feed(bytes) any chunk size, get completed records back; memory bounded
    (elements are discarded as soon as they are mapped).

    ``close()`` must be called at the end of the body: only then is the document known to be
    complete. Once closed, or once it has raised ``FeedError``, the parser is spent.
    """

    def __init__(self) -> None:
        self._mapper = _Mapper()
        self._parser = etree.XMLParser(
            target=self._mapper,
            resolve_entities="internal",  # see the module docstring: False mangles "&amp;"
            no_network=True,
            load_dtd=False,
            dtd_validation=False,
            huge_tree=False,
            attribute_defaults=False,
            remove_comments=True,
            remove_pis=True,
            collect_ids=False,
        )
        self._bytes = 0
        self._closed = False
        self._error: FeedError | None = None

    @property
    def skipped(self) -> int:
        """Plans skipped by validation."""
        return self._mapper.skipped

    @property
    def skip_samples(self) -> list[Skip]:
        """The first ``MAX_SKIP_SAMPLES`` skips, for the run's record."""
        return self._mapper.skip_samples

    @property
    def variant(self) -> str | None:
        """``planList`` or ``eventList`` once the root element has been read."""
        return self._mapper.variant

    @property
    def plans_seen(self) -> int:
        """Plan elements read so far, skipped ones included."""
        return self._mapper.plans_seen

    def feed(self, chunk: bytes) -> list[PlanRecord]:
        """Parse the next chunk of the document; the records it completed, in document order."""
        self._check_usable()
        if not chunk:
            return []
        self._bytes += len(chunk)
        try:
            self._parser.feed(chunk)
        except FeedError as exc:  # raised by the mapper inside a callback
            raise self._fail(exc) from None
        except etree.LxmlError as exc:
            raise self._fail(FeedError(_syntax_reason(exc))) from exc
        return self._mapper.take()

    def close(self) -> list[PlanRecord]:
        """End the document: the last records, or ``FeedError`` if it is incomplete."""
        self._check_usable()
        self._closed = True
        try:
            self._parser.close()
        except FeedError as exc:
            raise self._fail(exc) from None
        except etree.LxmlError as exc:
            if self._mapper.level == _AFTER_ROOT:  # e.g. content after the root element
                raise self._fail(FeedError(_syntax_reason(exc))) from exc
            raise self._fail(FeedError(self._early_end())) from exc
        if self._mapper.level != _AFTER_ROOT:  # libxml2 always objects first; stay sure
            raise self._fail(FeedError(self._early_end()))
        return self._mapper.take()

    def _early_end(self) -> str:
        if self._bytes == 0:
            return "empty document"
        if self._mapper.variant is None:
            return f"document ended before its root element (truncated?) after {self._bytes} bytes"
        return (
            f"document ended before </{self._mapper.variant}> (truncated?) "
            f"after {self._bytes} bytes"
        )

    def _check_usable(self) -> None:
        if self._error is not None:
            raise FeedError(str(self._error)) from self._error
        if self._closed:
            raise RuntimeError("FeedParser is closed; make a new one for the next document")

    def _fail(self, error: FeedError) -> FeedError:
        self._error = error
        self._mapper.records = []
        return error


def _syntax_reason(exc: etree.LxmlError) -> str:
    """One line for an lxml error: where, and libxml2's own words."""
    error = exc.error_log.last_error if exc.error_log else None
    if error is not None and error.message:
        message = " ".join(error.message.split())
        return f"XML syntax error at line {error.line}, column {error.column}: {message[:200]}"
    return f"XML syntax error: {' '.join(str(exc).split())[:200]}"


def parse_bytes(data: bytes) -> tuple[list[PlanRecord], FeedParser]:
    """Parse a whole document held in memory (tests, benchmarks): its records and the spent
    parser, for its counters. Raises ``FeedError`` like ``FeedParser``."""
    parser = FeedParser()
    records: list[PlanRecord] = []
    for offset in range(0, len(data), DEFAULT_CHUNK_SIZE):
        records += parser.feed(data[offset : offset + DEFAULT_CHUNK_SIZE])
    records += parser.close()
    return records, parser
