"""test_ring_plot.py: ringleader-ring --balance/--diff --svg draw what the text and JSON say; --keys FILE measures real keys."""

import collections
import json
import os
import subprocess
import sys
import xml.dom.minidom

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Runner, binary, check, eq, tmpdir  # noqa: E402

R = Runner("test_ring_plot", per_test_timeout=30, total_timeout=90)

SVG = "{http://www.w3.org/2000/svg}"


def pool_yaml(n, weights=None, dist="ketama", hash_="fnv1a_64"):
    lines = ["cache:", "  listen: 127.0.0.1:22121", "  hash: %s" % hash_,
             "  distribution: %s" % dist, "  servers:"]
    for i in range(1, n + 1):
        w = (weights or {}).get(i, 1)
        lines.append("   - 10.0.1.%d:11211:%d cache-%02d" % (i, w, i))
    return "\n".join(lines) + "\n"


def write(name, text):
    path = os.path.join(tmpdir(), name)
    with open(path, "w") as f:
        f.write(text)
    return path


def tool(*args, stdin=None):
    r = subprocess.run([binary("ringleader-ring")] + list(args), input=stdin, capture_output=True,
                       timeout=60)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def texts(doc):
    return [t.firstChild.data if t.firstChild and t.firstChild.nodeType == t.TEXT_NODE else
            "".join(c.data for c in t.childNodes if c.nodeType == c.TEXT_NODE)
            for t in doc.getElementsByTagName("text")]


class Env(harness.Env):
    def __init__(self):
        self.twelve = write("twelve.yml", pool_yaml(12, {5: 2, 9: 2}))
        self.thirteen = write("thirteen.yml", pool_yaml(13, {5: 2, 9: 2}))
        self.modula = write("modula.yml", pool_yaml(4, {2: 100000, 3: 3}, dist="modula"))


@R.test
def balance_svg_draws_a_bar_per_server_with_the_numbers_of_json(env):
    svg = os.path.join(tmpdir(), "balance.svg")
    st, out, err = tool("-c", env.twelve, "--balance", "--samples", "50000", "--svg", svg)
    eq(st, 0, "exit status (%s)" % err)
    check(out.startswith("pool      cache"), "the table is still printed: %r" % out[:80])
    st, js, err = tool("-c", env.twelve, "--balance", "--samples", "50000", "--json")
    pool = json.loads(js)["pools"][0]
    doc = xml.dom.minidom.parse(svg)                 # well-formed XML
    root = doc.documentElement
    eq(root.tagName, "svg", "root element")
    t = texts(doc)
    for s in pool["servers"]:
        check(s["server"] in t, "a label for %s" % s["server"])
        want = "%.2f%%" % (100 * s["keyspace_share"])
        check(any(x.startswith(want) for x in t), "keyspace share %s of %s drawn" % (want, s["server"]))
    # three shapes per server: keyspace bar, sample bar, fair-share mark (plus the legend's)
    rects = doc.getElementsByTagName("rect")
    eq(len(rects), 1 + 4 + 3 * len(pool["servers"]), "background, legend, 3 per server")
    # keyspace bars (10 px high, below the legend) proportional to the shares, in order
    widths = [float(r.getAttribute("width")) for r in rects
              if r.getAttribute("height") == "10" and float(r.getAttribute("y") or 0) > 80]
    shares = [s["keyspace_share"] for s in pool["servers"]]
    eq(len(widths), len(shares), "a keyspace bar per server")
    ratio = [w / x for w, x in zip(widths, shares)]
    check(max(ratio) - min(ratio) < 1e-3 * max(ratio), "bars proportional to shares: %r" % ratio)


