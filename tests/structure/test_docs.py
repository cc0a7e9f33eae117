#!/usr/bin/env python3
"""test_docs.py: every configuration key the parser accepts is documented.

The keys are read from the parser's own tables (src/conf/conf_schema.c: the pool and
the `ringleader:` section; src/conf/conf_sections.c: a server's mapping form, `shadow:`,
`tls:` / `server_tls:`, and the keys of `routes:` and `shadow:` compared by name), so a key added to a table without its documentation fails here.
Each must appear in docs/configuration.md as `key` (in backquotes, as the reference
tables write keys) and in ringleader.yml(5) (man/ringleader.yml.5) as a word. There is no
list of exemptions: a key left undocumented on purpose is a defect of the docs.

(That the relative links of the installed documentation resolve in the installed tree is
checked by tests/integration/test_install.py, on a real `make install`.)

Exit 0 when all holds, 1 otherwise.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP_SRCDIR = os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))

# (file, table): the tables of struct conf_command rows whose names are YAML keys.
TABLES = [("src/conf/conf_schema.c", "conf_pool_commands"),
          ("src/conf/conf_schema.c", "conf_global_commands"),
          ("src/conf/conf_sections.c", "conf_server_commands"),
          ("src/conf/conf_sections.c", "conf__shadow_keys"),
          ("src/conf/conf_sections.c", "conf_tls_commands"),
          ("src/conf/conf_sentinel.c", "conf_sentinel_commands"),
          ("src/conf/conf_sections.c", "conf__lease_keys")]


def table_keys(path, table):
    """The first string of every row of `static const struct conf_command TABLE[] = {...};`."""
    text = open(os.path.join(TOP_SRCDIR, path)).read()
    m = re.search(r"struct conf_command\s+%s\s*\[\]\s*=\s*\{(.*?)\n\};" % re.escape(table),
                  text, re.S)
    if m is None:
        return None
    return re.findall(r'^\s*\{\s*"([a-z_]+)"', m.group(1), re.M)


def main():
    failures, keys = [], []
    for path, table in TABLES:
        found = table_keys(path, table)
        if not found:
            failures.append("no table %s in %s (renamed? update TABLES)" % (table, path))
            continue
        keys += [(k, table) for k in found]
    # keys of a section read without a table (routes: prefix, pool; shadow: pool, fraction)
    sections = open(os.path.join(TOP_SRCDIR, "src/conf/conf_sections.c")).read()
    keys += [(k, "strcmp(ks, ...) in conf_sections.c")
             for k in sorted(set(re.findall(r'strcmp\(ks, "([a-z_]+)"\)', sections)))]
    conf_md = open(os.path.join(TOP_SRCDIR, "docs", "configuration.md")).read()
    man = open(os.path.join(TOP_SRCDIR, "man", "ringleader.yml.5")).read()
    for key, table in keys:
        if "`%s`" % key not in conf_md and "`%s:" % key not in conf_md:
            failures.append("%s (%s): not in docs/configuration.md as `%s`" % (key, table, key))
        if not re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(key), man):
            failures.append("%s (%s): not in man/ringleader.yml.5" % (key, table))
    for line in failures:
        print(line)
    print("test_docs: %d keys from %d tables" % (len(keys), len(TABLES)))
    print("%d passed, %d failed" % (0 if failures else 1, 1 if failures else 0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
