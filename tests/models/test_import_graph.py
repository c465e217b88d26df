"""The model package's import graph: no cycles, and no domain imports another domain's modules.

Each domain (``vision``, ``nlp``, ...) may import its own modules and ``models/common/``;
``common`` imports no domain. The graph is read from the source with :mod:`ast` (nothing is
imported), counting every import statement: module level, inside functions and under
``if TYPE_CHECKING:`` alike, since each one couples the two files.
"""

from __future__ import annotations

import ast
from pathlib import Path

import torchgauge.models

PACKAGE = "torchgauge.models"
MODELS_DIR = Path(torchgauge.models.__file__).resolve().parent
SHARED = "common"  # the one package every domain may import


def module_name(path: Path) -> str:
    """Dotted name of a file under MODELS_DIR (a package's ``__init__.py`` is the package)."""
    parts = list(path.relative_to(MODELS_DIR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imported_modules(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of this package that the file at ``path`` (module ``name``) imports."""
    package = name if _is_package(path) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from pkg import sub` imports the submodule `pkg.sub`; `from mod import obj` only `mod`
            targets = [origin] + [f"{origin}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, for every ``.py`` file under ``models/``."""
    files = {module_name(p): p for p in sorted(MODELS_DIR.rglob("*.py"))}
    known = set(files)
    return {name: imported_modules(path, name, known) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as a list of modules (first repeated at the end), or ``[]`` if none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def domain_of(module: str) -> str:
    """``torchgauge.models.speech.rnnt`` -> ``speech``; the package root itself -> ``""``."""
    rest = module[len(PACKAGE) + 1 :]
    return rest.split(".", 1)[0] if rest else ""


def cross_domain_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a domain reaches into another domain's modules."""
    return sorted(
        (src, dst)
        for src, dsts in graph.items()
        for dst in dsts
        if domain_of(src) and domain_of(dst) not in (domain_of(src), SHARED)
    )


def test_graph_covers_the_domains_and_common():
    graph = import_graph()
    assert {domain_of(m) for m in graph} >= {"vision", "nlp", "speech", "recommendation", "rl", "other", SHARED}
    # the reader sees relative, absolute and `from . import sub` imports alike
    assert f"{PACKAGE}.vision.detection.rcnn_heads" in graph[f"{PACKAGE}.vision.detection.rcnn"]
    assert f"{PACKAGE}.vision.detection" in graph[f"{PACKAGE}.vision"]


def test_no_import_cycle_between_model_modules():
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(m[len(PACKAGE) + 1 :] for m in cycle)


def test_domains_import_only_themselves_and_common():
    bad = cross_domain_imports(import_graph())
    assert not bad, "cross-domain imports (move the shared piece to models/common/):\n" + "\n".join(
        f"  {src} imports {dst}" for src, dst in bad
    )


def test_find_cycle_and_cross_domain_on_a_toy_graph():
    a, b, c = (f"{PACKAGE}.vision.{x}" for x in "abc")
    assert find_cycle({a: {b}, b: {c}, c: set()}) == []
    assert find_cycle({a: {b}, b: {c}, c: {a}}) == [a, b, c, a]
    shared, speech = f"{PACKAGE}.common.padding", f"{PACKAGE}.speech.rnnt"
    assert cross_domain_imports({speech: {shared}, a: {b}}) == []
    assert cross_domain_imports({speech: {a}}) == [(speech, a)]
