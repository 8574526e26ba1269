"""The package's shape: which layers may import which, no import cycles, small files."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "ragserve"
MAX_LINES = 350
# Layers below the server: they must work without it (the CLI is the only one that may import
# the server, to serve it).
BELOW_SERVER = (
    "engine",
    "rag",
    "eval",
    "bench",
    "reliability",
    "services",
    "serving",
    "settings",
    "access",
    "keys",
)
# Harnesses whose subject is the server itself: `ragserve eval races` serves the app in-process
# to race writers against readers over HTTP. No other module below the server imports it.
SERVER_HARNESSES = ("ragserve.reliability.races",)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def type_checking_only(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports(path: Path) -> set[str]:
    """The ragserve modules a file imports, at any depth (function-local imports included:
    they hide cycles rather than remove them), except those only imported for type checking."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and type_checking_only(node)
        for child in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
    return {name for name in found if name in MODULES}


GRAPH = {name: imports(path) for name, path in MODULES.items()}


@pytest.mark.parametrize("layer", BELOW_SERVER)
def test_lower_layers_do_not_import_the_server_or_the_cli(layer):
    prefix = f"ragserve.{layer}"
    offenders = {
        module: sorted(
            i
            for i in targets
            if i.startswith("ragserve.cli")
            or (i.startswith("ragserve.server") and module not in SERVER_HARNESSES)
        )
        for module, targets in GRAPH.items()
        if module == prefix or module.startswith(prefix + ".")
    }
    assert not {m: t for m, t in offenders.items() if t}


def test_no_import_cycles():
    state: dict[str, str] = {}
    cycles = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        for target in sorted(GRAPH[module]):
            if state.get(target) == "open":
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target, [*stack, target])
        state[module] = "done"

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert not cycles


def test_the_walk_sees_a_cycle_when_there_is_one(tmp_path):
    # The check above must be able to fail: a function-local import still counts.
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from ragserve.server.app import build_app\n")
    assert "ragserve.server.app" in imports(source)


def test_no_source_file_is_longer_than_the_limit():
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long


def external_imports(path: Path) -> set[str]:
    """The top-level packages outside ragserve that a file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found - {"ragserve"}


def test_ray_stays_an_optional_part_reached_only_through_the_cli():
    # Without ragserve[ray] installed, everything but `serve --replicas N` must work.
    using_ray = {m for m, p in MODULES.items() if "ray" in external_imports(p)}
    assert using_ray and all(m.startswith("ragserve.cluster") for m in using_ray), using_ray
    reaching_cluster = {
        module
        for module, targets in GRAPH.items()
        if any(t.startswith("ragserve.cluster") for t in targets)
    }
    assert all(m.startswith(("ragserve.cluster", "ragserve.cli")) for m in reaching_cluster)


# Packages that measure: what a user types and sees (options, usage errors, printing) is the
# CLI's, so their functions run the same from a test, a script or another command.
MEASURING = ("eval", "bench", "reliability")


@pytest.mark.parametrize("layer", MEASURING)
def test_measuring_code_leaves_the_command_line_to_the_cli(layer):
    prefix = f"ragserve.{layer}"
    offenders = {
        module: sorted(external_imports(path) & {"typer", "click", "rich"})
        for module, path in MODULES.items()
        if module == prefix or module.startswith(prefix + ".")
    }
    assert not {m: t for m, t in offenders.items() if t}


# The server modules that build and hold the services (and close the store at shutdown).
SERVER_WIRING = ("ragserve.server.app", "ragserve.server.state")


def test_routes_reach_documents_only_through_a_service():
    """Who may read or change which document, and how ids are namespaced, is decided in
    ragserve.serving, once for the routes, the CLI and evaluation: no route module touches the
    store or the ingestor itself."""
    offenders = {}
    for name, path in MODULES.items():
        if not name.startswith("ragserve.server.") or name in SERVER_WIRING:
            continue
        tree = ast.parse(path.read_text())
        reached = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        if found := reached & {"store", "ingestor"}:
            offenders[name] = sorted(found)
    assert not offenders


MAX_FUNCTION_LINES = 60


def test_server_functions_are_short():
    """Routes are module-level functions over a service; the request path is in steps a reader
    can follow (no route factory holding every route in one closure)."""
    long = {
        (name, node.name)
        for name, path in MODULES.items()
        if name.startswith("ragserve.server")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert not long
