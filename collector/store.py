"""The collector store: one SQLAlchemy engine, tuned for SQLite, behind a schema check.

``Store.open(url)`` is the one way commands and the server open a store: it builds the
engine, reaches the database and applies one rule to its schema. A new embedded store (a
SQLite file that does not exist yet or holds no tables, or in-memory SQLite) is created at
head. A store that is behind is migrated only when asked (``upgrade=True``: ``replayscope
db upgrade``, or a command's ``--migrate``); otherwise ``SchemaBehind`` names the command
that fixes it. PostgreSQL is never migrated without asking, even when empty. Every error
is one line with the password masked. ``Store(url)`` only builds the engine (no I/O).

SQLite gets WAL, ``synchronous=NORMAL`` and a busy timeout on every connection, and
write transactions start with ``BEGIN IMMEDIATE`` behind a process-wide lock, so writers
queue instead of failing half way on a lock upgrade. The server waits at most
``SERVER_BUSY_TIMEOUT_MS`` for another process's lock, then answers 503 (its clients retry:
the runner's sink keeps the events in its spool); a command waits the default 5 s.

``write_failure`` is the last write the database refused (when, why), cleared by the next
write that commits: ``/healthz`` reports it.
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from replayscope.collector.settings import DEFAULT_DB as DEFAULT_URL
from replayscope.contract.errors import ReplayscopeError, Unavailable

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
# How long the server's writes wait for a lock another process holds on a SQLite store, before
# the request is answered 503 with Retry-After (a lock is then answered in about a second, not
# after the default 5 s, twice when a batch takes the lock twice).
SERVER_BUSY_TIMEOUT_MS = 750
# PostgreSQL's serialization failure and deadlock: two writers met, one is retried at once
# (replayscope.collector.ingest); the store is not failing writes.
_RETRIED_CONFLICTS = ("40001", "40P01")


class SchemaBehind(ReplayscopeError):
    """The store's schema is older than this replayscope; the message names the fix."""

    def __init__(self, message: str, current: str | None = None):
        super().__init__(message)
        self.current = current


class SchemaAhead(ReplayscopeError):
    """The store was migrated by a newer replayscope than this one."""


class StoreUnavailable(Unavailable):
    """The database cannot take a write right now (locked, disk full, unreachable)."""


def _alembic_config(url: str):
    from alembic.config import Config

    config = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config(DEFAULT_URL)).get_current_head()


