"""docs/architecture.md is true: every package it names exists, imports point one way between
packages, no module circle, and the coordinator and the clients do not import each other."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = ("rebalance", "legacy_zk", "modern", "broker", "zkensemble", "experiments")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for top in TOP for path in (ROOT / top).rglob("*.py")}


def _imports() -> nx.DiGraph:
    """Module -> module, for every import of a project module (top-level or inside a function)."""
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def _package(module: str, packages: set[str]) -> str:
    while module not in packages:
        module = module.rpartition(".")[0]
    return module


def test_every_package_the_page_names_exists():
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`([a-z_0-9]+(?:/[a-z_0-9]+)*)/`", text))
    assert len(named) >= 10
    missing = [name for name in sorted(named) if not (ROOT / name / "__init__.py").is_file()]
    assert not missing, f"docs/architecture.md names packages that do not exist: {missing}"


def test_no_import_circle():
    graph = _imports()
    circles = [sorted(component) for component in nx.strongly_connected_components(graph) if len(component) > 1]
    assert not circles, f"modules importing each other: {circles}"


def test_no_two_way_tie_between_packages():
    graph = _imports()
    packages = {name for name, path in _modules().items() if path.name == "__init__.py"}
    ties = nx.DiGraph()
    for source, target in graph.edges:
        a, b = _package(source, packages), _package(target, packages)
        # a package may import its own subpackages (its __init__ re-exports them), not a sibling that imports it back
        if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
            ties.add_edge(a, b)
    two_way = sorted({tuple(sorted(edge)) for edge in ties.edges if ties.has_edge(edge[1], edge[0])})
    assert not two_way, f"packages importing each other: {two_way}"


@pytest.mark.parametrize(("package", "forbidden"), [
    ("modern.coordinator", ("modern.classic", "modern.kip848", "modern.client")),
    ("modern.classic", ("modern.coordinator", "modern.kip848")),
    ("modern.kip848", ("modern.coordinator", "modern.classic")),
    ("modern.client", ("modern.coordinator", "modern.classic", "modern.kip848")),
    ("modern.common", ("modern.coordinator", "modern.classic", "modern.kip848", "modern.client")),
])
def test_the_coordinator_and_the_clients_do_not_import_each_other(package, forbidden):
    graph = _imports()
    wrong = sorted((source, target) for source, target in graph.edges
                   if source.startswith(package) and target.startswith(forbidden))
    assert not wrong, wrong


def test_common_holds_only_what_the_coordinator_and_a_client_both_use():
    """`modern.common` is the wire both sides speak; what only the clients use belongs in `modern.client`."""
    graph = _imports()
    clients = ("modern.client", "modern.classic", "modern.kip848")
    one_sided = []
    for module, path in sorted(_modules().items()):
        if not module.startswith("modern.common.") or path.name == "__init__.py":
            continue
        importers = [source for source, _ in graph.in_edges(module)]
        if not (any(i.startswith("modern.coordinator") for i in importers) and any(i.startswith(clients) for i in importers)):
            one_sided.append(module)
    assert not one_sided, f"in modern.common but not used by both the coordinator and a client: {one_sided}"


# Every name a backend answers to, its own and its aliases: the profiles' business, not a stage's.
BACKEND_NAMES = {"legacy", "classic", "kip848", "modern"}
# Modules where one of those words means something else, and why.
SAME_WORD_OTHER_MEANING = {
    "experiments/fuzz/capture_corpus.py": "Kafka's own group.protocol values (classic, consumer) for a real Kafka client",
}


def _names_a_backend(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in BACKEND_NAMES


def _backend_name_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module tests a string against a backend's name: a comparison with one (`== "kip848"`,
    `in ("legacy", ...)`), a table keyed by one, a match case on one, a lookup or a call given one
    (`group["legacy"]`, `settings(table, "kip848")`), or a literal list of nothing but backend names (a
    column order)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            inner = [element for operand in operands if isinstance(operand, (ast.Tuple, ast.List, ast.Set))
                     for element in operand.elts]
            if any(_names_a_backend(each) for each in [*operands, *inner]):
                found.append((node.lineno, "compared"))
        elif isinstance(node, ast.Dict) and any(key is not None and _names_a_backend(key) for key in node.keys):
            found.append((node.lineno, "a table keyed by backend name"))
        elif isinstance(node, ast.MatchValue) and _names_a_backend(node.value):
            found.append((node.lineno, "a match case"))
        elif isinstance(node, ast.Subscript) and _names_a_backend(node.slice):
            found.append((node.lineno, "looked up by backend name"))
        elif isinstance(node, ast.Call) and any(_names_a_backend(argument) for argument in node.args):
            found.append((node.lineno, "a backend's name handed to a call"))
        elif (isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) > 1
              and all(_names_a_backend(each) for each in node.elts)):
            found.append((node.lineno, "a list of backend names"))
    return found


def test_no_stage_tests_a_backends_name():
    """Above rebalance/, a backend's settings section, colour, marker, column and protocol are its
    profile's answers (rebalance/backends.py): a stage that compares a string to `legacy`, `classic`,
    `kip848` or the alias `modern` has grown a table the next backend would have to be added to."""
    wrong = [f"{path.relative_to(ROOT)}:{line}: {what}"
             for path in sorted((ROOT / "experiments").rglob("*.py"))
             if path.relative_to(ROOT).as_posix() not in SAME_WORD_OTHER_MEANING
             for line, what in _backend_name_tests(ast.parse(path.read_text()))]
    assert not wrong, "experiments/ tests backend names (ask the profile instead):\n" + "\n".join(wrong)


@pytest.mark.parametrize("source", [
    'if backend == "kip848": pass',
    'if backend in ("legacy", "classic"): pass',
    'STYLE = {"modern": ("#1f77b4", "s")}',
    'ORDER = ("legacy", "classic", "kip848")',
    'settings = group["legacy"]',
    'legacy = self.settings(table, "legacy", path)',
    'match backend:\n    case "classic": pass',
])
def test_the_backend_name_scan_finds_each_kind_of_test(source):
    assert _backend_name_tests(ast.parse(source))


@pytest.mark.parametrize("source", [
    'help = "legacy: range, roundrobin"',
    'backend: str = "classic"',
    'TARGETS = {"wire": ["broker", "modern", "rebalance.kafka_frames"]}',
    'profile(name).colour',
])
def test_the_backend_name_scan_leaves_names_in_words_and_defaults(source):
    assert not _backend_name_tests(ast.parse(source))


def _floors() -> dict[str, int]:
    """package -> floor, from the block between the floors markers of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("<!-- floors:begin -->", 1)[1].split("<!-- floors:end -->", 1)[0]
    floors = {}
    for line in block.splitlines():
        if match := re.fullmatch(r"\s*(\d+)\s+(.+)", line):
            for package in match.group(2).split(","):
                floors[package.strip()] = int(match.group(1))
    return floors


