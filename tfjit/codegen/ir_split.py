"""Splits one cluster's LLVM IR text into modules that LLVM can compile in parallel.

Why: LLVM's O3 pipeline and code generation are half or more of a first call
(``tools/train_bench.py --compile-profile``), they run one function after
another, and a cluster's kernels are independent functions.  XLA:CPU splits its
module for parallel code generation for the same reason.  llvmlite serialises
every call into LLVM behind one lock, so threads cannot overlap them; separate
compile-server processes can (``llvm_cpu.compile_ir``).  Their object files are
merged into one relocatable object (``runtime/loader.combine``), so everything
after (the persistent cache, loading) sees one object as before.

How: the text is llvmlite's printing of an ``ir.Module``, which has a fixed
shape: a header, then one line per global variable or declaration and one
``define ... {`` ... ``}`` block per function definition, then metadata.  A
part keeps the header, every global variable, declaration and metadata line
(what a part does not use, LLVM's global DCE drops), and a set of function
definitions closed under calls: a function is in the same part as every
function it names (a kernel and its ``.body``; kernels sharing one body), so no
part refers to a definition in another.  Internal constants are duplicated,
which is safe because they are internal; a module with an externally visible
global variable definition, or a definition with any linkage besides the
default and ``internal``/``private``, is not split (None), since duplicating
or hiding it would change what links.  Parts are balanced by text size,
largest groups first.
"""
from __future__ import annotations

import re

_NAME = r'@("(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)'
_DEFINE = re.compile(r"define\s+(.*?)" + _NAME + r"\(")
_REFERENCE = re.compile(_NAME)
_GLOBAL = re.compile(_NAME + r"\s*=\s*(.*)")
# Linkage words that may stand before a definition's return type (LLVM LangRef).
_LINKAGES = {"private", "internal", "available_externally", "linkonce", "weak", "common",
             "appending", "extern_weak", "linkonce_odr", "weak_odr", "external"}
_SPLITTABLE = {"", "internal", "private"}


def split(text: str, parts: int, min_part_bytes: int) -> list | None:
    """``text`` as up to ``parts`` module texts of at least about ``min_part_bytes`` of
    function definitions each, or None when it is not worth splitting (too small, one
    group of functions) or not safe to (see the module docstring)."""
    parts = min(parts, len(text) // max(1, min_part_bytes))
    if parts < 2:
        return None
    parsed = _parse(text)
    if parsed is None:
        return None
    shared, functions = parsed
    groups = _groups(functions)
    if len(groups) < 2:
        return None
    bins = [[] for _ in range(min(parts, len(groups)))]
    sizes = [0] * len(bins)
    for group in sorted(groups, key=lambda g: -sum(len(functions[n]) for n in g)):
        k = sizes.index(min(sizes))
        bins[k] += group
        sizes[k] += sum(len(functions[n]) for n in group)
    order = {n: k for k, n in enumerate(functions)}    # each part keeps the module's order
    return ["\n".join(shared["head"] + shared["globals"]
                      + [functions[n] for n in sorted(names, key=order.get)] + shared["tail"])
            for names in bins]


def _parse(text: str):
    """({"head", "globals", "tail"} line lists, {function name: definition text}), or
    None where the module has something a split would change (see the docstring)."""
    shared = {"head": [], "globals": [], "tail": []}
    functions = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define"):
            m = _DEFINE.match(line)
            if m is None or _linkage(m.group(1)) not in _SPLITTABLE:
                return None
            end = lines.index("}", i)
            functions[m.group(2)] = "\n".join(lines[i:end + 1])
            i = end + 1
            continue
        if line.startswith("@"):
            m = _GLOBAL.match(line)
            if m is None or not re.match(r"(internal|private|external)\b", m.group(2)):
                return None          # an exported global variable is defined once
            shared["globals"].append(line)
        elif line.startswith("!"):
            shared["tail"].append(line)
        elif line.startswith("declare") or line.startswith("%"):
            shared["globals"].append(line)
        elif line.startswith(";") or line.startswith("target") or not line.strip():
            shared["head"].append(line)
        else:
            return None              # a construct llvmlite's printer is not known to make
        i += 1
    return shared, functions


def _linkage(prefix: str) -> str:
    words = [w for w in prefix.split() if w in _LINKAGES]
    return words[0] if words else ""


def _groups(functions: dict) -> list:
    """The definitions in call-closed groups (union-find over the names they mention)."""
    parent = {n: n for n in functions}

    def root(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n
    for name, body in functions.items():
        for other in set(_REFERENCE.findall(body.split("\n", 1)[-1])):
            if other in parent and other != name:
                parent[root(other)] = root(name)
    groups = {}
    for n in functions:
        groups.setdefault(root(n), []).append(n)
    return list(groups.values())
