"""The package layout is a contract too: each stage imports only the stages below it, module-level
imports form no cycle, and no import hides inside a function to dodge one (docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "verlprof"

STAGES: Tuple[Tuple[str, str], ...] = (  # (module prefix, stage), most specific first
    ("verlprof.errors", "contracts"), ("verlprof.paths", "contracts"),
    ("verlprof.manifest", "contracts"), ("verlprof.records", "contracts"),
    ("verlprof.version", "contracts"), ("verlprof.safe_text", "contracts"),
    ("verlprof.storage", "contracts"),
    ("verlprof.config", "config"),
    ("verlprof.plan_model", "plan.model"),
    ("verlprof.plan", "plan"),
    ("verlprof.backends", "backends"),
    ("verlprof.worker", "worker"),
    ("verlprof.runtime", "runtime"),
    ("verlprof.trace", "trace"),
    ("verlprof.report", "report"),
    ("verlprof.bridges", "bridges"),
    ("verlprof.demo", "demo"),
    ("verlprof.cli", "cli"),
    ("verlprof", "api"),
)

BELOW: Dict[str, Set[str]] = {
    "contracts": set(),
    "config": {"contracts"},
    "plan.model": {"contracts", "config"},
    "backends": {"contracts", "config", "plan.model"},
    "plan": {"contracts", "config", "plan.model"},
    "worker": {"contracts", "plan.model", "backends"},
    "runtime": {"contracts", "config", "plan.model", "plan", "backends", "worker"},
    "trace": {"contracts", "backends"},
    "report": {"contracts", "backends", "trace"},
    "bridges": {"contracts", "config", "plan.model", "plan", "backends", "worker", "runtime",
                "trace", "report"},
    "demo": {"contracts", "config", "plan.model", "plan", "backends", "worker", "runtime",
             "trace", "report"},
    "cli": {"contracts", "config", "plan.model", "plan", "backends", "worker", "runtime",
            "trace", "report", "demo", "bridges"},
    "api": {"contracts", "config", "plan.model", "plan", "backends", "worker", "runtime",
            "trace", "report"},
}
"""What each stage may import besides itself: dependencies point one way."""

LAZY_ALLOWED = {
    "verlprof", "verlprof.config",  # PEP 562 __getattr__: import cost
    "verlprof.cli", "verlprof.report.cli",  # commands load what the chosen subcommand needs
    "verlprof.trace.cli",
    "verlprof.runtime.capture_cli",  # capture/status/collect: each loads its own path
    "verlprof.demo.run",  # the demo's entry point
    "verlprof.report.summary",  # Pillow only when a picture is drawn
    "verlprof.backends",  # PEP 562: a backend's module when it is asked for
    "verlprof.backends.nsys.backend",  # `verlprof report` reads: no config schema, no ctypes
    "verlprof.report.export_ahead",  # the nsys CLI module only when there is something to export
    "verlprof.bridges.verl.plugin",  # verl imports it everywhere; the bridge only when asked
    "verlprof.backends.nsys.gpu_sql",  # numpy and the page decoder only for large GPU tables
    "verlprof.bridges.verl.worker_side",  # the trampoline runs with verl's module globals
}
"""Modules allowed an import of verlprof inside a function; each is an entry point or a lazy
loader for import cost, never a way around a cycle (the stage rule above still holds)."""


def _modules() -> Iterator[Tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def _stage(module: str) -> str:
    return next(stage for prefix, stage in STAGES
                if module == prefix or module.startswith(prefix + "."))


def _imports(path: Path) -> Iterator[Tuple[str, bool, bool]]:
    """(imported verlprof module, inside a function, only for type checking)."""
    tree = ast.parse(path.read_text())
    typing_only: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            typing_only.update(id(n) for child in node.body for n in ast.walk(child))
    in_function: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        names: List[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module  # `from a import b` imports module a.b when there is one
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name == "verlprof" or name.startswith("verlprof."):
                yield name, id(node) in in_function, id(node) in typing_only


MODULES: Dict[str, Path] = {}


def _known(name: str, modules: Set[str]) -> str:
    """The module a dotted import name refers to (``from a import b``: a.b if a module)."""
    while name not in modules:
        name = name.rsplit(".", 1)[0]
    return name


MODULES.update(_modules())


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_stage_imports_only_the_stages_below_it(module):
    stage = _stage(module)
    for name, _, _ in _imports(MODULES[module]):
        target = _known(name, set(MODULES))
        other = _stage(target)
        assert other == stage or other in BELOW[stage], (
            f"{module} ({stage}) imports {target} ({other}); {stage} may import "
            f"{sorted(BELOW[stage]) or 'nothing'} (docs/architecture.md)")


def test_no_import_inside_a_function_outside_the_lazy_loaders():
    hidden = sorted(f"{module} imports {name}" for module, path in MODULES.items()
                    if module not in LAZY_ALLOWED
                    for name, inside, _ in _imports(path) if inside)
    assert hidden == []


def test_module_level_imports_form_no_cycle():
    modules = set(MODULES)
    graph = {m: {_known(n, modules) for n, inside, typing in _imports(p) if not inside
                 and not typing} - {m} for m, p in MODULES.items()}
    # a package's __init__ importing its own submodules is how a package exposes them
    graph = {m: {t for t in targets if not t.startswith(m + ".")} for m, targets in graph.items()}
    state: Dict[str, int] = {}
    cycle: List[str] = []

    def visit(node: str, trail: List[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle.extend(trail[trail.index(nxt):] + [node, nxt] if nxt in trail
                             else [node, nxt])
                return True
            if nxt not in state and visit(nxt, trail + [node]):
                return True
        state[node] = 2
        return False

    for module in sorted(graph):
        if module not in state and visit(module, []):
            break
    assert cycle == [], " -> ".join(cycle)


def test_modules_stay_small():
    """One concept per module: ~400 lines at most (the guide's rule), tests and docs aside."""
    long = sorted(f"{m}: {len(p.read_text().splitlines())} lines" for m, p in MODULES.items()
                  if len(p.read_text().splitlines()) > 420)
    assert long == []


def test_the_planner_imports_no_backend_runtime_or_bridge():
    """The plan is a pure function of the config: the planner (and the plan's types) name no
    module that executes a plan, even for type checking or inside a function."""
    executing = ("verlprof.backends", "verlprof.runtime", "verlprof.bridges", "verlprof.worker")
    found = sorted(f"{module} imports {name}" for module, path in MODULES.items()
                   if _stage(module) in ("plan", "plan.model")
                   for name, _, _ in _imports(path) if name.startswith(executing))
    assert found == []


PRIVATE_REACH_ALLOWED = {
    "_verlprof_session": "the session verlprof keeps on a user's worker object "
                        "(worker/mixin.py); named so that it cannot collide with the user's "
                        "own attributes, and read by the code that annotates that object",
}
"""Private names one module may read from another, each with its reason."""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_names(tree: ast.AST) -> Set[str]:
    """Every name a module defines: functions, classes, assignments, attributes, arguments."""
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


TREES = {module: ast.parse(path.read_text()) for module, path in MODULES.items()}
DEFINED = {module: _defined_names(tree) for module, tree in TREES.items()}
VERLPROF_PRIVATE = {name for names in DEFINED.values() for name in names if _private(name)}


def private_reach(module: str) -> List[str]:
    """Where ``module`` uses a private name that another verlprof module defines: imported
    (``from m import _x``) or read off an object that is not its own (``other._x``)."""
    own = DEFINED[module]
    found = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verlprof"):
            found += [f"line {node.lineno}: from {node.module} import {a.name}"
                      for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) \
                and node.attr in VERLPROF_PRIVATE and node.attr not in own \
                and node.attr not in PRIVATE_REACH_ALLOWED:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_uses_another_modules_private_names():
    """A module's ``_name`` is its own: another module that needs it gets a public name (the
    controller shares its ranks through ``RunContext``, not its attributes)."""
    reach = sorted(f"{module} {where}" for module in MODULES for where in private_reach(module))
    assert reach == []


def _drawn_layers() -> Dict[str, int]:
    """The layer of each stage in docs/architecture.md's picture (``layer N │ a · b``)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    layers: Dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("layer ") and "│" in line:
            number, names = line.split("│", 1)
            for name in names.split("(")[0].split("·"):
                layers[name.split()[0]] = int(number.split()[1])
    return layers


def test_the_drawn_layers_match_the_imports():
    """The picture is the code's: every stage drawn once, every import between stages points
    to a lower layer (no arrow back up, so no circle between stages)."""
    layers = _drawn_layers()
    assert set(layers) == set(BELOW)
    up = sorted({f"{_stage(m)} -> {_stage(_known(n, set(MODULES)))}"
                 for m, p in MODULES.items() for n, _, _ in _imports(p)
                 if _stage(_known(n, set(MODULES))) != _stage(m)
                 and layers[_stage(_known(n, set(MODULES)))] >= layers[_stage(m)]})
    assert up == []
