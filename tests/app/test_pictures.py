"""The picture test: every page, for each kind of run a user has, in Chromium at 1280 and
1920 px, checked from the DOM for what a reader would see wrong.

The runs are made the way a user makes them: a runner run (``replayscope run --backend static
--preset tiny --workload mixed --events FILE``), a traced run (``replayscope trace`` of a small
CPU decode loop, tests/app/programs/traced_decode.py), the traced runs of a real ``vllm serve``
and a real ``sglang.launch_server`` on an H200 (tests/engines/fixtures), an imported vLLM 0.13
log with ``--cudagraph-metrics`` tables and an imported SGLang 0.4.6 log (each with its startup
phases and captures), all sent to a collector with ``replayscope import``; an eager-ratio rule and a
regression rule are created through the API first, and the alert rules evaluated once. Pages:
Runs, Fleet, Alerts, an unknown path, and Run, Startup and Advisor of each run.

The checks (one function each; a failure names the page, the width, the element and its text):

- ``cells_and_headers_fit``: no AG Grid cell or header shows less than its text (its
  scrollWidth beyond its clientWidth, or an ellipsis "…" in what it shows).
- ``chart_text_fits``: every Plotly tick label, axis title, legend entry and annotation lies
  inside its figure; no legend covers an axis title or tick label; no two annotations overlap.
- ``tables_fit_the_width``: no grid scrolls sideways (its centre viewport's content wider than
  the viewport) and the page itself does not.
- ``empty_charts_say_why``: a figure that draws no data point carries visible text saying why
  (an annotation); so does a figure with a series (a legend entry, an axis) that draws nothing.
- ``empty_tables_say_why``: no grid shows AG Grid's bare "No Rows To Show".
- ``bars_are_visible``: every bar a chart draws is at least 2 px thick.
- ``numbers_have_three_figures``: the rule below.
- ``shares_read_as_percent``: a table column or stat tile about a share (threshold, resolves
  at, share, ratio) shows it as a percentage, as every other page does.
- ``page_has_navigation``: the page, an unknown path's included, shows the navigation.

The three-figure rule. A number *rounded for reading* is a decimal written with a fractional
part ("0.00123 s", "12.346 ms", "40.0 %", "1.5e-05") in a stat tile (value and note), a table
cell, or a chart's tick label. It may have at most 3 significant digits: the digits from the
first non-zero one on, trailing zeros after the point included ("0.00123" 3, "40.0" 3,
"12.346" 5, "1,234.5" 5; an exponent's digits do not count). Exempt: whole numbers (counts,
batch sizes, byte counts, "1,234"), identifiers and versions (a token that is not a number as
a whole: "v0.13.0", "Llama-3.1-8B", "70a1b3d52ceb-31840"), dates and clock times
("2026-12-02 16:49"). One more thing reads as rounding gone wrong: a time axis tick with a
fraction of a second ("17:57:00.0005"): the dashboard's time series are per second or
coarser, so such a tick reads a precision its data does not have.

Checks that fail on today's pages are marked ``xfail(strict=True)`` from ``KNOWN`` below:
remove an entry when its page is fixed (a fixed one still listed fails, "XPASS(strict)").
With REPLAYSCOPE_SCREENSHOTS=1 the pages' screenshots are written to docs/screenshots/pictures/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.browser import driver, require_chromium  # noqa: F401 (the shared fixture)
from tests.live_server import serving

pytest.importorskip("torch", reason="the runner and traced runs are made with `replayscope run` and `trace`")

pytestmark = pytest.mark.browser

require_chromium()

from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "importers" / "fixtures"
PROGRAM = Path(__file__).resolve().parent / "programs" / "traced_decode.py"
PICTURES = REPO / "docs" / "screenshots" / "pictures"
VLLM_LOG = FIXTURES / "vllm_v013_cudagraph_metrics_serving.log"
VLLM_LOG_DATE = 1796256000.0            # 2026-12-03 00:00 UTC, the day after its stamps
SGLANG_LOG = FIXTURES / "sglang_v046_decode_sample_serving.log"
WIDTHS = (1280, 1920)
MAX_HEIGHT = 8000
KINDS = ("runner", "traced", "traced-vllm", "traced-sglang", "vllm", "sglang")
# a real vllm serve traced on an H200 (tests/engines/fixtures): its dispatcher's reasons and notes
TRACED_VLLM = REPO / "tests" / "engines" / "fixtures" / "vllm-0.25.0-serve-traced.jsonl"
# a real sglang.launch_server traced on an H200: decode graphs by requests, prefill graphs by tokens
TRACED_SGLANG = REPO / "tests" / "engines" / "fixtures" / "sglang-0.5.17-serve-traced.jsonl"
RUN_PAGES = ("run", "startup", "advisor")
# (kind, page): kind None for the pages that are not one run's
PAGES = ([(None, "runs"), (None, "fleet"), (None, "alerts"), (None, "unknown")]
         + [(kind, page) for kind in KINDS for page in RUN_PAGES])
ENV = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
RULES = (
    {"name": "decode eager above 0.3", "threshold": 0.3, "window_s": 10, "min_steps": 20, "for_s": 0,
     "keep_firing_for_s": 5},
    {"name": "graph step regression", "kind": "regression", "threshold": 0.2, "window_s": 86400, "min_steps": 1},
)


# -- the runs, made as a user makes them ------------------------------------------------------

def _commands(tmp: Path) -> list[list[str]]:
    return [
        [sys.executable, "-m", "replayscope", "run", "--backend", "static", "--preset", "tiny", "--workload", "mixed",
         "--steps", "200", "--events", str(tmp / "runner.jsonl"), "--quiet", "--name", "static tiny mixed"],
        [sys.executable, "-m", "replayscope", "trace", "--events", str(tmp / "traced.jsonl"), "--name",
         "traced cpu decode", "--step", "__main__:decode_step", "--", "python3", PROGRAM.name],
    ]


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The four runs in a collector (SQLite) served with the dashboard: {"url", kind: run id}."""
    from replayscope.app.cli import main
    from replayscope.app.server import create_server
    from replayscope.collector.alerting import alerts
    from replayscope.collector.models import queries
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    tmp = tmp_path_factory.mktemp("pictures")
    made = [subprocess.Popen(argv, cwd=PROGRAM.parent, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for argv in _commands(tmp)]
    for process in made:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    # vLLM's stamps print no year: the importer takes it from the file's date, here a fixed one
    vllm_log = tmp / VLLM_LOG.name
    vllm_log.write_bytes(VLLM_LOG.read_bytes())
    os.utime(vllm_log, (VLLM_LOG_DATE, VLLM_LOG_DATE))
    store = Store.open(f"sqlite:///{tmp / 'rs.db'}", upgrade=True)
    with serving(create_server(store, Settings(run_services=False))) as url:
        for rule in RULES:
            _post(url + "/v1/alert-rules", rule)
        assert main(["import", "events", str(tmp / "runner.jsonl"), str(tmp / "traced.jsonl"), str(TRACED_VLLM),
                     str(TRACED_SGLANG), "--collector", url]) == 0
        assert main(["import", "vllm", str(vllm_log), "--collector", url]) == 0
        assert main(["import", "sglang", str(SGLANG_LOG), "--collector", url]) == 0
        alerts.evaluate_alerts(store)          # what the collector's alert service does each tick
        ids = {_kind_of(r): r["run_id"] for r in queries.list_runs(store)}
        yield {"url": url, "runner": ids["runner"], "traced": ids["trace"], "traced-vllm": ids["trace-vllm"],
               "traced-sglang": ids["trace-sglang"], "vllm": ids["vllm-log"], "sglang": ids["sglang-log"]}
    store.dispose()


def _kind_of(run: dict) -> str:
    """A run's source, and for a traced engine which one (its command names it)."""
    if run["source"] == "trace":
        for engine in ("vllm", "sglang"):
            if engine in run["name"]:
                return f"trace-{engine}"
    return run["source"]


def path_of(site: dict, kind: str | None, page: str) -> str:
    if kind is not None:
        return f"/{page}/{site[kind]}"
    return {"runs": "/", "fleet": "/fleet?period=all", "alerts": "/alerts", "unknown": "/no/such/page"}[page]


def label(kind: str | None, page: str) -> str:
    return page if kind is None else f"{kind}-{page}"


# -- loading a page and reading what it shows --------------------------------------------------

# Dash shows ._dash-loading-callback while any callback is in flight.
SETTLED = """
const content = document.getElementById('_pages_content');
return !!(content && content.children.length && !document.querySelector('._dash-loading-callback')
          && Array.from(document.querySelectorAll('.js-plotly-plot')).every(g => g._fullLayout)
          && !Array.from(document.querySelectorAll('.stat-value')).some(v => v.textContent.trim() === '…'));
"""


def settle(driver, quiet_polls: int = 4, timeout: float = 30) -> None:
    """Until the page's callbacks are done and have stayed done for a few polls."""
    quiet = [0]

    def done(d):
        quiet[0] = quiet[0] + 1 if d.execute_script(SETTLED) else 0
        return quiet[0] >= quiet_polls
    WebDriverWait(driver, timeout, poll_frequency=0.15).until(done)


FACTS = r"""
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const shown = e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
  return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
const text = e => (e.textContent || '').replace(/\s+/g, ' ').trim();
const owner = e => { const o = e.parentElement && e.parentElement.closest('[id]'); return o ? o.id : '?'; };
const out = {clientWidth: document.documentElement.clientWidth, scrollWidth: document.documentElement.scrollWidth,
  nav: Array.from(document.querySelectorAll('.nav a, nav a')).filter(shown).map(text),
  headings: Array.from(document.querySelectorAll('h1, h2')).map(text), grids: [], charts: [], stats: []};
document.querySelectorAll('.ag-root-wrapper').forEach(g => {
  const viewport = g.querySelector('.ag-center-cols-viewport'), content = g.querySelector('.ag-center-cols-container');
  const overlay = Array.from(g.querySelectorAll('.ag-overlay-no-rows-center, .ag-overlay-loading-center')).filter(shown);
  const grid = {id: owner(g), viewport: viewport ? viewport.clientWidth : 0, content: content ? content.scrollWidth : 0,
                overlay: overlay.map(text).join(' '), headers: [], cells: []};
  g.querySelectorAll('.ag-header-row-column .ag-header-cell').forEach(h => {
    const t = h.querySelector('.ag-header-cell-text');
    if (t) grid.headers.push({col: h.getAttribute('col-id'), text: text(t), sw: t.scrollWidth, cw: t.clientWidth});
  });
  g.querySelectorAll('.ag-center-cols-container .ag-row, .ag-pinned-left-cols-container .ag-row').forEach(row => {
    row.querySelectorAll('.ag-cell').forEach(c => {
      let sw = c.scrollWidth, cw = c.clientWidth;
      c.querySelectorAll('.ag-cell-value, .ag-cell-wrapper, a').forEach(inner => {
        if (inner.clientWidth > 0 && inner.scrollWidth > inner.clientWidth + 1) { sw = inner.scrollWidth; cw = inner.clientWidth; }
      });
      grid.cells.push({col: c.getAttribute('col-id'), row: row.getAttribute('row-id'), text: text(c), sw, cw});
    });
  });
  out.grids.push(grid);
});
const TEXTS = [['x tick', '.xtick > text'], ['y tick', '.ytick > text'], ['y2 tick', '.y2tick > text'],
  ['x title', '.g-xtitle > text'], ['y title', '.g-ytitle > text'], ['y2 title', '.g-y2title > text'],
  ['legend', '.legend .legendtext'], ['annotation', '.annotation'], ['title', '.gtitle']];
document.querySelectorAll('.js-plotly-plot').forEach(gd => {
  const chart = {id: owner(gd), box: box(gd), texts: [], traces: [], bars: [], legend: null};
  for (const [kind, selector] of TEXTS) {
    gd.querySelectorAll(selector).forEach(t => {
      if (!shown(t) || !text(t)) return;
      chart.texts.push({kind, text: text(t), box: box(t)});
    });
  }
  const legend = gd.querySelector('.legend .bg');
  if (legend && shown(legend)) chart.legend = box(legend);
  (gd._fullData || []).forEach((t, i) => {
    if (t.visible !== true) return;
    const values = Array.from((t.orientation === 'h' ? t.x : t.y) || []);
    const points = values.filter(v => v !== null && v !== undefined && v !== '' && !(typeof v === 'number' && !isFinite(v))).length;
    chart.traces.push({name: t.name, type: t.type, points, axis: t.yaxis || 'y', legend: t.showlegend !== false});
  });
  gd.querySelectorAll('.trace.bars').forEach(trace => {
    const horizontal = !!trace.closest('.barlayer') && false;
    trace.querySelectorAll('.point path').forEach(p => {
      const r = p.getBoundingClientRect(); if (!(r.width || r.height)) return;
      chart.bars.push([r.width, r.height]);
    });
  });
  chart.horizontal = (gd._fullData || []).some(t => t.type === 'bar' && t.orientation === 'h');
  out.charts.push(chart);
});
document.querySelectorAll('.stat').forEach(s => {
  const part = c => { const e = s.querySelector(c); return e ? text(e) : ''; };
  out.stats.push({label: part('.stat-label'), value: part('.stat-value'), note: part('.stat-note')});
});
return out;
"""


@dataclass
class Picture:
    kind: str | None
    page: str
    width: int
    facts: dict

    @property
    def where(self) -> str:
        return f"{label(self.kind, self.page)} at {self.width} px"


def take(driver, site: dict, kind: str | None, page: str, width: int) -> Picture:
    """Load the page at this width, let it settle, open the window to the page's full height
    (so every row and chart is laid out and in view), read its facts, screenshot it."""
    driver.set_window_size(width, 1000)
    driver.get(site["url"] + path_of(site, kind, page))
    settle(driver)
    first = driver.execute_script(FACTS)  # with the window's own scrollbar: the width a reader has
    for _ in range(4):                    # a taller window can lay the page out taller
        height = driver.execute_script("return document.documentElement.scrollHeight")
        if height <= driver.execute_script("return window.innerHeight") or height >= MAX_HEIGHT:
            break
        driver.set_window_size(width, min(height + 40, MAX_HEIGHT))
        time.sleep(0.5)                   # plotly and the grids follow the window
        settle(driver, quiet_polls=2)
    facts = driver.execute_script(FACTS)
    facts["at_1000_px_high"] = {k: first[k] for k in ("grids", "scrollWidth", "clientWidth")}
    if os.environ.get("REPLAYSCOPE_SCREENSHOTS") == "1":
        PICTURES.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(PICTURES / f"{label(kind, page)}-{width}.png"))
    return Picture(kind, page, width, facts)


