"""The incremental, hardened parser of Fever "planList" snapshots.

Feed it bytes in chunks of any size as they arrive; it hands back each plan as soon as its
closing tag has been read, and keeps nothing else: no tree is built (an lxml *parser target*
receives start/end events and maps them), so memory does not grow with the snapshot.

Format
------
Every value is an XML attribute::

    <planList>
      <output>
        <base_plan base_plan_id sell_mode title [organizer_company_id]>        (0..n)
          <plan plan_id plan_start_date [plan_end_date] sell_from sell_to [sold_out]>  (1..n)
            <zone zone_id [capacity] price name numbered/>  (0..n; zone_id may repeat)

    <eventList> <output> <base_event base_event_id ...> <event event_id event_start_date
    event_end_date ...> <zone .../>             the older variant, otherwise the same

The root element chooses the variant; both map to the same ``PlanRecord``. Date-times are
``YYYY-MM-DDTHH:MM:SS`` without a zone and are read as UTC (fractional seconds and an explicit
``Z``/``±HH:MM`` offset are accepted too and converted to UTC). Unknown attributes are ignored,
and so are unknown elements with their whole subtree, so the provider may add to the format.
Only this nesting is read: a ``plan`` outside a ``base_plan`` or a ``base_plan`` outside
``output`` is an unknown element. Elements are not namespaced (a namespaced root is rejected).
Text content, comments and processing instructions are ignored (each at most
``MAX_GAP_BYTES`` long, like any markup: see "Hardening").

Validation: skip the plan, count it, go on
------------------------------------------
A plan that breaks a rule is skipped: ``FeedParser.skipped`` counts it, the first
``MAX_SKIP_SAMPLES`` skips are kept in ``skip_samples`` with a short, stable reason such as
``invalid plan_start_date '2021-09-31T20:00:00'``, and its neighbours are unaffected. What the
service needs of a plan is its identity, a title and a valid start; everything else it serves
(the end, the prices) may be missing, as the Fever spec allows, and what it does not serve is
never a reason to skip.

- base_plan (every plan under a bad base_plan is skipped, each with the base_plan's reason):
  ``base_plan_id`` present and an id; ``sell_mode`` is ``online`` or ``offline`` in any case
  (``ONLINE`` is read as ``online``); ``title`` present (an empty title is allowed) and at most
  ``MAX_TITLE_LENGTH`` characters (a longer one: ``title longer than 1024 characters``).
  ``organizer_company_id`` is optional and never a reason to skip: kept when it is an id,
  otherwise ``None``.
- plan: ``plan_id`` present and an id; ``plan_start_date`` present and a real date-time
  (``2021-09-31`` is not). ``plan_end_date`` may be missing or empty (``ends_at`` is ``None``:
  the plan has no end); when given it must be a real date-time, not before the start.
  ``sell_from``, ``sell_to`` and ``sold_out`` are read when valid and are otherwise ``None``,
  never a reason to skip (``sold_out`` is one of ``true``, ``false``, ``1``, ``0``).
- zone (0..n per plan): ``price``, when present, is a non-negative decimal (``12``,
  ``12.50``; no sign, exponent, ``NaN`` or ``Infinity``), or the plan is skipped. A zone
  without ``price`` says nothing about the plan's prices and is left out of them.
  ``capacity``, ``zone_id``, ``name`` and ``numbered`` are not read: nothing downstream uses
  them.
- An id is 1 to ``MAX_ID_LENGTH`` (64) printable ASCII characters without spaces.
- A ``base_plan``, ``plan`` or ``zone`` with more than ``MAX_ATTRIBUTES`` attributes is a
  bad record (its plans are skipped), whatever the attributes are.

``min_price``/``max_price`` span every priced zone of the plan, capacity 0 included; a plan
without priced zones has ``None`` for both. Plans repeat their ``plan_id`` across base_plans; a
record carries both ids and the caller keys on them. The same plan may also be listed twice
in one snapshot: the parser hands over every listing, in document order, and the store keeps
the last one (``plans/sql/store.sql``). ``plans_seen`` counts every plan element read, so
``records + skipped == plans_seen``.

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
  ``dtd_validation=False``, ``huge_tree=False`` (its default limits: names up to 50,000
  bytes, an attribute value or a comment up to 10 MB; but see the gap bound below: they are
  checked only once the whole construct has been buffered) and
  ``resolve_entities="internal"``: external entities are refused and parameter entities
  disabled even if a declaration got through. With no DTD the only references left are the
  five predefined entities and character references, which are expanded as XML requires.
  (``resolve_entities=False`` is *not* safer here: libxml2 then hands ``&amp;`` to the target
  as the literal text ``&#38;`` inside attribute values, which would corrupt every title with
  an ampersand.)
- Nesting depth: an element deeper than ``MAX_DEPTH`` (64) elements, counted inside ignored
  subtrees too, fails the document (``document nested deeper than 64 elements``) from the
  target's ``start`` callback, so libxml2 never grows its element stack past that (deep
  nesting would otherwise grow it without bound).
- Attributes per element: libxml2 builds every attribute of a start tag, and lxml a dict of them,
  before the target sees the element (some 200 bytes each: a start tag of short attributes costs
  many times its size). So ``FeedParser.feed`` counts ``=`` bytes between ``<`` bytes in the raw
  input before libxml2 does (``<`` cannot occur inside a start tag, ``=`` occurs once per
  attribute) and fails the document past ``MAX_MARKUP_EQUALS`` (10,000): ``more than 10000 '='
  between two '<' (an element with too many attributes?)``. Text, comments or values with that
  many ``=`` fail the same way. The count is of bytes, so it holds for UTF-8 (the feed's encoding)
  and other encodings where those two bytes only ever mean ``<`` and ``=``; for UTF-16 or ISO-2022
  input, where they can be part of other characters, the gap bound below is the only one: a start
  tag of at most 1 MiB (about 60,000 short attributes in UTF-16).
- Gap between two start tags (``MAX_GAP_BYTES``, 1 MiB), bounded while reading: libxml2's push
  parser reads a start tag, end tag, comment, processing instruction, CDATA section or entity
  reference only once it holds all of it, and until then keeps every byte of it in a buffer that
  doubles as it grows; its 10 MB limits are checked only then. So one unfinished huge attribute
  value grew the fetch worker by its whole size, gzip-compressed or not, before it failed (the
  figures: tests/plan_service/ingest/test_feed_memory.py). ``FeedParser`` therefore hands libxml2
  its input in
  spans of 64 KiB (``_GUARD_SPAN``) and counts the bytes fed since the span in which libxml2 last
  read a start tag (the mapper counts its ``start`` callbacks); past ``MAX_GAP_BYTES`` the
  document fails: ``more than 1048576 bytes without a new element (a start tag, attribute value,
  comment or text that long?); the last markup began '<base_plan base_plan_id="1" ...'``. Whatever
  libxml2 was holding, it then holds at most 1 MiB and two spans (a few MiB with its buffer's
  doubling), compressed bodies alike (they reach the parser decoded, in pieces). Text is not
  buffered by libxml2 (and is dropped: the target takes no text), but a text run that long fails
  the same way; the feed has none. The bound counts bytes without looking at them, so it holds in
  any encoding. It is checked per span: a gap (from the end of one start tag to the end of the
  next) of at most 1 MiB always passes, one over 1 MiB and two spans (128 KiB) always fails, and
  in between it depends on where the input is cut. Why 1 MiB: the longest start tag a valid
  planList needs is a base_plan's, and its fields are small (a title of at most 1,024 characters
  is at most 4 KiB of UTF-8, or 10 KiB written as character references; ids at most 64): even 64
  title-sized attributes are 640 KiB. 1 MiB leaves room for attributes we do not read and is ten
  times below libxml2's own limits. Such a document fails its run rather than skipping a plan: a
  streaming parser cannot skip a start tag it has not finished reading (where it ends is not known
  yet), and buffering it to find out is the cost being bounded. A value under the bound but over
  its field's size (below) still skips only its plans.
- Field sizes: ids are at most ``MAX_ID_LENGTH`` and titles ``MAX_TITLE_LENGTH`` characters;
  a longer one skips its plans (above), so no oversized value is staged, stored or served.
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

from pgenough_plans.ingest.errors import FeedError

if TYPE_CHECKING:  # a stub-only protocol; at run time lxml looks the callbacks up by name
    from lxml.etree import ParserTarget

    _Target = ParserTarget[None]
else:
    _Target = object

MAX_SKIP_SAMPLES: Final = 20
"""How many skips ``FeedParser.skip_samples`` keeps (all of them are counted)."""

DEFAULT_CHUNK_SIZE: Final = 64 * 1024
"""Bytes handed to the parser at once (and guarded, ``_GUARD_SPAN``); the simulator streams
its body in chunks of this size too."""

# The bounds of a document and of its fields (see "Hardening" above). Other modules and the
# docs take them from here.
MAX_ID_LENGTH: Final = 64
"""Characters of a ``base_plan_id``, ``plan_id`` or ``organizer_company_id``, at most."""
MAX_TITLE_LENGTH: Final = 1024
"""Characters of a title, at most; a base_plan with a longer one has its plans skipped."""
MAX_DEPTH: Final = 64
"""Elements nested in one another, the root included, at most; deeper fails the document."""
MAX_ATTRIBUTES: Final = 64
"""Attributes of a ``base_plan``, ``plan`` or ``zone``, at most; more skips its plans."""
MAX_MARKUP_EQUALS: Final = 10_000
"""``=`` bytes between two ``<`` bytes of the input, at most; more fails the document
before libxml2 builds the attributes of such an element."""
MAX_GAP_BYTES: Final = 1 << 20
"""Bytes of input between two start tags, at most (1 MiB): a start tag, attribute value,
comment, processing instruction, CDATA section or text run longer than that fails the
document while it is read (see "Hardening": libxml2 would buffer it whole)."""

_CLIP: Final = 40
_ID_CLIP: Final = MAX_ID_LENGTH


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """One plan of a snapshot, validated and typed."""

    base_plan_id: str
    plan_id: str
    title: str
    sell_mode: str
    """``online`` or ``offline`` (lower case, whatever the feed's case)."""
    organizer_company_id: str | None
    starts_at: datetime
    """Timezone-aware, UTC."""
    ends_at: datetime | None
    """Timezone-aware, UTC; never before ``starts_at``; ``None`` for a plan without an end."""
    sell_from: datetime | None
    sell_to: datetime | None
    sold_out: bool | None
    """``None`` when the feed does not say (or says something else than a boolean)."""
    min_price: Decimal | None
    """The lowest price over every priced zone of the plan, capacity 0 included; ``None``
    when no zone has a price (then ``max_price`` is ``None`` too)."""
    max_price: Decimal | None
    zones: int
    """How many zone elements the plan has (0 or more)."""


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
_SELL_MODE_LENGTH: Final = max(map(len, _SELL_MODES))
_BOOLEANS: Final = {"true": True, "false": False, "1": True, "0": False}
_ID: Final = re.compile(rf"[!-~]{{1,{MAX_ID_LENGTH}}}")
_DATETIME: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})?"
)
_PRICE: Final = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?")
_NEGATIVE: Final = re.compile(r"-[0-9]+(?:\.[0-9]+)?")
# From a "<", more than MAX_MARKUP_EQUALS "=" before the next "<" (possessive: linear time).
_CROWDED: Final = re.compile(rb"<(?:[^<=]*+=){%d}" % (MAX_MARKUP_EQUALS + 1))
_GUARD_SPAN: Final = DEFAULT_CHUNK_SIZE  # bytes guarded and handed to libxml2 at once
_OPENER: Final = _CLIP + 1  # bytes of the last markup kept for the gap's reason (clipped)
# The gap is checked once per span: the bound means something only if it is longer.
assert MAX_GAP_BYTES > 2 * _GUARD_SPAN

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


