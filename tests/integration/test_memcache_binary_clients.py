"""test_memcache_binary_clients.py: the memcached clients that speak the binary protocol, through the proxy.

php-memcached's session handler with its default settings (binary protocol, session locks),
memjs (npm, pinned in tests/clients/package.json; tests/clients/memcache_binary.js) and
pylibmc with binary=True, each run through the proxy (3 memcached servers) and, where the
results are compared, straight at a memcached -B binary. A test is skipped with a message
when its client is not installed (scripts/deps installs them).
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (TOP_SRCDIR, Memcached, Proxy, Runner, Skip, check, eq,  # noqa: E402
                     server_lines, unique)

R = Runner("test_memcache_binary_clients", per_test_timeout=120, total_timeout=200)
NODE_DIR = os.path.join(TOP_SRCDIR, "tests", "clients")

# Every writer holds the session's lock while it reads, sleeps and writes the counter:
# with a working lock no increment is lost.
SESSION_PHP = r"""<?php
ini_set('session.save_handler', 'memcached');
ini_set('session.save_path', '127.0.0.1:' . $argv[1]);
ini_set('session.use_cookies', '0');
ini_set('session.use_strict_mode', '0');
ini_set('memcached.sess_lock_wait_min', '20');
ini_set('memcached.sess_lock_wait_max', '50');
ini_set('memcached.sess_lock_retries', '400');
session_id($argv[2]);
if (!session_start()) { fwrite(STDERR, "session_start failed\n"); exit(1); }
$n = ($_SESSION['n'] ?? 0);
usleep((int)$argv[3]);
$_SESSION['n'] = $n + 1;
if (!session_write_close()) { fwrite(STDERR, "session_write_close failed\n"); exit(1); }
printf("n=%d binary=%s locking=%s\n", $n + 1, ini_get('memcached.sess_binary_protocol'),
       ini_get('memcached.sess_locking'));
"""


class Env(harness.Env):
    def __init__(self):
        self.need_own_proxy("compares the proxy with a server of its own",
                            "ringleader serves the binary protocol; nutcracker closes it")
        self.backends = [Memcached.start() for _ in range(3)]
        self.direct = Memcached.start(extra=["-B", "binary"])
        self.more_backends = [self.direct]
        self.proxy = Proxy({"mc": {"hash": "md5", "distribution": "ketama", "timeout": 10000,
                                   "auto_eject_hosts": False,
                                   "servers": server_lines(self.backends, ["a", "b", "c"])}})


def php_memcached():
    php = shutil.which("php")
    if not php:
        raise Skip("php-cli not installed (scripts/deps)")
    r = subprocess.run([php, "-m"], capture_output=True, text=True, timeout=30)
    if "memcached" not in r.stdout.split():
        raise Skip("php-memcached not installed (scripts/deps)")
    return php


@R.test
def php_memcached_sessions_with_locks(env):
    php = php_memcached()
    with tempfile.NamedTemporaryFile("w", suffix=".php", delete=False) as f:
        f.write(SESSION_PHP)
        script = f.name
    try:
        sid = unique("sess").decode()
        port = str(env.proxy.addr()[1])
        first = subprocess.run([php, script, port, sid, "0"], capture_output=True, text=True,
                               timeout=60)
        eq((first.returncode, first.stderr), (0, ""), "a first session (%s)" % first.stdout)
        check("binary=1" in first.stdout and "locking=1" in first.stdout,
              "php-memcached's defaults: binary protocol and session locks (%s)" % first.stdout)
        # 4 writers at once, each holding the lock 100 ms: none may lose the others' updates
        procs = [subprocess.Popen([php, script, port, sid, "100000"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        outs = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=60)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            outs.append((p.returncode, out.strip(), err.strip()))
        eq([o[0] for o in outs], [0] * 4, "every writer's session succeeded: %r" % outs)
        eq(sorted(o[1].split()[0] for o in outs), ["n=2", "n=3", "n=4", "n=5"],
           "the lock serialised the writers")
        last = subprocess.run([php, script, port, sid, "0"], capture_output=True, text=True,
                              timeout=60)
        eq(last.stdout.split()[0], "n=6")
    finally:
        os.unlink(script)


@R.test
def memjs_through_the_proxy_and_direct(env):
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        raise Skip("node not installed (scripts/deps)")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "memjs")):
        raise Skip("npm package memjs not installed: npm ci in tests/clients (scripts/deps)")
    out = subprocess.run([node, os.path.join(NODE_DIR, "memcache_binary.js"),
                          str(env.proxy.addr()[1]), str(env.direct.port)],
                         capture_output=True, text=True, timeout=100, cwd=NODE_DIR,
                         stdin=subprocess.DEVNULL)
    print(out.stdout.rstrip())
    if out.stderr.strip():
        print(out.stderr.rstrip()[-2000:])
    check(out.returncode == 0 and " 0 failed" in out.stdout,
          "memjs failed (exit %d)" % out.returncode)


def pylibmc_session(mod, port, k):
    c = mod.Client(["127.0.0.1:%d" % port], binary=True, behaviors={"cas": True})
    r = []

    def call(fn, *args, **kw):
        """fn's result, or the name of the pylibmc error it raised (part of what is compared)."""
        try:
            r.append(fn(*args, **kw))
        except mod.Error as e:
            r.append("error %s" % type(e).__name__)
        return r[-1]
    try:
        call(c.set, k, "v1")
        call(c.get, k)
        call(c.add, k, "x")
        call(c.add, k + "n", "new")
        call(c.replace, k + "miss", "x")
        call(c.replace, k, "v2", time=100)
        call(c.append, k, ">")
        call(c.prepend, k, "<")
        call(c.append, k + "miss", ">")
        val, cas = call(c.gets, k)
        r[-1] = (val, cas != 0)         # the servers' cas counters differ
        call(c.cas, k, "stale", cas + 1000)
        call(c.cas, k, "fresh", cas)
        call(c.get, k)
        keys = [k + str(i) for i in range(40)]
        call(c.set_multi, {x: x.upper() for x in keys})
        # libmemcached's binary multi-get: a getkq run ended by a noop
        got = call(c.get_multi, keys + [k + "absent"])
        r[-1] = sorted(got.items()) if isinstance(got, dict) else got
        call(c.add, k + "c", 10)
        call(c.incr, k + "c", 5)
        call(c.decr, k + "c", 20)
        call(c.incr, k + "none", 1)
        call(c.touch, k, 100)
        call(c.delete, k + "n")
        call(c.delete, k + "n")
        call(c.delete_multi, keys)
        call(c.get_multi, keys[:5])
        call(c.set, k + "big", b"b" * 200000)
        r.append(len(c.get(k + "big")))
        call(c.incr, k, 1)
    finally:
        c.disconnect_all()
    return r


@R.test
def pylibmc_binary_through_the_proxy_and_direct(env):
    try:
        import pylibmc
    except ImportError:
        raise Skip("python3-pylibmc not installed (scripts/deps)")
    k = unique("plm").decode()
    got = pylibmc_session(pylibmc, env.proxy.addr()[1], k)
    want = pylibmc_session(pylibmc, env.direct.port, k)
    eq(got, want)
    check(got[1] == "v1" and len(got[14]) == 40, "pylibmc got its values: %r" % got[:15])


if __name__ == "__main__":
    R.main(Env)
