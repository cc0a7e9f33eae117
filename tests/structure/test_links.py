#!/usr/bin/env python3
"""test_links.py: the link graph of the build goes down the layers, with no cycle between folders.

Where test_layers.py reads the #include lines, this reads what the objects of the build
really use: `nm` over every object under $top_builddir/src gives, for each object, the
symbols it defines and the ones it uses, hence an edge from each object to each object
whose symbols it uses. It fails when

  - an object uses a symbol of a higher layer (the worker thread calling control's code,
    say: workers reach control only through the callbacks of src/proxy/hub.h);
  - two folders use each other;
  - a cycle of objects (a strongly connected set) is larger than MAX_CYCLE: one
    direction inside a layer too, callbacks on the way back.

The cycles found are printed, largest first. Exit 0 when all holds, 77 when the build
has no objects to read (or nm is missing), 1 otherwise.
"""

import collections
import os
import shutil
import subprocess
import sys

ORDER = ["lib", "hash", "dist", "conf", "placement", "proto", "state", "stats",
         "proxy", "control", "main"]
RANK = {name: i for i, name in enumerate(ORDER)}

# The largest strongly connected set of objects allowed: every layer calls one way, with
# callbacks on the way back; what remains is src/proxy's server <-> sconn, one object and
# its connections (docs/architecture.md, "Where the house stands").
MAX_CYCLE = 2

HERE = os.path.dirname(os.path.abspath(__file__))
TOP_SRCDIR = os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))
TOP_BUILDDIR = os.environ.get("top_builddir") or os.path.join(TOP_SRCDIR, "build", "release")
SRC = os.path.join(TOP_BUILDDIR, "src")


def object_name(path):
    """src/proxy/client.o -> proxy/client; src/main.o -> main."""
    rel = os.path.relpath(path, SRC)[:-2]
    d, base = os.path.split(rel)
    if "-" in base:             # per-target object names (prog-file.o)
        base = base.split("-", 1)[1]
    return d + "/" + base if d else base


def layer(name):
    return name.split("/", 1)[0] if "/" in name else "main"


def read_graph():
    defs, uses = {}, collections.defaultdict(set)
    for d, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith(".o"):
                continue
            name = object_name(os.path.join(d, f))
            if not os.path.exists(os.path.join(TOP_SRCDIR, "src", name + ".c")):
                continue        # left in a build directory by a source since moved or removed
            out = subprocess.run(["nm", os.path.join(d, f)], capture_output=True,
                                 text=True, check=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in "TDBRCG":
                    defs[parts[2]] = name
                elif len(parts) == 2 and parts[0] == "U":
                    uses[name].add(parts[1])
    edges = collections.defaultdict(dict)      # a -> {b: a symbol of b that a uses}
    for a, syms in uses.items():
        for s in sorted(syms):
            b = defs.get(s)
            if b is not None and b != a:
                edges[a].setdefault(b, s)
    return defs, edges


def cycles(edges):
    """Strongly connected sets of more than one object (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = set(edges) | {b for a in edges for b in edges[a]}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
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
    return sorted(out, key=len, reverse=True)


def main():
    if shutil.which("nm") is None or not os.path.isdir(SRC):
        print("test_links: no nm or no build in %s" % TOP_BUILDDIR)
        print("0 passed, 0 failed, 1 skipped")
        return 77
    defs, edges = read_graph()
    if not defs:
        print("test_links: no objects under %s" % SRC)
        print("0 passed, 0 failed, 1 skipped")
        return 77
    failures = []
    folders = collections.defaultdict(dict)
    for a in sorted(edges):
        for b, sym in sorted(edges[a].items()):
            la, lb = layer(a), layer(b)
            if la not in RANK or lb not in RANK:
                continue
            if RANK[lb] > RANK[la]:
                failures.append("%s uses %s of %s: layer %s may not use layer %s"
                                % (a, sym, b, la, lb))
            if la != lb:
                folders[la].setdefault(lb, (a, b, sym))
    for la in sorted(folders):
        for lb, (a, b, sym) in sorted(folders[la].items()):
            if la < lb and la in folders.get(lb, {}):
                a2, b2, sym2 = folders[lb][la]
                failures.append("folders %s and %s use each other: %s uses %s of %s, %s uses "
                                "%s of %s" % (la, lb, a, sym, b, a2, sym2, b2))
    found = cycles(edges)
    for comp in found:
        print("cycle of %d objects: %s" % (len(comp), " ".join(comp)))
    if found and len(found[0]) > MAX_CYCLE:
        failures.append("a cycle of %d objects (at most %d)" % (len(found[0]), MAX_CYCLE))
    for line in failures:
        print(line)
    print("test_links: %d objects, %d edges" % (len(set(defs.values())),
                                                sum(len(v) for v in edges.values())))
    print("%d passed, %d failed" % (0 if failures else 1, 1 if failures else 0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
