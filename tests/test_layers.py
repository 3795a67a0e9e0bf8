"""Imports run one way: no module of privft imports from a layer below it in docs/architecture.md's list, and no
private name crosses a package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "privft"


def documented_layers() -> dict[str, int]:
    """Each unit named in docs/architecture.md's "Layers" block, with its line number there (0 = lowest layer)."""
    section = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("\n## Layers\n", 1)[1]
    block = section.split("```", 2)[1]
    return {unit.strip(): level for level, line in enumerate(block.strip().splitlines()) for unit in line.split(",")}


def module_paths() -> dict[str, Path]:
    """Every module of privft by its dotted name (a package by its own name, not by `__init__`)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = module_paths()


def unit(module: str) -> str:
    """The layer unit of a privft module: its top-level module or subpackage, or `__init__` for the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package(module: str) -> str:
    """The package a module belongs to (a package's `__init__` belongs to that package)."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def privft_imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported privft module, imported name or None, line) for every import in `module`, function-level too."""
    found = []
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names if alias.name.split(".")[0] == "privft"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "privft":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.append((submodule, None, node.lineno) if submodule in MODULES
                             else (node.module, alias.name, node.lineno))
    return found


def test_every_module_is_placed_in_a_documented_layer():
    layers = documented_layers()
    units = {unit(module) for module in MODULES}
    assert units - set(layers) == set(), "add these modules to the Layers block of docs/architecture.md"
    assert set(layers) - units == set(), "the Layers block of docs/architecture.md names modules that do not exist"


def test_no_module_imports_from_a_higher_layer():
    layers = documented_layers()
    upward = [f"{MODULES[source].relative_to(ROOT)}:{line} imports {target}"
              for source in MODULES for target, _, line in privft_imports(source)
              if layers[unit(target)] > layers[unit(source)]]
    assert upward == []
    from_defend = {unit(target) for source in MODULES if unit(source) == "defend"
                   for target, _, _ in privft_imports(source)}
    assert "callbacks" not in from_defend


def test_no_private_name_is_imported_across_packages():
    crossing = [f"{MODULES[source].relative_to(ROOT)}:{line} imports {name} from {target}"
                for source in MODULES for target, name, line in privft_imports(source)
                if name is not None and name.startswith("_") and package(target) != package(source)]
    assert crossing == []
