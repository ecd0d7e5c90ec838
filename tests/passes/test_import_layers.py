"""The import graph, read from the source (no imports run): module-level imports
form no cycle, and ``runtime/`` -- what a launch needs at run time -- imports no
compiler module, at module level or inside a function.

Function-local imports (``from tfjit.x import y`` inside a function) form none
either: a new cycle fails the test (2026-12-03: the graph package's marking/
clustering/functions/fallback cycle and api.function <-> api.gradient were
removed; the last, ``config.set_jit`` -> api.autojit -> config, went when the
flags moved to ``settings``, which tfjit's modules read, and ``config`` became
the public face that nothing inside tfjit imports)."""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILER = ("tfjit.pipeline", "tfjit.lower", "tfjit.passes", "tfjit.codegen", "tfjit.graph",
            "tfjit.ir", "tfjit.aot", "tfjit.api")


def _modules() -> dict:
    out = {}
    for d, _, files in os.walk(os.path.join(ROOT, "tfjit")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: str, mods: dict, local: bool) -> set:
    tree = ast.parse(open(path).read())
    found = set()
    for n in (ast.walk(tree) if local else tree.body):
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            found |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
        elif isinstance(n, ast.Import):
            found |= {a.name for a in n.names}
    return {m for m in found if m in mods}


def _graph(local: bool) -> dict:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        # importing a.b.c runs package a.b first: that edge is the package's own business
        graph[name] = {m for m in _imports(path, mods, local)
                       if m != name and not name.startswith(m + ".")}
    return graph


def _cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_module_level_imports_form_no_cycle():
    assert _cycles(_graph(local=False)) == []


def test_function_local_imports_form_no_cycle():
    assert _cycles(_graph(local=True)) == []


def test_no_tfjit_module_imports_the_public_config():
    graph = _graph(local=True)
    assert "tfjit.api.autojit" in graph["tfjit.config"]          # set_jit reaches the API
    users = sorted(m for m, deps in graph.items() if "tfjit.config" in deps)
    assert users == [], users     # (tfjit/__init__ loads it lazily, by name)


def test_the_runtime_imports_no_compiler_module():
    graph = _graph(local=True)
    bad = {(m, dep) for m, deps in graph.items() if m.startswith("tfjit.runtime")
           for dep in deps if dep.startswith(COMPILER)}
    assert not bad, sorted(bad)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
