"""The wiring's rules, read from the source: no import cycle between modules, no command importing
another, the admin page never reaching into the engines, the engines never into the appliance."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("appliance", "engines", "build_scripts", "provisioning")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks (imports that never run)."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            hidden |= {id(inner) for part in node.body for inner in ast.walk(part)}
    return hidden


def _imports(path: Path, *, everywhere: bool) -> set[str]:
    """Project modules ``path`` imports: at module level only (what runs on import), or anywhere it
    runs (inside functions too; not under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hidden = _type_checking_only(tree) if everywhere else set()
    nodes = (n for n in ast.walk(tree) if id(n) not in hidden) if everywhere else iter(tree.body)
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


def _graph(modules: dict[str, Path], *, everywhere: bool) -> dict[str, set[str]]:
    return {
        name: {m for m in _imports(path, everywhere=everywhere) if m in modules and m != name}
        for name, path in modules.items()
    }


@pytest.mark.parametrize("everywhere", [False, True], ids=["module level", "inside functions too"])
def test_no_import_cycle(modules: dict[str, Path], everywhere: bool) -> None:
    """No cycle of imports, counting those inside functions as well: an import deferred into a
    function hides a cycle from Python, not from the design (each side still needs the other)."""
    assert cycles_in(_graph(modules, everywhere=everywhere), modules) == []


def cycles_in(graph: dict[str, set[str]], modules: dict[str, Path]) -> list[str]:
    """The import cycles of ``graph``, each as "a -> b -> a"."""
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
    return [" -> ".join(c) for c in cycles]


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    """The check itself can fail: two modules of a tree, one importing the other inside a function."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def later():\n    import a\n")
    files = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}

    def graph(everywhere: bool) -> dict[str, set[str]]:
        return {
            name: {m for m in _imports_any(path, everywhere) if m in files and m != name}
            for name, path in files.items()
        }

    assert cycles_in(graph(False), files) == []
    assert cycles_in(graph(True), files) == ["a -> b -> a"]


def _imports_any(path: Path, everywhere: bool) -> set[str]:
    """As ``_imports``, for a tree outside the project's packages."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.walk(tree) if everywhere else iter(tree.body)
    return {name for node in nodes for name in _imports_of(node)}


def test_no_command_imports_another(modules: dict[str, Path]) -> None:
    commands = {
        n for n in modules if n.startswith("appliance.commands.") and n != "appliance.commands.common"
    }
    for name in commands:
        others = {m for m in _imports(modules[name], everywhere=True) if m in commands and m != name}
        assert not others, f"{name} imports {others}"


def test_the_admin_page_never_imports_the_engines(modules: dict[str, Path]) -> None:
    for name in (n for n in modules if n == "appliance.admin" or n.startswith("appliance.admin.")):
        engines = {m for m in _imports(modules[name], everywhere=True) if m.startswith("engines.")}
        # engines.files and engines.setting_files are the ground floor of file handling (atomic
        # writes, TOML, the bounded read of a file a setting names), and engines.params that of every
        # setting (its base, units, address checks): not engines.
        ground = ("engines.files", "engines.setting_files", "engines.params")
        assert all(m.startswith(ground) for m in engines), f"{name} imports {engines}"


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


def test_the_settings_schema_imports_no_audio_or_model_library() -> None:
    """``appliance config check`` and the admin page's config write read the schema alone: no audio
    device, audio file or inference library is loaded for it."""
    heavy = ("soundfile", "soxr", "sounddevice", "onnxruntime", "llama_cpp", "piper", "torch")
    probe = f"import sys, appliance.config; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_sip_and_the_tools_read_their_own_parameters_not_the_configuration(modules: dict[str, Path]) -> None:
    for name in (n for n in modules if n.startswith(("appliance.sip.", "appliance.tools", "appliance.rtp."))):
        assert "appliance.config" not in _imports(modules[name], everywhere=True), name


MAX_LINES = 500
SESSION_MAX_LINES = 250
# A module over the limit that cannot be split at once goes here with its size, and may only shrink;
# none is, today. Any other that grows past the limit fails.
OVER_THE_LIMIT: dict[str, int] = {}


def _too_long(root: Path) -> list[str]:
    found = []
    for path in sorted(p for package in (*PACKAGES, "bench") for p in (root / package).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        limit = OVER_THE_LIMIT.get(
            rel, SESSION_MAX_LINES if rel.endswith("pipeline/session.py") else MAX_LINES
        )
        if lines > limit:
            found.append(f"{rel}: {lines} lines (at most {limit})")
    return found


def test_no_module_grows_past_its_limit() -> None:
    assert not _too_long(REPO), "split these (a module over 500 lines holds more than one room)"


def test_a_module_over_the_limit_is_found(tmp_path: Path) -> None:
    (tmp_path / "appliance" / "sip").mkdir(parents=True)
    (tmp_path / "appliance" / "sip" / "server.py").write_text("x = 1\n" * 501, encoding="utf-8")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "small.py").write_text("x = 1\n" * 10, encoding="utf-8")
    assert _too_long(tmp_path) == ["appliance/sip/server.py: 501 lines (at most 500)"]


def unnamed_modules(root: Path) -> list[str]:
    """Modules of ``appliance/`` that ARCHITECTURE.md does not name by their path."""
    text = (root / "ARCHITECTURE.md").read_text(encoding="utf-8")
    paths = sorted(p for p in (root / "appliance").rglob("*.py") if p.name != "__init__.py")
    return [rel for rel in (p.relative_to(root).as_posix() for p in paths) if f"`{rel}`" not in text]


def test_architecture_md_names_every_module() -> None:
    assert not unnamed_modules(REPO), "name these in ARCHITECTURE.md's 'Every module'"


def test_a_module_the_architecture_does_not_name_is_found(tmp_path: Path) -> None:
    (tmp_path / "appliance" / "sip").mkdir(parents=True)
    (tmp_path / "appliance" / "sip" / "named.py").write_text("", encoding="utf-8")
    (tmp_path / "appliance" / "sip" / "new_room.py").write_text("", encoding="utf-8")
    (tmp_path / "ARCHITECTURE.md").write_text("- `appliance/sip/named.py`: here\n", encoding="utf-8")
    assert unnamed_modules(tmp_path) == ["appliance/sip/new_room.py"]
