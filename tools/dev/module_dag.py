#!/usr/bin/env python3
"""Prints the dependency graph of each crate's modules (one node per file, from the
`crate::…` and `super::…` paths in code, not in comments or string literals; `super::` inside
an inline `mod … { }` names the module of its file) and fails if any has a cycle.

Usage: tools/dev/module_dag.py [--quiet] [CRATE_DIR ...]   (default: every crate in crates/)
A module may use its own children (a `mod.rs` and the files below it); any other circle of
imports is reported."""
import pathlib, re, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent

def module_of(SRC, path):
    rel = path.relative_to(SRC).with_suffix("")
    parts = [p for p in rel.parts if p not in ("mod", "lib")]
    return "::".join(parts) or "lib"

# Comments, string literals (plain, byte, raw) and char literals; `'a` lifetimes are none of them.
NOT_CODE = re.compile(
    r"//[^\n]*|/\*.*?\*/"
    r'|(?<!\w)b?r(#*)".*?"\1|"(?:\\.|[^"\\])*"'
    r"|'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'",
    re.S,
)


def strip_comments_and_literals(text):
    """`text` with comments, string literals and char literals blanked out (newlines kept), so
    that neither the paths nor the braces in them count."""
    return NOT_CODE.sub(lambda m: " " + "\n" * m.group(0).count("\n"), text)


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
        code = strip_comments_and_literals(path.read_text())
        # Inline modules (`mod tests { … }`): where each body starts and ends, so that `super::`
        # inside one names the file's own module rather than its parent.
        inline, stack, depth = [], [], 0
        for m in re.finditer(r"\bmod\s+(\w+)\s*\{|[{}]", code):
            if m.group(0) == "{" or m.group(1):
                depth += 1
                if m.group(1):
                    stack.append((m.group(1), m.end(), depth))
            else:
                if stack and stack[-1][2] == depth:
                    name, start, _ = stack.pop()
                    inline.append((start, m.start(), len(stack), name))
                depth -= 1

        def scope(pos):
            """The module path at `pos`: the file's module, then any inline modules around it."""
            around = sorted((lvl, name) for a, b, lvl, name in inline if a <= pos < b)
            return mod.split("::") + [name for _, name in around]

        # Expand one level of braces: crate::load::{a, b} -> crate::load::a, crate::load::b.
        paths = [(m.group(1), m.group(2), m.start()) for m in
                 re.finditer(r"\b(crate|super)((?:::\w+)+)", code)]
        for m in re.finditer(r"\b(crate|super)((?:::\w+)*)::\{([^{}]*)\}", code):
            for item in m.group(3).split(","):
                item = item.strip()
                if re.match(r"\w", item):
                    paths.append((m.group(1), f"{m.group(2)}::{item}", m.start()))
        for root, rest, pos in paths:
            segs = re.findall(r"\w+", rest)
            if root == "super":
                # A file `a/b.rs` is module a::b, whose super is a; `a/mod.rs` is module a; an
                # inline `mod t { … }` in either is one level further down.
                base = scope(pos)[:-1]
                while segs[:1] == ["super"]:
                    base, segs = base[:-1], segs[1:]
                segs = base + segs
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
