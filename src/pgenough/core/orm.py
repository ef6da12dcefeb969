"""The psycopg connection under an ORM's transaction, for the core's calls.

Every producer-side call takes the caller's psycopg connection and joins its transaction.
An ORM holds that connection; these give it back, with the ORM's transaction begun, so a
job enqueued (or a message published, a lock taken) commits or rolls back with the ORM's own
writes::

    with Session(engine) as session, session.begin():
        session.add(order)
        send_receipt.enqueue(sqlalchemy_connection(session), order_id=order.id)

    with transaction.atomic():
        order.save()
        send_receipt.enqueue(django_connection(), order_id=order.id)

Both ORMs must run on psycopg 3: SQLAlchemy's ``postgresql+psycopg://`` dialect, Django's
PostgreSQL backend with psycopg (Django >= 4.2) installed. Neither library is imported until
one of these is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

_C = TypeVar("_C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])


def sqlalchemy_connection(session: Session | Connection) -> psycopg.Connection[Any]:
    """The psycopg connection of a SQLAlchemy ``Session`` or ``Connection``, in its
    transaction (begun now if it was not, as SQLAlchemy's autobegin would): the work done
    on it commits with ``session.commit()`` / ``conn.commit()``, or not at all."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(session, scoped_session):
        session = session()  # the registry's current Session
    if isinstance(session, AsyncSession | AsyncConnection):
        raise _other_kind(session, "sqlalchemy_connection", "await sqlalchemy_async_connection")
    if not isinstance(session, Session | Connection):
        raise _not_sqlalchemy(
            session, "sqlalchemy_connection", "a SQLAlchemy Session or Connection"
        )
    conn = session.connection() if isinstance(session, Session) else session
    if not conn.in_transaction():
        conn.begin()
    return _psycopg(conn.connection.driver_connection, psycopg.Connection, conn.dialect.driver)


async def sqlalchemy_async_connection(
    session: AsyncSession | AsyncConnection,
) -> psycopg.AsyncConnection[Any]:
    """``sqlalchemy_connection`` for SQLAlchemy's asyncio ``AsyncSession`` or
    ``AsyncConnection``."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session

    if isinstance(session, async_scoped_session):
        session = session()  # the registry's current AsyncSession
    if isinstance(session, Session | Connection):
        raise _other_kind(session, "sqlalchemy_async_connection", "sqlalchemy_connection")
    if not isinstance(session, AsyncSession | AsyncConnection):
        raise _not_sqlalchemy(
            session, "sqlalchemy_async_connection", "a SQLAlchemy AsyncSession or AsyncConnection"
        )
    conn = await session.connection() if isinstance(session, AsyncSession) else session
    if not conn.in_transaction():
        await conn.begin()
    raw = await conn.get_raw_connection()
    return _psycopg(raw.driver_connection, psycopg.AsyncConnection, conn.dialect.driver)


def django_connection(using: str | None = None) -> psycopg.Connection[Any]:
    """The psycopg connection of Django's database ``using`` (the default one when None).

    Inside ``transaction.atomic()`` the work done on it commits with the block, or rolls
    back with it; outside, Django runs in autocommit and so does each call, as Django's
    own queries do."""
    from django.db import DEFAULT_DB_ALIAS, connections

    wrapper = connections[using or DEFAULT_DB_ALIAS]
    if wrapper.vendor != "postgresql":
        raise TypeError(
            f"pgenough needs PostgreSQL; Django's {wrapper.alias!r} is {wrapper.vendor}"
        )
    wrapper.ensure_connection()
    return _psycopg(wrapper.connection, psycopg.Connection, "psycopg2 or another driver")


def _other_kind(given: object, called: str, instead: str) -> TypeError:
    """A sync session given to the async adapter or the other way round: said with the
    call that fits, not as an attribute missing further in."""
    return TypeError(f"{called}() got a SQLAlchemy {type(given).__name__}: use {instead}(...)")


def _not_sqlalchemy(given: object, called: str, wanted: str) -> TypeError:
    kind = type(given)
    return TypeError(f"{called}() takes {wanted}, not {kind.__module__}.{kind.__qualname__}")


def _psycopg(raw: Any, kind: type[_C], driver: str) -> _C:
    if not isinstance(raw, kind):
        raise TypeError(
            f"pgenough runs on psycopg 3 connections; this one is {type(raw).__module__}."
            f"{type(raw).__name__} ({driver}): use SQLAlchemy's postgresql+psycopg:// URL,"
            " or install psycopg for Django's PostgreSQL backend"
        )
    return raw
