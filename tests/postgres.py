"""Throwaway PostgreSQL databases for the tests, on the server REPLAYSCOPE_TEST_PG_URL names.

Without that variable the PostgreSQL cases are skipped, unless CI is set: then they fail.
"""

import contextlib
import os
import uuid

import pytest
import sqlalchemy as sa

PG_URL = os.environ.get("REPLAYSCOPE_TEST_PG_URL")


@contextlib.contextmanager
def temporary_database(purpose: str):
    """Yield the URL of a new, empty database; drop it afterwards."""
    if not PG_URL:
        if os.environ.get("CI"):
            pytest.fail(f"REPLAYSCOPE_TEST_PG_URL is not set; CI must run the PostgreSQL {purpose}")
        pytest.skip("REPLAYSCOPE_TEST_PG_URL not set")
    base = sa.make_url(PG_URL)
    name = f"replayscope_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
