#!/usr/bin/env python3
"""test_layers.py: the folders of src/ are layers, and a layer includes only layers below it.

The order, lowest first (docs/architecture.md, "Layers"):

    lib < hash < dist < conf < placement < proto < state < stats < proxy < control < main

src/ holds only main.c at its top; every other source file sits in one layer's folder, and
the offline tools (tools/) may include any layer. Each `#include "..."` of a project header
is read from every .c/.h file under src/; an include of a header from a higher layer is a
failure that names the file, the line and both layers. Same-layer includes are free.

Exit 0 when the order holds, 1 with the offending lines otherwise; the last line is the
usual "N passed, N failed".
"""

import os
import re
import sys

ORDER = ["lib", "hash", "dist", "conf", "placement", "proto", "state", "stats",
         "proxy", "control", "main"]
RANK = {name: i for i, name in enumerate(ORDER)}


HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))
SRC = os.path.join(TOP, "src")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    """Layer of a path relative to src/ (None: not a layer's file)."""
    if "/" not in rel:
        return "main" if rel in ("main.c", "main.h") else None
    top = rel.split("/", 1)[0]
    return top if top in RANK else None


def resolve(rel_file, inc):
    """The header an include names, relative to src/ (the build puts src/ on the
    include path; a name is first looked up beside the including file)."""
    beside = os.path.normpath(os.path.join(os.path.dirname(rel_file), inc))
    if os.path.isfile(os.path.join(SRC, beside)):
        return beside
    if os.path.isfile(os.path.join(SRC, inc)):
        return os.path.normpath(inc)
    return None


def main():
    failures = []
    checked = 0
    for d, _, files in os.walk(SRC):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            rel = os.path.relpath(os.path.join(d, f), SRC)
            lay = layer_of(rel)
            if lay is None:
                failures.append("src/%s: not in a layer's folder (src/ holds only main.c; "
                                "the layers are %s)" % (rel, ", ".join(ORDER[:-1])))
                continue
            with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
                for lineno, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1) == "config.h":
                        continue
                    target = resolve(rel, m.group(1))
                    if target is None:
                        continue        # a generated header (src/control/admin_page.h)
                    tlay = layer_of(target)
                    checked += 1
                    if tlay is None or RANK[tlay] <= RANK[lay]:
                        continue
                    failures.append("src/%s:%d: includes %s: layer %s may not use layer %s "
                                    "(order: %s)" % (rel, lineno, target, lay, tlay,
                                                     " < ".join(ORDER)))
    for line in failures:
        print(line)
    print("test_layers: %d includes read" % checked)
    print("%d passed, %d failed" % (0 if failures else 1, 1 if failures else 0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
