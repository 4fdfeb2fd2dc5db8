"""The modules of rankrepro import each other without a cycle; rankrepro.metrics keeps its layers.

Every import counts, including those inside functions (a lazy ``from .api import compute`` hides a
circle, it does not remove it): each module is parsed with ``ast`` and every ``import`` /
``from ... import`` statement anywhere in it that names a module of the package is an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rankrepro
import rankrepro.metrics

PACKAGE = "rankrepro"
ROOT = Path(rankrepro.__file__).parent
METRICS = "rankrepro.metrics"


def _modules(root: Path, package: str) -> dict[str, Path]:
    """{dotted name: file} for the package and its submodules (subpackages included)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """{module: modules of ``package`` it imports} (the top package itself excluded as a target:
    ``from . import x`` is an edge to ``x``)."""
    mods = _modules(root, package)
    graph: dict[str, set[str]] = {m: set() for m in mods}

    def add(src: str, target: str) -> None:
        # the deepest known module that ``target`` names (``pkg.api.compute`` -> ``pkg.api``)
        parts = target.split(".")
        while parts and ".".join(parts) not in mods:
            parts.pop()
        dst = ".".join(parts)
        if dst and dst != package and dst != src:
            graph[src].add(dst)

    for mod, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(mod, alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_package, node.level, node.module) if node.level else (node.module or "")
                for alias in node.names:  # ``from . import x`` / ``from pkg import x``: x may be a module
                    add(mod, f"{base}.{alias.name}")
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import cycle per group of modules that import each other (strongly connected
    component), each as ``[a, b, ..., a]``; empty when there is none."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [find_cycle({m: graph[m] & set(group) for m in group}) for group in sorted(groups)]


def test_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 100 and f"{METRICS}.api" in graph and "rankrepro.cli" in graph
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in rankrepro:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_metrics_layers():
    """Protocols sit on top of the core; the core and the definitions never import upwards."""
    g = import_graph(Path(rankrepro.metrics.__file__).parent, METRICS)
    m = {name.rsplit(".", 1)[-1]: deps for name, deps in g.items() if name != METRICS}
    protocols = {name for name in g if name.startswith(f"{METRICS}.protocols")}  # the package and its modules
    for scoring in ("plain", "vehicleid", "dyml", "gldv2", "face"):
        assert f"{METRICS}.core" in g[f"{METRICS}.protocols.{scoring}"], scoring
    for low in ("names", "core", "binary", "retrieval", "ranking", "inputs", "chunks", "workers", "full_list",
                "counting", "hierarchical", "clustering", "cpu_kernels", "knn"):
        assert not m[low] & {f"{METRICS}.api", *protocols}, low
    assert f"{METRICS}.retrieval" not in m["core"]
    assert not m["names"]  # the metric-name grammar needs nothing else of the package


@pytest.mark.parametrize("source, cycle", [
    # a function-level import closes the circle just as a top-level one does
    ({"a.py": "from .b import f\n", "b.py": "def f():\n    from .a import g\n"}, ["a", "b", "a"]),
    ({"a.py": "from . import b\n", "b.py": "import rankrepro.a\n"}, ["a", "b", "a"]),
    ({"a.py": "from .b import f\n", "b.py": "import numpy\nfrom . import c\n", "c.py": "x = 1\n"}, None),
])
def test_cycle_finder(tmp_path, source, cycle):
    (tmp_path / "__init__.py").write_text("from .a import *\n")
    for name, text in source.items():
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    found = find_cycle(graph)
    if cycle is None:
        assert found is None and find_cycles(graph) == []
    else:
        assert [n.rsplit(".", 1)[-1] for n in found] == cycle
        assert [[n.rsplit(".", 1)[-1] for n in c] for c in find_cycles(graph)] == [cycle]


_NO_TORCH = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'torch', 'numpy', 'numba', 'faiss'}:
            raise ImportError(name + ' imported')
sys.meta_path.insert(0, _Block())
from rankrepro.metrics.names import parse_metric
assert parse_metric('R@5').k == 5
"""


def test_metric_names_import_without_torch():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", _NO_TORCH], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_lazy_exports():
    import importlib
    import subprocess
    import sys
    import types

    import rankrepro.metrics as pkg

    # the submodule knn imported before the function is asked for (a fresh process)
    first = "import rankrepro.metrics.knn\nfrom rankrepro.metrics import knn\nassert knn.__name__ == 'knn' and callable(knn)"
    res = subprocess.run([sys.executable, "-c", first], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    importlib.import_module("rankrepro.metrics.knn")
    assert isinstance(pkg.knn, types.FunctionType) and pkg.knn.__module__ == "rankrepro.metrics.knn"
    assert pkg.compute.__module__ == "rankrepro.metrics.api"
    assert pkg.PROTOCOLS[0] == "same-set" and callable(pkg.retrieval_metrics) and callable(pkg.parse_metric)
    assert set(pkg.__all__) <= set(dir(pkg))
    with pytest.raises(AttributeError):
        pkg.nope  # noqa: B018


#: folders of the package that must not import the named others (every import counts, lazy ones too):
#: the planner and the trainer share only the torch-free vocabulary one floor down (rankrepro.record), and the
#: models know nothing of how they are trained
FORBIDDEN = {"plan": {"engine"}, "engine": {"plan"}, "models": {"engine", "plan"}, "record": {"engine", "plan"}}


def _folder(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def folder_violations(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for each import of a module of a folder into one it must not import (:data:`FORBIDDEN`)."""
    return sorted(f"{src} -> {dst}" for src, deps in graph.items() for dst in deps
                  if _folder(dst) in FORBIDDEN.get(_folder(src), ()))


def test_folder_layers():
    assert folder_violations(import_graph()) == []


def test_folder_layers_finds_a_lazy_upward_import(tmp_path):
    for folder in ("plan", "engine"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "engine" / "loop.py").write_text("def f():\n    from rankrepro.plan import cost\n")
    (tmp_path / "plan" / "cost.py").write_text("x = 1\n")
    assert folder_violations(import_graph(tmp_path)) == ["rankrepro.engine.loop -> rankrepro.plan.cost"]


_NO_TORCH_RECORD = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'torch', 'numpy', 'torchvision'}:
            raise ImportError(name + ' imported')
sys.meta_path.insert(0, _Block())
import rankrepro.record.selection, rankrepro.record.runtime, rankrepro.record.groups, rankrepro.record.tasks
"""


def test_the_record_vocabulary_imports_without_torch():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", _NO_TORCH_RECORD], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