@pytest.fixture(scope="module")
def pictures(site, driver):
    """Each page read once per width, on first use."""
    taken: dict[tuple, Picture] = {}

    def get(kind, page, width):
        if (kind, page, width) not in taken:
            taken[(kind, page, width)] = take(driver, site, kind, page, width)
        return taken[(kind, page, width)]
    return get


# -- the checks: each returns its problems as "element: text" ----------------------------------

def _inside(inner, outer, slack: float = 1.0) -> bool:
    return (inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack
            and inner[2] <= outer[2] + slack and inner[3] <= outer[3] + slack)


def _overlap(a, b, slack: float = 1.0) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack


def cells_and_headers_fit(facts: dict) -> list[str]:
    problems = []
    for grid in facts["grids"]:
        for h in grid["headers"]:
            if h["sw"] > h["cw"] + 1 or "…" in h["text"]:
                problems.append(f"#{grid['id']} header {h['col']}: {h['text']!r} ({h['sw']} px in {h['cw']})")
        for cell in grid["cells"]:
            if cell["sw"] > cell["cw"] + 1 or "…" in cell["text"]:
                problems.append(f"#{grid['id']} row {cell['row']} cell {cell['col']}: {cell['text']!r} "
                                f"({cell['sw']} px in {cell['cw']})")
    return problems