@R.test
def diff_svg_draws_every_flow_of_the_matrix(env):
    svg = os.path.join(tmpdir(), "diff.svg")
    st, out, err = tool("-c", env.twelve, "--diff", env.thirteen, "--samples", "50000", "--svg", svg)
    eq(st, 0, "exit status (%s)" % err)
    st, js, _ = tool("-c", env.twelve, "--diff", env.thirteen, "--samples", "50000", "--json")
    d = json.loads(js)["pools"][0]
    doc = xml.dom.minidom.parse(svg)
    t = texts(doc)
    check(any("cache-13" in x and "(new)" in x for x in t), "the added server is marked new")
    check(any("moved %.4f%% of the keyspace" % (100 * d["moved"]) in x for x in t), "moved drawn")
    # one shaded cell per moved flow, each titled with its share; 12 kept servers in grey
    titled = [r for r in doc.getElementsByTagName("rect") if r.getElementsByTagName("title")]
    eq(len(titled), d["flows_total"], "a cell per non-zero flow")
    grey = [r for r in doc.getElementsByTagName("rect") if r.getAttribute("fill") == "#d5d9e0"]
    eq(len(grey), 12, "every old server is kept: a grey diagonal cell each")
    got = sorted(float(r.getElementsByTagName("title")[0].firstChild.data.rstrip("%")) for r in titled)
    top = sorted(100 * f["fraction"] for f in d["flows"])      # the 12 largest
    check(all(abs(a - b) < 1e-3 for a, b in zip(sorted(got)[-len(top):], top)),
          "the largest cells are the JSON's flows: %r vs %r" % (got[-len(top):], top))


@R.test
def keys_file_measures_the_real_keys(env):
    # fnv1a_64 sends the 26 one-letter keys to one server; key:<i> cannot show it
    letters = write("letters.txt", "".join(chr(c) + "\n" for c in range(ord("a"), ord("z") + 1)))
    st, js, err = tool("-c", env.twelve, "--balance", "--keys", letters, "--json")
    eq(st, 0, "exit status (%s)" % err)
    pool = json.loads(js)["pools"][0]
    eq(pool["samples"], 26, "every line is a key")
    owners = [s["server"] for s in pool["servers"] if s["sample_share"] > 0]
    eq(len(owners), 1, "all 26 keys on one server: %r" % owners)
    # differential: the shares are the --tsv owners of the same keys, counted
    keys = "".join("user:%d:%s\n" % (i, "x" * (i % 7)) for i in range(3000)) + "\n" + "last"
    path = write("users.txt", keys)
    st, js, err = tool("-c", env.twelve, "--balance", "--keys", path, "--json")
    eq(st, 0, "exit status (%s)" % err)
    pool = json.loads(js)["pools"][0]
    eq(pool["samples"], 3002, "3000 lines, an empty one, and a last without its newline")
    st, tsv, _ = tool("-c", env.twelve, "--tsv", stdin=keys.encode())
    count = collections.Counter(line.rsplit("\t", 1)[1] for line in tsv.splitlines())
    for s in pool["servers"]:
        eq(round(s["sample_share"] * 3002), count.get(s["server"], 0), "keys of %s" % s["server"])
    # the text names its keys; stdin works as "-"
    st, out, _ = tool("-c", env.twelve, "--balance", "--keys", "-", stdin=b"a\nb\n")
    check("samples   2 keys of standard input" in out, "header: %r" % out[:300])
    # --diff takes them too
    st, out, _ = tool("-c", env.twelve, "--diff", env.thirteen, "--keys", path)
    check("of 3002 sample keys moved" in out, "diff flows over the file's keys: %r" % out[-400:])


@R.test
def large_weights_fit_the_table(env):
    st, out, err = tool("-c", env.modula, "--balance", "--samples", "1000")
    eq(st, 0, "exit status (%s)" % err)
    row = next(ln for ln in out.splitlines() if ln.startswith("cache-02"))
    check(" 100000 " in row and "99.99" in row, "weight 100000, share 99.99%%: %r" % row)
    header = next(ln for ln in out.splitlines() if ln.startswith("server"))
    eq(header.index("weight") + len("weight"), row.index("100000") + len("100000"),
       "the weight column is wide enough")


@R.test
def usage_and_io_errors(env):
    eq(tool("-c", env.twelve, "--svg", "/tmp/x.svg", "k1")[0], 2, "--svg with a key query")
    eq(tool("-c", env.twelve, "--balance", "--keys", "x", "--samples", "5")[0], 2,
       "--keys and --samples")
    st, _, err = tool("-c", env.twelve, "--balance", "--keys", "/nonexistent/keys")
    eq(st, 1, "unreadable --keys")
    check("/nonexistent/keys" in err, "names the file: %r" % err)
    st, _, err = tool("-c", env.twelve, "--balance", "--keys", write("empty.txt", ""))
    eq(st, 1, "empty --keys file")
    st, _, err = tool("-c", env.twelve, "--balance", "--samples", "100", "--svg", "/nonexistent/x.svg")
    eq(st, 1, "unwritable --svg")
    check("/nonexistent/x.svg" in err, "names the file: %r" % err)


R.main(Env)