def _floor_of(module: str, floors: dict[str, int]) -> tuple[str, int] | None:
    named = [package for package in floors if module == package or module.startswith(package + ".")]
    if not named:
        return None
    package = max(named, key=len)
    return package, floors[package]


def test_the_page_gives_every_package_a_floor():
    floors = _floors()
    assert len(floors) >= 15
    packages = sorted(name for name, path in _modules().items() if path.name == "__init__.py")
    # `experiments` and `modern` only hold packages that have floors of their own
    containers = {name for name in packages if any(other.startswith(name + ".") for other in floors)}
    missing = [name for name in packages if name not in containers and _floor_of(name, floors) is None]
    assert not missing, f"packages without a floor in docs/architecture.md: {missing}"


def _against_floors(edges, floors: dict[str, int]) -> list[str]:
    wrong = []
    for source, target in edges:
        placed_a, placed_b = _floor_of(source, floors), _floor_of(target, floors)
        if placed_a is None or placed_b is None:
            wrong.append(f"{source} imports {target}: one of them has no floor")
            continue
        (a, floor_a), (b, floor_b) = placed_a, placed_b
        if a != b and floor_b >= floor_a:
            wrong.append(f"{source} ({a}, floor {floor_a}) imports {target} ({b}, floor {floor_b})")
    return sorted(wrong)


def test_every_import_points_down_the_declared_floors():
    wrong = _against_floors(_imports().edges, _floors())
    assert not wrong, "imports against the floors of docs/architecture.md:\n" + "\n".join(wrong)


@pytest.mark.parametrize("edge", [
    ("experiments.run.runner", "experiments.summary.pipeline"),         # up
    ("modern.client.fetcher", "modern.coordinator.service"),            # across one floor
    ("legacy_zk.member", "broker.server"),
])
def test_the_floor_check_finds_an_import_that_does_not_point_down(edge):
    assert _against_floors([edge], _floors())


