"""test_config.py: `ringleader -t` on nutcracker's own example and on every key nutcracker takes; every error of a file at once; the warnings; admin ":port"."""

import os
import re
import shutil
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (TOP_SRCDIR, Memcached, Proxy, Runner, Skip, binary, check, eq,  # noqa: E402
                     free_port, tmpdir)

R = Runner("test_config", per_test_timeout=30, total_timeout=90)

EXAMPLE = os.path.join(TOP_SRCDIR, "tests", "conf", "nutcracker.yml")   # nutcracker 0.5.0's conf/nutcracker.yml

# Every pool key nutcracker 0.5.0 reads (its conf_commands), each with a value it takes.
EVERY_KEY = """full:
  listen: 127.0.0.1:22131
  hash: fnv1a_64
  hash_tag: "{}"
  distribution: ketama
  timeout: 400
  backlog: 1024
  client_connections: 100
  redis: true
  redis_auth: s3cret
  redis_db: 2
  preconnect: false
  auto_eject_hosts: true
  server_connections: 2
  server_retry_timeout: 2000
  server_failure_limit: 3
  tcpkeepalive: true
  servers:
   - 127.0.0.1:6379:100000 big
   - 127.0.0.1:6380:2147483647 biggest
   - 127.0.0.1:6381:1
"""


def write(name, text, mode=0o600):
    path = os.path.join(tmpdir(), name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def check_conf(path, exe=None):
    """(exit status, stdout, stderr) of `-t -c path`."""
    r = subprocess.run([exe or binary("ringleader"), "-t", "-c", path], capture_output=True,
                       timeout=30)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


@R.test(ringleader=True)
def nutcrackers_own_example_is_ok(env):
    st, out, err = check_conf(EXAMPLE)
    eq(st, 0, "ringleader -t on nutcracker's example (%s)" % err)
    check("syntax is ok" in out, "says so: %r" % out)
    if shutil.which("nutcracker"):
        r = subprocess.run(["nutcracker", "-t", "-c", EXAMPLE], capture_output=True, timeout=30)
        eq(r.returncode, 0, "and nutcracker agrees")


@R.test(ringleader=True)
def the_examples_weight_100000_places_as_nutcracker(env):
    # Pool omega: hsieh/ketama over 127.0.0.1:11214 weight 100000 and :11215 weight 1. The
    # float32 share of weight 1 in 100001 rounds to no point at all, as in nutcracker.
    r = subprocess.run([binary("ringleader-ring"), "-c", EXAMPLE, "-p", "omega", "--json",
                        "--balance", "--samples", "10000"], capture_output=True, timeout=30)
    eq(r.returncode, 0, "ringleader-ring on the example (%s)" % r.stderr[-300:])
    import json
    doc = json.loads(r.stdout)["pools"][0]
    shares = {s["server"]: s["keyspace_share"] for s in doc["servers"]}
    eq(shares, {"127.0.0.1:11214": 1.0, "127.0.0.1:11215": 0.0}, "keyspace shares")
    eq([s["weight"] for s in doc["servers"]], [100000, 1], "weights as written")


@R.test(ringleader=True)
def every_key_nutcracker_reads_loads(env):
    path = write("every.yml", EVERY_KEY)
    st, out, err = check_conf(path)
    eq(st, 0, "ringleader -t (%s)" % err)
    if shutil.which("nutcracker"):
        r = subprocess.run(["nutcracker", "-t", "-c", path], capture_output=True, timeout=30)
        eq(r.returncode, 0, "nutcracker -t takes the same file")


BAD = """ringleader:
  wokers: 2
alpha:
  listen: 127.0.0.1:22141
  timeout: 4s
  hahs: md5
  distribution: ketamma
  servers:
   - 127.0.0.1:11211:0
   - 127.0.0.1:11212:1
beta:
  listen: 127.0.0.1:22141
  servers:
   - 127.0.0.1:11213:1
"""


@R.test(ringleader=True)
def every_error_of_a_file_at_once_each_with_its_place(env):
    path = write("bad.yml", BAD)
    st, out, err = check_conf(path)
    eq(st, 1, "exit status")
    lines = [ln.strip() for ln in err.splitlines()[1:]]
    want = [
        (2, 3, "key 'wokers': unknown ringleader key; did you mean 'workers'?"),
        (5, 12, "key 'timeout': '4s' is not a whole number"),
        (6, 3, "key 'hahs': unknown pool key; did you mean 'hash'?"),
        (7, 17, "key 'distribution': unknown distribution 'ketamma'; did you mean 'ketama'?"),
        (9, 6, "key 'servers': '127.0.0.1:11211:0': weight 0 is out of range 1..2147483647"),
        (12, 11, "key 'listen': pool 'beta' listens on 127.0.0.1:22141, which pool 'alpha'"),
    ]
    eq(len(lines), len(want), "one line per error:\n%s" % err)
    for got, (line, col, text) in zip(lines, want):
        prefix = "%s:%d:%d: " % (path, line, col)
        check(got.startswith(prefix + text), "%r is not %r" % (got, prefix + text))


@R.test(ringleader=True)
def world_readable_secrets_and_an_open_admin_endpoint_are_warned_about(env):
    text = EVERY_KEY + 'ringleader:\n  admin: "0.0.0.0:%d"\n' % free_port()
    path = write("open.yml", text, 0o644)
    st, out, err = check_conf(path)
    eq(st, 0, "a warning is not an error (%s)" % err)
    check(re.search(r"warning: .*open\.yml is readable by every user of this host \(mode 0644\) "
                    r"and holds redis_auth of pool 'full'", err), "secrets warning: %r" % err)
    check("warning: the admin endpoint listens on 0.0.0.0:" in err and "without an admin_token"
          in err, "admin warning: %r" % err)
    # Readable by the proxy alone, a token set: nothing to say.
    path = write("closed.yml", text.replace('  admin: "0.0.0.0', '  admin_token: t\n  admin: "0.0.0.0'),
                 0o640)
    st, out, err = check_conf(path)
    eq((st, err), (0, ""), "no warning")


@R.test(ringleader=True)
def admin_colon_port_listens_on_loopback(env):
    mc = Memcached.start()
    port = free_port()
    proxy = Proxy({"cache": {"servers": [mc.hostport() + ":1"]}}, glob={"admin": ":%d" % port})
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
            eq(r.status, 200, "/health on 127.0.0.1")
        with urllib.request.urlopen("http://127.0.0.1:%d/config" % port, timeout=5) as r:
            import json
            eq(json.loads(r.read())["ringleader"]["admin"], "127.0.0.1:%d" % port, "/config")
    finally:
        proxy.stop()
        mc.stop()


R.main(harness.Env)   # nothing shared to start: each test starts its own