_COPY_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
COPY_NULL: Final = "\\N"
"""NULL in PostgreSQL's COPY text format."""


def _copy_text(value: str) -> str:
    """``value`` escaped for COPY text format (checks first: nearly every value is clean)."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_COPY_ESCAPES)
    return value


def _copy_stamp(raw: str, parsed: datetime) -> str:
    """COPY text of a date-time ``_parse_datetime`` accepted: the feed's own text plus ``Z``
    for its plain form (19 characters, fromisoformat validated them), else ISO 8601 in UTC."""
    return raw + "Z" if len(raw) == 19 else parsed.isoformat()


def _parse_datetime(value: str) -> datetime | None:
    """The UTC date-time ``value`` denotes, or ``None`` when it is not a real one."""
    try:
        if len(value) == 19 and value[4::3] == "--T::":
            # The feed's own format, the hot path: fromisoformat checks the digits (ASCII
            # only) and the calendar, "Z" makes it UTC (datetime.replace costs many times more).
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

    def __init__(self, copy_text: bool = False) -> None:
        self.records: list[PlanRecord] = []
        self.lines: list[str] = []
        """COPY text mode: each kept plan as one line (``_end_plan_copy``)."""
        if copy_text:
            self._end_plan = self._end_plan_copy  # type: ignore[method-assign]
        self.skipped = 0
        self.skip_samples: list[Skip] = []
        self.plans_seen = 0
        self.variant: str | None = None
        self.level = _BEFORE_ROOT
        self._depth = 0  # elements open, read or ignored
        self.starts = 0
        """Start tags read so far (``FeedParser`` watches it to bound the gap between two)."""
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
        self._starts_at = datetime.min
        self._ends_at: datetime | None = None
        self._sell_from: datetime | None = None
        self._sell_to: datetime | None = None
        self._sold_out: bool | None = None
        # the feed's text of the date-times above, for COPY text mode
        self._starts_raw = ""
        self._ends_raw = ""
        self._sell_from_raw = ""
        self._sell_to_raw = ""
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
        self.starts += 1
        self._depth += 1
        if self._depth > MAX_DEPTH:
            # Raised before libxml2 reads the next element: its element stack stays this deep.
            raise FeedError(f"document nested deeper than {MAX_DEPTH} elements")
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
        self._depth -= 1
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

    def take_lines(self) -> list[str]:
        """COPY text mode: the lines completed since the last call."""
        lines = self.lines
        self.lines = []
        return lines

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
        # Only a short value is lower-cased: a hostile 9 MB sell_mode is not copied.
        mode = sell_mode.lower() if sell_mode and len(sell_mode) <= _SELL_MODE_LENGTH else ""
        reason = None
        if len(attrib) > MAX_ATTRIBUTES:
            reason = f"{self._base_tag} with more than {MAX_ATTRIBUTES} attributes"
        elif base_id is None:
            reason = f"missing {id_name}"
        elif _ID.fullmatch(base_id) is None:
            reason = f"invalid {id_name} {_show(base_id)}"
        elif sell_mode is None:
            reason = "missing sell_mode"
        elif mode not in _SELL_MODES:
            reason = f"invalid sell_mode {_show(sell_mode)}"
        elif title is None:
            reason = "missing title"
        elif len(title) > MAX_TITLE_LENGTH:
            reason = f"title longer than {MAX_TITLE_LENGTH} characters"
        self._base_id = base_id
        self._base_key = base_id if reason is None and base_id is not None else ""
        self._base_reason = reason
        self._title = title if reason is None and title is not None else ""
        self._sell_mode = mode
        organizer = attrib.get("organizer_company_id")
        # Not served, so never a reason to skip; but only an id-sized value is kept.
        self._organizer = organizer if organizer and _ID.fullmatch(organizer) else None

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
        if len(attrib) > MAX_ATTRIBUTES:
            return f"{names.plan} with more than {MAX_ATTRIBUTES} attributes"
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
        self._starts_raw = raw
        ends_at = None
        raw = attrib.get(names.end)
        if raw:  # missing or empty: a plan without an end (the spec makes it nullable)
            ends_at = _parse_datetime(raw)
            if ends_at is None:
                return f"invalid {names.end} {_show(raw)}"
            if ends_at < starts_at:
                return f"{names.end} before {names.start}"
            self._ends_raw = raw
        # Not served: read when valid, never a reason to skip.
        raw = attrib.get("sell_from")
        self._sell_from = _parse_datetime(raw) if raw else None
        self._sell_from_raw = raw or ""
        raw = attrib.get("sell_to")
        self._sell_to = _parse_datetime(raw) if raw else None
        self._sell_to_raw = raw or ""
        raw = attrib.get("sold_out")
        self._sold_out = _BOOLEANS.get(raw) if raw is not None else None
        self._plan_key = plan_id
        self._starts_at = starts_at
        self._ends_at = ends_at
        return None

    def _zone(self, attrib: dict[str, str]) -> None:
        self._zones += 1
        if self._plan_reason is not None:
            return
        if len(attrib) > MAX_ATTRIBUTES:
            self._plan_reason = f"zone with more than {MAX_ATTRIBUTES} attributes"
            return
        raw = attrib.get("price")
        if raw is None:  # says nothing about the plan's prices (plan-service ignores it too)
            return
        if _PRICE.fullmatch(raw) is None:
            kind = "negative" if _NEGATIVE.fullmatch(raw) else "invalid"
            self._plan_reason = f"{kind} price {_show(raw)}"
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
        if reason is not None:
            self._skip(reason)
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
                min_price=self._min,
                max_price=self._max,
                zones=self._zones,
            )
        )

    def _end_plan_copy(self) -> None:
        """``_end_plan`` in COPY text mode: the staging columns after ``seq`` (``copy_staging``
        in ``sql/store.sql``), tab-separated, straight from the feed's validated strings:
        no record, no typed values formatted back to text."""
        reason = self._plan_reason
        if reason is not None:
            self._skip(reason)
            return
        ends, sell_from, sell_to = self._ends_at, self._sell_from, self._sell_to
        low, high, sold_out = self._min, self._max, self._sold_out
        organizer = self._organizer
        self.lines.append(
            "\t".join(
                (
                    _copy_text(self._base_key),
                    _copy_text(self._plan_key),
                    _copy_text(self._title),
                    self._sell_mode,
                    COPY_NULL if organizer is None else _copy_text(organizer),
                    _copy_stamp(self._starts_raw, self._starts_at),
                    COPY_NULL if ends is None else _copy_stamp(self._ends_raw, ends),
                    COPY_NULL if sell_from is None else _copy_stamp(self._sell_from_raw, sell_from),
                    COPY_NULL if sell_to is None else _copy_stamp(self._sell_to_raw, sell_to),
                    COPY_NULL if sold_out is None else ("t" if sold_out else "f"),
                    COPY_NULL if low is None else str(low),
                    COPY_NULL if high is None else str(high),
                )
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

    def __init__(self, *, copy_text: bool = False) -> None:
        """``copy_text``: hand back each plan as a line of COPY text for the staging table
        (``feed_copy``/``close_copy``) instead of a ``PlanRecord``: what the fetch worker
        stages, without building typed values that would be formatted back to text."""
        self._copy_text = copy_text
        self._mapper = _Mapper(copy_text)
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
        self._equals = 0  # "=" bytes since the last "<" (see _guard)
        self._gap = 0  # bytes fed since the span in which libxml2 last read a start tag
        self._opener = b""  # the input from the last "<" seen, clipped (for the gap's reason)
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
        self._check_mode(copy_text=False)
        self._feed(chunk)
        return self._mapper.take()

    def close(self) -> list[PlanRecord]:
        """End the document: the last records, or ``FeedError`` if it is incomplete."""
        self._check_mode(copy_text=False)
        self._close()
        return self._mapper.take()

    def feed_copy(self, chunk: bytes) -> list[str]:
        """``feed`` in COPY text mode: the plans completed, each as a line of COPY text of the
        staging columns after ``seq`` (``copy_staging`` in ``sql/store.sql``), no newline."""
        self._check_mode(copy_text=True)
        self._feed(chunk)
        return self._mapper.take_lines()

    def close_copy(self) -> list[str]:
        """``close`` in COPY text mode."""
        self._check_mode(copy_text=True)
        self._close()
        return self._mapper.take_lines()

    def _check_mode(self, *, copy_text: bool) -> None:
        if copy_text != self._copy_text:
            wanted = "FeedParser(copy_text=True)" if copy_text else "FeedParser()"
            raise RuntimeError(f"this method needs a {wanted}")

    def _feed(self, chunk: bytes) -> None:
        self._check_usable()
        if not chunk:
            return
        self._bytes += len(chunk)
        mapper = self._mapper
        try:
            for lo in range(0, len(chunk), _GUARD_SPAN):
                span = chunk if len(chunk) <= _GUARD_SPAN else chunk[lo : lo + _GUARD_SPAN]
                self._guard(span)
                starts = mapper.starts
                self._parser.feed(span)
                self._remember_opener(span)
                if mapper.starts != starts:
                    self._gap = 0
                else:
                    self._gap += len(span)
                    if self._gap > MAX_GAP_BYTES:
                        raise FeedError(self._gap_reason())
        except FeedError as exc:  # raised by the mapper inside a callback, or the gap
            raise self._fail(exc) from None
        except etree.LxmlError as exc:
            raise self._fail(FeedError(_syntax_reason(exc))) from exc

    def _close(self) -> None:
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

    def _guard(self, chunk: bytes) -> None:
        """Fail before libxml2 reads an element with more than ``MAX_MARKUP_EQUALS``
        attributes: it would build them all, and lxml a dict of them, before the mapper could
        say no. ``<`` cannot occur in a start tag (not even in its values) and each attribute
        has one ``=``, so more ``=`` bytes than that between two ``<`` bytes is refused.

        C-speed counting only: span by span, the ``=`` before a span's first ``<`` continue the
        run from the previous span; the regex looks inside a span only when the span has more
        ``=`` in all than one run may (never, for the real feed: ~3,500 per 64 KiB).
        """
        equals = self._equals
        for lo in range(0, len(chunk), _GUARD_SPAN):
            hi = lo + _GUARD_SPAN
            first = chunk.find(b"<", lo, hi)
            if first < 0:
                equals += chunk.count(b"=", lo, hi)
            else:
                equals += chunk.count(b"=", lo, first)
                if equals <= MAX_MARKUP_EQUALS:
                    crowded = chunk.count(b"=", first, hi) > MAX_MARKUP_EQUALS
                    if crowded and _CROWDED.search(chunk, first, hi) is not None:
                        equals = MAX_MARKUP_EQUALS + 1
                    else:
                        equals = chunk.count(b"=", chunk.rfind(b"<", lo, hi), hi)
            if equals > MAX_MARKUP_EQUALS:
                raise FeedError(
                    f"more than {MAX_MARKUP_EQUALS} '=' between two '<' "
                    "(an element with too many attributes?)"
                )
        self._equals = equals

    def _remember_opener(self, span: bytes) -> None:
        """Keep the start of the last markup seen, to say in the gap's reason what it was."""
        last = span.rfind(b"<")
        if last >= 0:
            self._opener = span[last : last + _OPENER]
        elif len(self._opener) < _OPENER:
            self._opener += span[: _OPENER - len(self._opener)]

    def _gap_reason(self) -> str:
        opener = self._opener.decode("utf-8", "replace")
        return (
            f"more than {MAX_GAP_BYTES} bytes without a new element (a start tag, attribute"
            f" value, comment or text that long?); the last markup began {_show(opener)}"
        )

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
        self._mapper.lines = []
        return error


def _syntax_reason(exc: etree.LxmlError) -> str:
    """One line for an lxml error: where, and libxml2's own words."""
    error = exc.error_log.last_error if exc.error_log else None
    if error is not None and error.message:
        message = " ".join(error.message.split())
        return f"XML syntax error at line {error.line}, column {error.column}: {message[:200]}"
    return f"XML syntax error: {' '.join(str(exc).split())[:200]}"