def chart_text_fits(facts: dict) -> list[str]:
    problems = []
    for chart in facts["charts"]:
        for t in chart["texts"]:
            if not _inside(t["box"], chart["box"]):
                problems.append(f"#{chart['id']} {t['kind']} {t['text']!r} is cut by the figure's edge")
        if chart["legend"]:
            for t in chart["texts"]:
                if t["kind"] != "legend" and t["kind"] != "annotation" and _overlap(chart["legend"], t["box"]):
                    problems.append(f"#{chart['id']} the legend covers the {t['kind']} {t['text']!r}")
        notes = [t for t in chart["texts"] if t["kind"] == "annotation"]
        for i, a in enumerate(notes):
            for b in notes[i + 1:]:
                if _overlap(a["box"], b["box"]):
                    problems.append(f"#{chart['id']} annotations {a['text']!r} and {b['text']!r} overlap")
    return problems


def tables_fit_the_width(facts: dict) -> list[str]:
    """Checked at the full height and, where read, at 1000 px high (the window's scrollbar
    takes its width from the page)."""
    problems = []
    for seen, when in ((facts, ""), (facts.get("at_1000_px_high"), " (1000 px high)")):
        if seen is None:
            continue
        problems += [f"#{g['id']} scrolls sideways{when}: {g['content']} px of columns in {g['viewport']} px"
                     for g in seen["grids"] if g["content"] > g["viewport"] + 1]
        if seen["scrollWidth"] > seen["clientWidth"] + 1:
            problems.append(f"the page scrolls sideways{when}: {seen['scrollWidth']} px in {seen['clientWidth']}")
    return problems


