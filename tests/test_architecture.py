"""The wiring's rules, read from the source: no import cycle between modules, no command importing
another, the admin page never reaching into the engines, the engines never into the appliance."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("appliance", "engines", "build_scripts", "provisioning")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, everywhere: bool) -> set[str]:
    """Project modules ``path`` imports: at module level only (what runs on import), or anywhere."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.walk(tree) if everywhere else iter(tree.body)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.If) and not everywhere:
            # `if TYPE_CHECKING:` blocks never run; version switches do.
            test = node.test
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                continue
            for inner in node.body + node.orelse:
                found |= _imports_of(inner)
            continue
        found |= _imports_of(node)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def _imports_of(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return set()


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")}


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {
        name: {m for m in _imports(path, everywhere=False) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_no_import_cycle_at_module_level(modules: dict[str, Path]) -> None:
    graph = _graph(modules)
    # A package's __init__ importing its own submodules is how packages work, not a cycle.
    for name, targets in graph.items():
        graph[name] = {
            t for t in targets if not (t.startswith(name + ".") and modules[name].name == "__init__.py")
        }
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append([*trail[trail.index(target) :], target] if target in trail else [node, target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_command_imports_another(modules: dict[str, Path]) -> None:
    commands = {
        n for n in modules if n.startswith("appliance.commands.") and n != "appliance.commands.common"
    }
    for name in commands:
        others = {m for m in _imports(modules[name], everywhere=True) if m in commands and m != name}
        assert not others, f"{name} imports {others}"


def test_the_admin_page_never_imports_the_engines(modules: dict[str, Path]) -> None:
    for name in (n for n in modules if n.startswith("appliance.admin")):
        engines = {m for m in _imports(modules[name], everywhere=True) if m.startswith("engines.")}
        # engines.files is the ground floor of file handling (atomic writes, TOML), not an engine.
        assert all(m.startswith("engines.files") for m in engines), f"{name} imports {engines}"


def test_the_engines_never_import_the_appliance(modules: dict[str, Path]) -> None:
    for name in (n for n in modules if n.startswith("engines")):
        upward = {m for m in _imports(modules[name], everywhere=True) if m.split(".")[0] != "engines"}
        assert not upward, f"{name} imports {upward}"


def test_engines_are_built_from_settings_in_one_place(modules: dict[str, Path]) -> None:
    factories = {"create_vad", "create_asr", "create_llm", "create_tts", "create_turn_detector"}
    for name, path in modules.items():
        if name.startswith(("engines", "appliance.engine_set")):
            continue
        called = {
            node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call)
        }
        assert not called & factories, (
            f"{name} calls {called & factories}; build engines with appliance.engine_set"
        )
