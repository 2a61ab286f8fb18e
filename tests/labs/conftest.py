"""The labs' tests: each module walks one lab (its `LAB`) once and checks every claim of its text.

They run real servers for minutes, so they are left out unless asked for: `./lab test -m labs` (or any -m
expression that names `labs`) runs them; every other run deselects them.
"""

from __future__ import annotations

import pytest

from tests.labs.walk import Lab, walk, write_measured


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "labs" in (config.getoption("markexpr") or ""):
        return
    kept, left = [], []
    for item in items:
        (left if item.get_closest_marker("labs") else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "claim" in metafunc.fixturenames:
        lab: Lab = metafunc.module.LAB
        claims = lab.text().claims
        metafunc.parametrize("claim", claims, ids=[f"line {claim.line}: {claim.id}" for claim in claims])


@pytest.fixture(scope="module")
def walked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The module's lab, every sh block run in order in a scratch folder (once per module); what the checks
    measured is written to walk/measured.json when the module is done."""
    lab: Lab = request.module.LAB
    result = walk(lab, tmp_path_factory.mktemp(lab.path.stem))
    yield result
    write_measured(result)