def _sentence(chart: dict) -> bool:
    return any(t["kind"] == "annotation" and len(t["text"].split()) >= 2 for t in chart["texts"])


def empty_charts_say_why(facts: dict) -> list[str]:
    problems = []
    for chart in facts["charts"]:
        drawn = [t for t in chart["traces"] if t["points"]]
        if not drawn and not _sentence(chart):
            problems.append(f"#{chart['id']} draws nothing and says nothing")
        elif drawn and not _sentence(chart):
            for t in chart["traces"]:
                if not t["points"]:
                    problems.append(f"#{chart['id']} series {t['name']!r} (axis {t['axis']}) draws nothing "
                                    "and the chart does not say why")
    return problems


def empty_tables_say_why(facts: dict) -> list[str]:
    return [f"#{g['id']}: {g['overlay']!r}" for g in facts["grids"] if "No Rows" in g["overlay"]]


def bars_are_visible(facts: dict) -> list[str]:
    problems = []
    for chart in facts["charts"]:
        thin = [b for b in chart["bars"] if (b[1] if chart["horizontal"] else b[0]) < 2]
        if thin:
            sizes = sorted({round(b[1] if chart["horizontal"] else b[0], 1) for b in thin})
            problems.append(f"#{chart['id']} {len(thin)} of {len(chart['bars'])} bars are under 2 px thick "
                            f"({', '.join(map(str, sizes[:4]))} px)")
    return problems


