"""The layers of harness/ (issue 53): every import of every harness module, at the top or inside a function, points
down the order below; no module outside harness/commands imports the commands; models/ never imports harness/.
docs/overview.md describes the order."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Bottom first: a group may import its own modules and the groups below it, never one above. A group is a
# subpackage of harness/ or a module at its top, with three exceptions (group_of): spec.py belongs to ladder/,
# the result kinds' registry (kinds/__init__.py, kinds/_blocks.py) sits low and the kind modules it finds
# at run time (kinds/ladder.py, kinds/eval.py, ...) just below the commands, so that a kind can take its
# table from report/, ladder/ or train/; cli.py and __main__.py are the top.
LAYERS = (
    "harness",  # harness/__init__.py, a docstring: every harness module imports it
    "errors",
    "user_yaml",
    "machine",
    "stats",
    "arguments",
    "kinds",  # the registry
    "outputs",
    "results",
    "data",
    "eval",  # the LIBERO evaluation: no scenario (its command reads a scenario's eval block)
    "scenario",
    "ladder",  # with spec.py
    "train",
    "judge",
    "report",
    "kind modules",
    "commands",
    "cli",
)
RANK = {group: rank for rank, group in enumerate(LAYERS)}


def group_of(module: str) -> str:
    """The layer group of a harness module (a dotted name)."""
    parts = module.split(".")
    if module == "harness":
        return "harness"
    if module in ("harness.cli", "harness.__main__"):
        return "cli"
    if module == "harness.spec":
        return "ladder"
    if parts[1] == "kinds" and len(parts) > 2 and not parts[2].startswith("_"):
        return "kind modules"
    return parts[1]


def modules(top: str) -> dict[str, Path]:
    """Every module under ROOT/top by its dotted name (a package by its own name)."""
    found = {}
    for path in (ROOT / top).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if path.name == "__init__.py" else parts)] = path
    return found


def imported(module: str, source: str, package: bool = False) -> list[tuple[str, int]]:
    """(dotted name, line) of everything a module's source imports, at the top or inside a function: a relative
    import resolved against its package (the module itself for a package's __init__.py), `from package import
    name` as package.name too (the name may be a module)."""
    base_package = module if package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = base_package.split(".")[: len(base_package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out += [(base, node.lineno)] + [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return out


HARNESS = modules("harness")


def harness_imports(module: str, source: str) -> list[tuple[str, str, int]]:
    """(module, imported harness module, line) of a harness module's source."""
    edges = []
    for name, line in imported(module, source, HARNESS[module].name == "__init__.py"):
        while name and name not in HARNESS:  # harness.ladder.runner.run_scenario -> harness.ladder.runner
            name = name.rpartition(".")[0]
        if name and name != module:
            edges.append((module, name, line))
    return list(dict.fromkeys(edges))  # `from a.b import c`: a.b once, whether or not c is a module


EDGES = [edge for module, path in sorted(HARNESS.items()) for edge in harness_imports(module, path.read_text())]


def upward(edges: list[tuple[str, str, int]]) -> list[str]:
    return [
        f"{HARNESS[a].relative_to(ROOT)}:{line} imports {b} ({group_of(a)} -> {group_of(b)}, a layer above)"
        for a, b, line in edges
        if RANK[group_of(b)] > RANK[group_of(a)]
    ]


def test_every_module_is_in_a_layer():
    assert sorted({group_of(m) for m in HARNESS} - set(LAYERS)) == []


def test_imports_point_down_the_layers():
    assert upward(EDGES) == []


def test_only_the_command_line_imports_the_commands():
    outside = [
        f"{HARNESS[a].relative_to(ROOT)}:{line} imports {b}"
        for a, b, line in EDGES
        if group_of(b) == "commands" and group_of(a) not in ("commands", "cli")
    ]
    assert outside == []


def test_no_module_imports_a_kind_module_by_name():
    """The registry finds the kind modules when a kind is first asked for (harness/kinds/__init__.py _discover)."""
    named = [f"{a} imports {b}" for a, b, _ in EDGES if group_of(b) == "kind modules"]
    assert named == []


def test_models_never_imports_harness():
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for module, path in sorted(modules("models").items())
        for name, line in imported(module, path.read_text(), path.name == "__init__.py")
        if name == "harness" or name.startswith("harness.")
    ]
    assert found == []


@pytest.mark.parametrize(
    "module, text, caught",
    [
        ("harness.eval.main", "def f():\n    from ..report.report import eval_table\n", 1),  # inside a function
        ("harness.train.ladder_run", "from ..judge.gates import Limits\n", 1),
        ("harness.report.site", "from ..commands.run import default_out\n", 1),
        ("harness.ladder.runner", "import harness.report.report\n", 1),
        ("harness.data.pipeline", "from .. import eval\n", 1),  # a package
        ("harness.report.site", "from ..judge.gates import Limits\n", 0),  # down: fine
    ],
)
def test_an_upward_import_is_caught(module, text, caught):
    """The check itself: an import added to a module's source is reported when it points up the layers."""
    source = HARNESS[module].read_text() + "\n" + text
    assert len(upward(harness_imports(module, source))) == caught
