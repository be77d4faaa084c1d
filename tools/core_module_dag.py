#!/usr/bin/env python3
"""Prints the dependency graph of pteron-core's modules (one node per file, from the
`crate::…` paths in non-comment code) and fails if it has a cycle."""
import pathlib, re, sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "crates/pteron-core/src"

def module_of(path):
    rel = path.relative_to(SRC).with_suffix("")
    parts = [p for p in rel.parts if p not in ("mod", "lib")]
    return "::".join(parts) or "lib"

files = {module_of(p): p for p in SRC.rglob("*.rs")}

def resolve(segments):
    """The longest module prefix of a `crate::` path."""
    for n in range(len(segments), 0, -1):
        name = "::".join(segments[:n])
        if name in files:
            return name
    return None

def deps(mod, path):
    out = set()
    code = "\n".join(l.split("//")[0] for l in path.read_text().splitlines())
    # Expand one level of braces: crate::load::{a, b} -> crate::load::a, crate::load::b.
    for m in re.finditer(r"(crate|super)((?:::\w+)*)::\{([^{}]*)\}", code):
        for item in m.group(3).split(","):
            item = item.strip()
            if item:
                code += f"\n{m.group(1)}{m.group(2)}::{item}"
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", code):
        segs = m.group(2).strip(":").split("::")
        if m.group(1) == "super":
            segs = mod.split("::")[:-1] + segs
        target = resolve(segs)
        if target and target != mod and target != "lib":
            out.add(target)
    return out

graph = {m: deps(m, p) for m, p in files.items() if m != "lib"}
for m in graph:
    graph[m] = {d for d in graph[m] if not d.startswith(m + "::")}  # a module may use its children

# Topological order (leaves first); anything left over is on a cycle.
order, done = [], set()
while len(done) < len(graph):
    ready = sorted(m for m in graph if m not in done and graph[m] <= done)
    if not ready:
        left = {m: sorted(graph[m] - done) for m in graph if m not in done}
        print("cycle among:", left)
        sys.exit(1)
    order += ready
    done |= set(ready)
for m in order:
    print(f"{m:24} -> {', '.join(sorted(graph[m])) or '(none)'}")
print("acyclic")