NUMBER = re.compile(r"^[−+-]?(\d[\d,]*)?\.(\d+)(e[−+-]?\d+)?%?$")
CLOCK_FRACTION = re.compile(r"\b\d{1,2}:\d{2}:\d{2}\.\d+")


def significant_digits(token: str) -> int | None:
    """The significant digits of a decimal written for reading; None for anything else."""
    match = NUMBER.match(token)
    if not match:
        return None
    digits = ((match.group(1) or "") + match.group(2)).replace(",", "").lstrip("0")
    return len(digits)


def over_precise(text: str) -> list[str]:
    """The tokens of ``text`` that break the three-figure rule (the module's docstring)."""
    found = CLOCK_FRACTION.findall(text)
    for raw in text.split():
        token = raw.strip("()[]{},;:·")
        digits = significant_digits(token)
        if digits is not None and digits > 3:
            found.append(token)
    return found


def _read_figures(facts: dict):
    """(element, text) of every figure shown for reading: stat tiles, table cells, tick labels."""
    for s in facts["stats"]:
        yield f"stat {s['label']!r}", f"{s['value']} {s['note']}"
    for g in facts["grids"]:
        for cell in g["cells"]:
            yield f"#{g['id']} row {cell['row']} cell {cell['col']}", cell["text"]
    for chart in facts["charts"]:
        for t in chart["texts"]:
            if t["kind"].endswith("tick"):
                yield f"#{chart['id']} {t['kind']}", t["text"]


