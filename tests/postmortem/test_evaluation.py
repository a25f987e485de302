"""The evaluation set: every labelled startup case gives its expected first finding, and
docs/dashboard.md shows the table as it is."""

from __future__ import annotations

import pytest

from tests.postmortem.cases import CASES, ROOT, first_finding, table


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from replayscope.collector.store import Store

    s = Store.open(f"sqlite:///{tmp_path_factory.mktemp('eval') / 'eval.db'}", upgrade=True)
    yield s
    s.dispose()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_gives_its_expected_first_finding(case, store):
    if not case.path.exists():
        assert case.kind == "runner-gpu", f"{case.path} is missing"
        pytest.skip("run tests/postmortem/make_cases.sh cuda on a GPU and put the files in cases/gpu")
    assert first_finding(case, store) == case.expected


def test_the_set_has_at_least_30_cases_of_every_kind():
    kinds = {c.kind for c in CASES}
    assert len(CASES) >= 30
    assert kinds == {"runner-gpu", "runner-cpu", "runner-h200", "vllm-log", "sglang-log"}
    present = [c for c in CASES if c.path.exists()]
    assert len(present) >= 30
    failure_classes = {c.expected.split("/")[1] for c in CASES if c.expected.startswith("failure/")}
    assert failure_classes >= {"oom", "capture_invalidated", "collective", "kernel_assert", "compile_error",
                               "timeout"}


def test_the_docs_show_the_evaluation_table_as_it_is():
    docs = (ROOT / "docs" / "dashboard.md").read_text()
    assert table() in docs, "regenerate with: python -m tests.postmortem.cases"
