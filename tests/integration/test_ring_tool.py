"""test_ring_tool.py: ringleader-ring reproduces every twemproxy vector offline; ringleader -t checks configs."""

import gzip
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (PROXY_KIND, Runner, binary, check, eq, tmpdir,  # noqa: E402
                     vector_files, vector_pool)

R = Runner("test_ring_tool", per_test_timeout=120, total_timeout=240)


def _tsv_case(base):
    tool = binary("ringleader-ring")
    with gzip.open(base + ".tsv.gz", "rb") as f:
        want = f.read()
    keys = b"".join(line.rpartition(b"\t")[0] + b"\n" for line in want.splitlines())
    pool = vector_pool(base)[0]
    r = subprocess.run([tool, "-c", base + ".yml", "-p", pool, "--tsv"], input=keys,
                       capture_output=True, timeout=60)
    eq(r.returncode, 0, "%s exit status (%s)" % (os.path.basename(base), r.stderr[-300:]))
    if r.stdout != want:
        got_l, want_l = r.stdout.splitlines(), want.splitlines()
        bad = [(g, w) for g, w in zip(got_l, want_l) if g != w]
        raise AssertionError("%s: %d lines (want %d), %d differ, first %r" % (
            os.path.basename(base), len(got_l), len(want_l), len(bad), bad[:2]))


@R.test(ringleader=True, nutcracker_reason="ringleader-ring is ringleader's tool")
def ring_tool_tsv_equals_each_vector(env):
    n = 0
    for base in vector_files():
        _tsv_case(base)
        n += 1
    check(n >= 6, "vectors found: %d" % n)


@R.test(ringleader=True, nutcracker_reason="ringleader-ring is ringleader's tool")
def ring_tool_tsv_equals_each_allhash_vector(env):
    for base in vector_files(include_allhash=True)[len(vector_files()):]:
        _tsv_case(base)


@R.test(ringleader=True, nutcracker_reason="ringleader-ring is ringleader's tool")
def ring_tool_keys_as_arguments(env):
    tool = binary("ringleader-ring")
    base = vector_files()[0]
    with gzip.open(base + ".tsv.gz", "rb") as f:
        rows = f.read().splitlines()[:5]
    keys = [row.rpartition(b"\t")[0] for row in rows]
    r = subprocess.run([tool, "-c", base + ".yml", "-p", vector_pool(base)[0], "--tsv"] + keys,
                       capture_output=True, timeout=30)
    eq(r.returncode, 0, "exit status (%s)" % r.stderr[-300:])
    eq(r.stdout.splitlines(), rows)


GOOD = """pool:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  distribution: ketama
  servers:
   - 127.0.0.1:11211:1 alpha
   - 127.0.0.1:11212:1 beta
"""
BAD = GOOD.replace("distribution: ketama", "distribution: sideways")   # line 4


def _config_test(text):
    path = os.path.join(tmpdir(), "conf-%d.yml" % len(os.listdir(tmpdir())))
    with open(path, "w") as f:
        f.write(text)
    exe = "nutcracker" if PROXY_KIND == "nutcracker" else binary("ringleader")
    r = subprocess.run([exe, "-t", "-c", path], capture_output=True, timeout=30)
    return path, r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace")


@R.test
def test_config_good_and_bad(env):
    _, rc, out = _config_test(GOOD)
    eq(rc, 0, "exit status on a good config (%s)" % out[-300:])
    path, rc, out = _config_test(BAD)
    check(rc != 0, "a bad config must fail -t")
    if PROXY_KIND == "ringleader":
        check(os.path.basename(path) in out, "message names the file: %r" % out)
        check(":4:" in out or "line 4" in out, "message names line 4: %r" % out)
        check("distribution" in out, "message names the key: %r" % out)


if __name__ == "__main__":
    R.main(harness.Env)   # nothing shared to start: each test starts its own