def numbers_have_three_figures(facts: dict) -> list[str]:
    return [f"{where}: {text!r} ({', '.join(bad)})" for where, text in _read_figures(facts)
            if (bad := over_precise(text))]


SHARE = re.compile(r"threshold|resolves|share|ratio", re.I)


def shares_read_as_percent(facts: dict) -> list[str]:
    problems = []
    for g in facts["grids"]:
        share_cols = {h["col"]: h["text"] for h in g["headers"] if SHARE.search(h["text"])}
        for cell in g["cells"]:
            if cell["col"] in share_cols and re.fullmatch(r"[−-]?\d*\.?\d+", cell["text"]):
                problems.append(f"#{g['id']} row {cell['row']} {share_cols[cell['col']]!r}: {cell['text']!r}")
    for s in facts["stats"]:
        if SHARE.search(s["label"]) and re.fullmatch(r"[−-]?\d*\.?\d+", s["value"]):
            problems.append(f"stat {s['label']!r}: {s['value']!r}")
    return problems


def page_has_navigation(facts: dict) -> list[str]:
    if {"Runs", "Fleet", "Alerts"} <= set(facts["nav"]):
        return []
    return [f"no navigation (links {facts['nav']}); headings {facts['headings']}"]


CHECKS = {check.__name__: check for check in (
    cells_and_headers_fit, chart_text_fits, tables_fit_the_width, empty_charts_say_why, empty_tables_say_why,
    bars_are_visible, numbers_have_three_figures, shares_read_as_percent, page_has_navigation)}


# -- what fails on today's pages (issue 26): remove an entry when its page is fixed --------------

@dataclass(frozen=True)
class Known:
    page: str                 # label(kind, page): "runs", "vllm-startup", ...
    check: str
    reason: str
    widths: tuple[int, ...] = WIDTHS


KNOWN: tuple[Known, ...] = ()


def _known(page: str, check: str, width: int) -> Known | None:
    return next((k for k in KNOWN if k.page == page and k.check == check and width in k.widths), None)


def _cases():
    for kind, page in PAGES:
        for width in WIDTHS:
            for check in CHECKS:
                known = _known(label(kind, page), check, width)
                marks = [pytest.mark.xfail(strict=True, reason=known.reason)] if known else []
                yield pytest.param(kind, page, width, check, marks=marks,
                                   id=f"{label(kind, page)}-{width}-{check}")


@pytest.mark.parametrize("kind,page,width,check", list(_cases()))
def test_picture(pictures, kind, page, width, check):
    picture = pictures(kind, page, width)
    problems = CHECKS[check](picture.facts)
    assert not problems, f"{picture.where}, {check}:\n  " + "\n  ".join(problems)


def test_every_known_failure_names_a_page_and_a_check():
    labels = {label(kind, page) for kind, page in PAGES}
    for known in KNOWN:
        assert known.page in labels and known.check in CHECKS and set(known.widths) <= set(WIDTHS), known


@pytest.mark.parametrize("text,expected", [
    ("0.00123 s", []), ("12.346 ms", ["12.346"]), ("40.0%", []), ("1,234.5", ["1,234.5"]), ("1,234", []),
    ("v0.13.0", []), ("Llama-3.1-8B", []), ("2026-12-02 16:49", []), ("17:57:00.0005", ["17:57:00.0005"]),
    ("1.5e-05", []), ("(0.1235)", ["0.1235"]), ("−0.25 s", [])])