# The files and folders of a run's, a comparison's, a campaign's and a report's folder: the modules of
# experiments/folders/ name them, and every other module asks those, the tests included.
FOLDER_NAMES = {"lock.json", "events", "logs", "summary", "run.json", "summary.md", "evidence", "compare.json",
                "manifest.json", "campaign.toml", "runs", "statistics", "statistics.md", "report", "incomplete",
                "replaced", "members", "brokers", "advertise.json", "runner-error.txt", "runner-notes.txt",
                "conditions.json", "report.md", "report.html"}
FOLDER_OWNERS = "experiments/folders/"
# The owners' own test, which checks the layout they give against the paths it spells.
LAYOUT_TEST = "tests/test_folders.py"


def _spelled_folder_names(tree: ast.AST) -> list[tuple[int, str]]:
    """`something / "events"` or `/ "verdicts.parquet"`: a path built from one of the folders' names."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, str) and (
                        side.value in FOLDER_NAMES or side.value.endswith(".parquet")):
                    found.append((node.lineno, side.value))
    return found


def test_no_module_or_test_spells_a_folders_file_names():
    paths = [*(ROOT / "experiments").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    wrong = [f"{path.relative_to(ROOT)}:{line}: / {name!r}"
             for path in sorted(paths)
             if not path.relative_to(ROOT).as_posix().startswith(FOLDER_OWNERS)
             and path.relative_to(ROOT).as_posix() not in (LAYOUT_TEST, "tests/test_architecture.py")
             and "corpus" not in path.parts
             for line, name in _spelled_folder_names(ast.parse(path.read_text()))]
    assert not wrong, "paths into a lab folder spelled outside experiments/folders/:\n" + "\n".join(wrong)


# Each default said once: where a value is a convention of the lab, one module declares it and every other
# module imports it.
def _literal_defaults(tree: ast.AST, name_part: str) -> list[int]:
    """Lines where a parameter, a field or a name containing `name_part` gets a number literal."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
                     *((arg, default) for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                       if default is not None)]
            lines += [default.lineno for arg, default in pairs
                      if name_part in arg.arg.lower() and isinstance(default, ast.Constant)
                      and isinstance(default.value, (int, float)) and not isinstance(default.value, bool)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, (int, float)) and not isinstance(node.value.value, bool):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            lines += [node.lineno for target in targets
                      if isinstance(target, ast.Name) and name_part in target.id.lower()]
    return lines


def test_the_latency_limit_is_declared_once():
    owner = "experiments/scenario/model.py"
    written = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "experiments").rglob("*.py"))
               if path.relative_to(ROOT).as_posix() != owner
               for line in _literal_defaults(ast.parse(path.read_text()), "latency_limit")]
    assert not written, f"a latency limit written outside {owner} (import LATENCY_LIMIT_MS):\n" + "\n".join(written)


def test_the_literal_default_scan_finds_a_written_limit():
    assert _literal_defaults(ast.parse("def f(*, latency_limit_ms: int = 3000): pass"), "latency_limit")
    assert _literal_defaults(ast.parse("LATENCY_LIMIT_MS = 3000"), "latency_limit")


def test_the_runners_phases_are_named_once():
    """`setup`, `warmup` and `teardown` are RunnerPhase's (rebalance/events.py); the readers import it."""
    spelled = [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
               for path in sorted((ROOT / "experiments").rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Constant) and node.value in ("setup", "warmup", "teardown")]
    assert not spelled, "a runner phase spelled instead of RunnerPhase:\n" + "\n".join(spelled)


def test_the_convergence_bound_is_computed_in_one_place():
    computed = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "experiments").rglob("*.py"))
                if path.relative_to(ROOT).as_posix() != "experiments/summary/check_queries/model.py"
                for number, line in enumerate(path.read_text().splitlines(), 1)
                if "2 * session" in line and "#" not in line.split("2 * session")[0]]
    assert not computed, "the convergence bound computed outside CheckConfig.convergence_bound_for:\n" + "\n".join(computed)


def test_the_scenario_resolver_has_a_method_for_every_action():
    from experiments.scenario.actions import ACTIONS
    from experiments.scenario.resolver import RESOLVED_BY, _Resolver

    assert set(RESOLVED_BY) == set(ACTIONS)
    assert all(callable(getattr(_Resolver, name, None)) for name in RESOLVED_BY.values())


@pytest.mark.parametrize("source", ['run_dir / "events"', 'folder / "statistics" / "runs.parquet"',
                                    'Path(x) / "lock.json"'])
def test_the_folder_name_scan_finds_a_spelled_path(source):
    assert _spelled_folder_names(ast.parse(source))
