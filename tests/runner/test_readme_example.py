"""The README's "Instrument your own model" example runs as written, into a live collector,
and its run shows up on the dashboard's run page."""

import re
import urllib.request
from pathlib import Path

import pytest

from tests.live_server import serving

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    section = README.read_text().split("## Instrument your own model", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture()
def live_server(tmp_path):
    from replayscope.app.server import create_server
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'rs.db'}", upgrade=True)
    with serving(create_server(store, Settings(run_services=False))) as url:
        yield store, url
    store.dispose()


def test_the_readme_example_is_twenty_lines():
    assert len(readme_example().strip().splitlines()) <= 20


def test_the_readme_example_streams_into_a_collector_and_shows_on_the_run_page(live_server):
    from replayscope.app.pages import run as run_page
    from replayscope.collector.models import queries

    store, url = live_server
    code = readme_example().replace("http://127.0.0.1:8300", url)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    run_id = namespace["emitter"].run_id

    summary = queries.run_summary(store, run_id)
    assert summary["source"] == "library" and summary["status"] == "finished"
    assert summary["device"] != "unknown"                   # the example names its device
    assert summary["steps"] == 5
    assert summary["modes"] == {"graph": 2, "padded": 1, "eager": 2, "unknown": 0}
    assert summary["reasons"] == {"batch_too_large": 1, "custom:adapter 7 not loaded": 1}
    assert sorted(c["graph_bs"] for c in queries.captures(store, run_id)) == [1, 2, 4, 8]

    page = run_page.page_data(store, run_id)
    assert page["summary"]["steps"] == 5
    with urllib.request.urlopen(f"{url}/run/{run_id}", timeout=30) as response:
        assert response.status == 200 and b"react-entry-point" in response.read()