def test_the_three_figure_rule(text, expected):
    assert over_precise(text) == expected


# -- the checks cannot pass by finding nothing ------------------------------------------------

# What each page must be seen to have, so an empty reading (a selector gone stale, a page that
# did not load) fails instead of passing every check: (grids with cells, charts with data, stats).
SEEN = {"runs": (1, 0, 0), "fleet": (2, 1, 0), "alerts": (2, 0, 0), "unknown": (0, 0, 0),
        "run": (0, 3, 6), "startup": (0, 0, 4), "advisor": (1, 0, 0)}


@pytest.mark.parametrize("kind,page", PAGES, ids=[label(k, p) for k, p in PAGES])
def test_the_checks_see_the_page(pictures, kind, page):
    facts = pictures(kind, page, WIDTHS[0]).facts
    grids, charts, stats = SEEN[page]
    assert sum(1 for g in facts["grids"] if g["cells"] and g["headers"]) >= grids, facts["grids"]
    assert sum(1 for ch in facts["charts"] if any(t["points"] for t in ch["traces"])) >= charts, facts["charts"]
    assert len([s for s in facts["stats"] if s["value"]]) >= stats, facts["stats"]
    assert facts["headings"], "no heading read"


INJECTED = r"""
const cell = document.querySelector('.ag-center-cols-container .ag-row .ag-cell');
cell.style.whiteSpace = 'nowrap'; cell.style.overflow = 'hidden';
cell.textContent = 'a cell far too long for its column '.repeat(20);
const div = document.createElement('div'); div.id = 'injected-empty-chart'; div.style.width = '400px';
div.style.height = '200px'; document.getElementById('_pages_content').appendChild(div);
Plotly.newPlot(div, [{type: 'bar', x: [], y: [], name: 'nothing'}], {});
"""


def test_the_checks_catch_a_cut_cell_and_an_empty_chart(site, driver):
    """On a real page: a cell made to cut its text and an empty chart added are both caught."""
    driver.set_window_size(1280, 1000)
    driver.get(site["url"] + "/fleet?period=all")         # a page with Plotly loaded and a grid
    settle(driver)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script(
        "return !!document.querySelector('.ag-center-cols-container .ag-row .ag-cell')"))
    driver.execute_script(INJECTED)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script(
        "const g = document.getElementById('injected-empty-chart'); return !!(g && g._fullLayout);"))
    facts = driver.execute_script(FACTS)
    assert any("far too long" in p for p in cells_and_headers_fit(facts))
    assert any("injected-empty-chart" in p or "#_pages_content" in p for p in empty_charts_say_why(facts))


def _facts(**parts) -> dict:
    return {"clientWidth": 1280, "scrollWidth": 1280, "nav": ["Runs", "Fleet", "Alerts"], "headings": ["x"],
            "grids": [], "charts": [], "stats": [], **parts}


def _chart(**parts) -> dict:
    return {"id": "c", "box": [0, 0, 400, 300], "texts": [], "traces": [], "bars": [], "legend": None,
            "horizontal": False, **parts}


def _grid(**parts) -> dict:
    return {"id": "g", "viewport": 800, "content": 800, "overlay": "", "headers": [], "cells": [], **parts}