class Store:
    """A database holding replayscope runs; ``url`` is any SQLAlchemy URL."""

    def __init__(self, url: str = DEFAULT_URL, *, busy_timeout_ms: int = 5000, echo: bool = False):
        self.url = url
        self.busy_timeout_ms = busy_timeout_ms
        url_obj = sa.make_url(url)
        self.dialect = url_obj.get_backend_name()
        self.is_sqlite = self.dialect == "sqlite"
        kwargs: dict = {"echo": echo, "future": True}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": busy_timeout_ms / 1000}
            if url_obj.database in (None, "", ":memory:"):
                kwargs["poolclass"] = sa.pool.StaticPool
        else:
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = sa.create_engine(url, **kwargs)
        self._write_lock = threading.Lock() if self.is_sqlite else None
        if self.is_sqlite:
            self._tune_sqlite(self.engine, busy_timeout_ms)
        self._writer = self.engine.execution_options(replayscope_write=True)
        self.found_revision: str | None = None     # the schema revision Store.open found
        self.write_failure: tuple[float, str] | None = None   # (when, why) the last write was refused

    @staticmethod
    def _tune_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection, _record):
            # Let SQLAlchemy's "begin" event issue BEGIN, so writes can be IMMEDIATE.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.execute("PRAGMA temp_store=MEMORY")
            cursor.execute("PRAGMA cache_size=-65536")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn):
            write = conn.get_execution_options().get("replayscope_write")
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    # -- construction ---------------------------------------------------------------
    @classmethod
    def connect(cls, url: str = DEFAULT_URL, *, create: bool = True, **kwargs) -> "Store":
        """A store whose database answers, its schema not yet checked (``db current`` reads it).
        ``create=False`` (a command that only reads, or changes what is there): a SQLite file
        that does not exist is an error, not a new empty file."""
        if not create:
            _refuse_missing_file(url)
        try:
            store = cls(url, **kwargs)
        except ReplayscopeError:
            raise
        except Exception as error:
            raise _unusable(url, error) from None
        try:
            store.found_revision = store.current_revision()
        except Exception as error:
            store.dispose()
            raise _unusable(url, error) from None
        return store

    @classmethod
    def open(cls, url: str = DEFAULT_URL, upgrade: bool = False, *, create: bool = True, **kwargs) -> "Store":
        """A store at head: a new embedded one is created (unless ``create=False``: then a
        missing or empty one is an error and nothing is written); one behind is migrated only
        when ``upgrade``, else refused naming the fix. ``found_revision`` is what it held before."""
        store = cls.connect(url, create=create, **kwargs)
        try:
            current = store.found_revision
            if current != head_revision():
                new_embedded = store._is_new_embedded(current)
                if new_embedded and not create:
                    raise ReplayscopeError(f"the store at {store.safe_url} is empty: no runs in it "
                                           f"(nothing was created)")
                store.check_schema(current, refuse_behind=not (upgrade or new_embedded))
                store.upgrade()
        except ReplayscopeError:
            store.dispose()
            raise
        except Exception as error:
            store.dispose()
            raise _unusable(url, error) from None
        return store

    def _is_new_embedded(self, current: str | None) -> bool:
        if not self.is_sqlite or current is not None:
            return False
        with self.engine.connect() as conn:
            return not sa.inspect(conn).get_table_names()

    def dispose(self) -> None:
        self.engine.dispose()

    # -- schema -------------------------------------------------------------------------
    def current_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def check_schema(self, current: str | None, *, refuse_behind: bool = True) -> None:
        """Raise ``SchemaAhead`` when revision ``current`` is newer than this replayscope and,
        when ``refuse_behind``, ``SchemaBehind`` when it is older (None: an empty store)."""
        head = head_revision()
        if current == head:
            return
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(_alembic_config(self.url))
        if current is not None and not _known(script, current):
            raise SchemaAhead(f"the store at {self.safe_url} has schema revision {current}, "
                              f"newer than this replayscope (head {head}); upgrade replayscope")
        if not refuse_behind:
            return
        state = "empty" if current is None else f"at revision {current}"
        raise SchemaBehind(f"the store at {self.safe_url} is {state}, behind this replayscope "
                           f"(head {head}); run: replayscope db upgrade --db {self.safe_url} "
                           f"(or add --migrate)", current=current)

    def upgrade(self, revision: str = "head") -> None:
        from alembic import command

        config = _alembic_config(self.url)
        with self._write_lock or _nullcontext():
            with self.engine.begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, revision)

    @property
    def safe_url(self) -> str:
        return safe_url(self.url)

    # -- connections ----------------------------------------------------------------------
    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction (all-or-nothing); SQLite writers are serialised."""
        lock = self._write_lock
        if lock is not None:
            lock.acquire()
        try:
            with self._writer.begin() as conn:
                yield conn
        except sa.exc.OperationalError as error:        # locked, disk full, unreachable: not the caller's bug
            if getattr(error.orig, "sqlstate", None) not in _RETRIED_CONFLICTS:
                reason = str(error.orig or error).strip().splitlines()
                self.write_failure = (time.time(), reason[0] if reason else type(error).__name__)
            raise
        else:
            self.write_failure = None
        finally:
            if lock is not None:
                lock.release()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    def insert_sql(self, table: sa.Table, columns: tuple[str, ...]) -> str:
        """Plain INSERT text for ``exec_driver_sql`` executemany with positional tuples."""
        prep = self.engine.dialect.identifier_preparer
        style = self.engine.dialect.paramstyle
        mark = "?" if style in ("qmark", "numeric") else "%s"
        cols = ", ".join(prep.quote(c) for c in columns)
        marks = ", ".join([mark] * len(columns))
        return f"INSERT INTO {prep.format_table(table)} ({cols}) VALUES ({marks})"


def _refuse_missing_file(url: str) -> None:
    """A SQLite URL naming a file that does not exist: one line, and no file made."""
    try:
        parsed = sa.make_url(url)
    except Exception:
        return                                   # Store() says why the URL is unusable
    database = parsed.database or ""
    if (parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:")
            and not database.startswith("file:") and not Path(database).exists()):
        raise ReplayscopeError(f"no store at {safe_url(url)}: {database} does not exist (nothing was created; "
                               f"check --db or $REPLAYSCOPE_DB)")


def safe_url(url: str) -> str:
    """``url`` with its password as ``***`` (also when SQLAlchemy cannot parse it)."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)


def _unusable(url: str, error: Exception) -> ReplayscopeError:
    """One line saying why the store at ``url`` cannot be opened, its password masked."""
    from sqlalchemy import exc

    shown = safe_url(url)
    kind: type[ReplayscopeError] = ReplayscopeError
    if isinstance(error, ModuleNotFoundError):
        text = f"{shown}: its database driver ({error.name}) is not installed: {_driver_hint(shown, error.name)}"
    elif isinstance(error, (exc.ArgumentError, exc.NoSuchModuleError)):
        text = f"{shown!r} is not a usable database URL ({error})"
    else:
        reason = getattr(error, "orig", None) or error
        text = f"cannot open {shown}: {' '.join(str(reason).split()) or type(reason).__name__}"
        kind = StoreUnavailable
    return kind(_masked(text, url, shown))


# The pip package that provides a SQLAlchemy driver module, where it is not the module's name.
_DRIVER_PACKAGES = {"psycopg": "'replayscope[postgres]'", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient",
                    "pymysql": "PyMySQL", "cx_Oracle": "cx-Oracle"}


def _driver_hint(shown: str, module: str | None) -> str:
    package = _DRIVER_PACKAGES.get(module or "", module)
    if shown.startswith("postgres"):
        return f"pip install {_DRIVER_PACKAGES['psycopg'] if module == 'psycopg' else package}"
    return f"pip install {package} (replayscope is tested on SQLite and PostgreSQL only)"


def _masked(text: str, url: str, shown: str) -> str:
    """``text`` without the password of ``url``, wherever the URL (or its user:password@) appears
    in it; nothing else of the text is touched."""
    text = text.replace(url, shown)
    password = _password(url)
    if password:
        for written in {password, quote(password, safe="")}:
            text = text.replace(f":{written}@", ":***@")
    return text


def _password(url: str) -> str | None:
    try:
        return sa.make_url(url).password
    except Exception:
        match = re.search(r"//[^/@:]*:([^/@]*)@", url)
        return match.group(1) if match else None


def _known(script, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except Exception:
        return False


@contextmanager
def _nullcontext():
    yield
