#!/usr/bin/env python3
"""The import graph of src/: which file's code names which other file's module (#27).

Reads every `crate::a::b` path in src/**/*.rs (in `use` lines and in code; comments and doc
comments are skipped), resolves each to the file that defines the longest matching module
(`crate::loops::gate::Gate` -> src/loops/gate.rs; `crate::loops::Cancel` -> src/loops/mod.rs),
and prints the strongly connected components of more than one file: the import circles.
A folder's `mod.rs` naming its own files (re-exports, declarations) is not an edge, so a
folder may gather its files while they use its shared items.

Usage: scripts/import-graph.py [--check] [--dot]
  --check  exit 1 when any circle exists (CI)
  --dot    print the whole graph in Graphviz form instead
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_BLOCK = re.compile(r"\buse\s+(crate|super|self)::\{([^;]*)\};", re.S)


def module_of(f: Path):
    rel = f.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def code_lines(text: str):
    """The file without comments (line comments, doc comments, block comments)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        s = line.split("//", 1)[0] if "//" in line and '"' not in line.split("//", 1)[0] else line
        if s.lstrip().startswith("//"):
            continue
        out.append(s)
    return "\n".join(out)


def paths_in(text: str, me, is_mod: bool):
    """Every module path named, absolute: `crate::a::b`, `super::x`, `self::x`, and each
    item of `use crate::{a::b, c}`. `me` is the file's module; in a mod.rs `self` is it."""
    def absolute(head, rest):
        if head == "crate":
            return tuple(rest)
        base = list(me)  # the module `self` names in this file (a mod.rs is its folder's)
        if head == "super":
            base = base[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        return tuple(base) + tuple(rest)

    for m in USE_BLOCK.finditer(text):
        for item in re.split(r",(?![^{]*\})", m.group(2)):
            item = item.strip()
            head = re.match(r"([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)", item)
            if head:
                yield absolute(m.group(1), head.group(1).split("::"))
    for m in PATH.finditer(text):
        yield absolute(m.group(1), m.group(2).strip(":").split("::"))


def main():
    files = sorted(p for p in SRC.rglob("*.rs") if p.name not in ("main.rs",) or p.parent != SRC)
    files = [p for p in files if not (p.parent == SRC and p.name == "main.rs")]
    modules = {module_of(f): f for f in files}
    graph = defaultdict(set)
    for f in files:
        me = module_of(f)
        text = code_lines(f.read_text())
        # Test modules may reach anywhere; they are not part of the layering.
        text = text.split("#[cfg(test)]", 1)[0]
        for p in paths_in(text, me, f.name in ("mod.rs", "lib.rs")):
            target = None
            for n in range(len(p), 0, -1):
                if p[:n] in modules:
                    target = p[:n]
                    break
            if target is None or target == () or target == me:
                continue
            # A folder's mod.rs gathering (re-exporting, declaring) its own files is not an
            # import; a file naming its folder's shared items is.
            if f.name == "mod.rs" and target[: len(me)] == me:
                continue
            # A child naming its own folder's mod.rs (its parent) for shared items is allowed
            # only when the parent does not name it back; the circle check sees both.
            graph[me].add(target)
    if "--dot" in sys.argv:
        print("digraph slm {")
        for a in sorted(graph):
            for b in sorted(graph[a]):
                print(f'  "{"/".join(a) or "lib"}" -> "{"/".join(b) or "lib"}";')
        print("}")
        return 0
    # Tarjan's strongly connected components.
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    edges = sum(len(v) for v in graph.values())
    name = lambda m: "src/" + "/".join(m) if m else "src/lib.rs"
    print(f"import graph: {len(modules)} files, {edges} edges, {len(sccs)} circle(s)")
    for comp in sccs:
        members = set(comp)
        print(f"  circle of {len(comp)}: " + ", ".join(name(m) for m in comp))
        for a in comp:
            for b in sorted(graph[a] & members):
                print(f"    {name(a)} -> {name(b)}")
    return 1 if sccs and "--check" in sys.argv else 0


if __name__ == "__main__":
    sys.exit(main())