def test_each_check_fails_on_what_it_is_for():
    cut = _grid(cells=[{"col": "name", "row": "1", "text": "long", "sw": 200, "cw": 80}])
    assert cells_and_headers_fit(_facts(grids=[cut]))
    assert cells_and_headers_fit(_facts(grids=[_grid(headers=[{"col": "a", "text": "padd…", "sw": 5, "cw": 5}])]))
    assert tables_fit_the_width(_facts(grids=[_grid(content=1200)]))
    assert tables_fit_the_width(_facts(scrollWidth=1500))
    assert tables_fit_the_width(_facts(at_1000_px_high={"grids": [_grid(content=1200)], "scrollWidth": 1280,
                                                        "clientWidth": 1280}))
    assert chart_text_fits(_facts(charts=[_chart(texts=[{"kind": "x tick", "text": "a", "box": [390, 0, 420, 10]}])]))
    assert chart_text_fits(_facts(charts=[_chart(legend=[0, 0, 100, 20],
                                                 texts=[{"kind": "x title", "text": "t", "box": [10, 5, 50, 15]}])]))
    assert empty_charts_say_why(_facts(charts=[_chart(traces=[{"name": "a", "points": 0, "axis": "y"}])]))
    half = _chart(traces=[{"name": "a", "points": 3, "axis": "y"}, {"name": "b", "points": 0, "axis": "y2"}])
    assert empty_charts_say_why(_facts(charts=[half]))
    said = _chart(texts=[{"kind": "annotation", "text": "not measured here", "box": [0, 0, 1, 1]}])
    assert not empty_charts_say_why(_facts(charts=[said]))
    assert empty_tables_say_why(_facts(grids=[_grid(overlay="No Rows To Show")]))
    assert bars_are_visible(_facts(charts=[_chart(bars=[[1.0, 50.0], [10.0, 50.0]])]))
    assert not bars_are_visible(_facts(charts=[_chart(bars=[[10.0, 50.0]])]))
    assert numbers_have_three_figures(_facts(stats=[{"label": "x", "value": "12.346 ms", "note": ""}]))
    share = _grid(headers=[{"col": "t", "text": "threshold", "sw": 1, "cw": 1}],
                  cells=[{"col": "t", "row": "1", "text": "0.4", "sw": 1, "cw": 1}])
    assert shares_read_as_percent(_facts(grids=[share]))
    assert page_has_navigation(_facts(nav=[]))
    assert not any(check(_facts()) for check in CHECKS.values())


def test_the_traced_sglang_pages_show_its_graph_and_padded_steps_and_prefill_tokens(pictures):
    """A real SGLang 0.5.17 server traced on an H200 (tests/engines/test_sglang_recorded_runs.py
    checks its counts against SGLang's own), as Chromium shows it: the run page counts its steps,
    none eager, draws its graph and padded ones and their padding; the startup page names each
    prefill capture in tokens and each decode one by its batch of requests."""
    from replayscope.contract.events_file import read_events_file

    events = read_events_file(TRACED_SGLANG).events
    steps = [e for e in events if e["kind"] == "step"]
    decode = [s for s in steps if s["stage"] == "decode"]
    captures = [e for e in events if e["kind"] == "capture"]
    run = pictures("traced-sglang", "run", WIDTHS[0]).facts
    stats = {s["label"]: s for s in run["stats"]}
    assert stats["steps"]["value"] == str(len(steps))
    prefill = len(steps) - len(decode)
    assert stats["eager"]["value"] == "0.0%" and f"{prefill} prefill apart (0 eager)" in stats["eager"]["note"]
    padded = sum(s["padded_tokens"] for s in decode)
    assert stats["padding"]["value"] == f"{100 * padded / (padded + sum(s['num_tokens'] for s in decode)):.1f}%"
    [mix] = [c for c in run["charts"] if c["id"] == "run-mode-mix"]
    assert {t["name"] for t in mix["traces"] if t["points"]} >= {"graph", "padded"}
    startup = pictures("traced-sglang", "startup", WIDTHS[0]).facts
    assert {s["label"]: s["value"] for s in startup["stats"]}["captures"] == str(len(captures))
    [sizes] = [c for c in startup["charts"] if c["id"] == "startup-captures-fig"]
    ticks = {t["text"] for t in sizes["texts"] if t["kind"] == "x tick"}
    assert {f"{c['graph_bs']} tokens (prefill)" for c in captures if c["stage"] == "prefill"} <= ticks
    assert {str(c["graph_bs"]) for c in captures if c["stage"] == "decode"} <= ticks
    assert "decode batch size, others as named" in {t["text"] for t in sizes["texts"]}
