#!/usr/bin/env python3
"""Prints the dependency graph of each crate's modules (one node per file, from the
`crate::…` and `super::…` paths in non-comment code) and fails if any has a cycle.

Usage: tools/dev/module_dag.py [--quiet] [CRATE_DIR ...]   (default: every crate in crates/)
A module may use its own children (a `mod.rs` and the files below it); any other circle of
imports is reported."""
import pathlib, re, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent

def module_of(SRC, path):
    rel = path.relative_to(SRC).with_suffix("")
    parts = [p for p in rel.parts if p not in ("mod", "lib")]
    return "::".join(parts) or "lib"

def find_cycle(graph, done):
    """One cycle among the modules not in `done` (each has an edge to another such module)."""
    path, seen = [], {}
    m = next(m for m in sorted(graph) if m not in done)
    while m not in seen:
        seen[m] = len(path)
        path.append(m)
        m = sorted(graph[m] - done)[0]
    return path[seen[m]:] + [m]


def check(src, quiet):
    """Prints `src`'s module graph in dependency order; False if it has a cycle."""
    files = {module_of(src, p): p for p in src.rglob("*.rs")}

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
                base = mod.split("::")
                # A file `a/b.rs` is module a::b, whose super is a; `a/mod.rs` is module a.
                segs = base[:-1] + segs
            target = resolve(segs)
            if target and target != mod and target != "lib":
                out.add(target)
        return out

    graph = {m: deps(m, p) for m, p in files.items() if m != "lib"}
    for m in graph:
        graph[m] = {d for d in graph[m] if not d.startswith(m + "::")}  # its own children

    # Topological order (leaves first); anything left over is on a cycle.
    order, done = [], set()
    while len(done) < len(graph):
        ready = sorted(m for m in graph if m not in done and graph[m] <= done)
        if not ready:
            print(f"{src}: import cycle: {' -> '.join(find_cycle(graph, done))}")
            return False
        order += ready
        done |= set(ready)
    if not quiet:
        print(f"== {src.parent.name}")
        for m in order:
            print(f"{m:28} -> {', '.join(sorted(graph[m])) or '(none)'}")
    return True


args = sys.argv[1:]
quiet = "--quiet" in args
dirs = [pathlib.Path(a) for a in args if a != "--quiet"] or sorted((ROOT / "crates").iterdir())
ok = all([check(d / "src", quiet) for d in dirs if (d / "src").is_dir()])
print("acyclic" if ok else "import cycles found")
sys.exit(0 if ok else 1)
