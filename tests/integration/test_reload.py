"""test_reload.py: 100 hot reloads under steady memcache and redis traffic; epochs, checksums, moves, watch, removed pools.

The proof the reload issue asks for. Client threads keep sending memcache set/get
(one at a time and pipelined, with multi-gets) and Redis SET/GET/MGET while the proxy
reloads 100 times, cycling through: adding a server, removing one, changing a weight,
ketama -> maglev -> ketama (modula when this build has no maglev), an invalid file, adding
a pool on its own port and removing it. Triggers are SIGHUP and POST /reload on the admin
endpoint.

Checked after every reload: each pool's epoch and ring_checksum in stats equal what
ringleader-ring computes for the file (epoch + 1 exactly when the checksum changed); the
proxy log's per-pool line (epochs, checksums, servers added/removed); keys written after
the reload are on the backend `ringleader-ring --tsv` names, and only there; an invalid
file changes nothing and shows its reason in stats `last_reload` (POST answers 422).
Checked by the traffic threads: no error reply and no disconnect (except on a removed
pool's listener), every reply is for its request; between two reloads (every worker on the
same ring) a key just written is read back exactly. Checked at the end: no file descriptor
leak, exit status 0 on SIGTERM and (sanitizer build) no ASan/LSan/UBSan report.

Also: the moved fraction logged and printed by `ringleader-ring --diff` for a 5th equal
server under ketama; `watch: true` and an atomic rename; a removed pool's listener and
clients; the time a 1,000-server ketama reload takes (printed, asserted < 2 s); a reload
from plain to redis_cluster and back, and one removing a server, close every client whose
state (pattern or channel subscription, WATCH, BLPOP 0) was pinned to a server the pool
no longer places it on, after what it is owed (sessions_lost, pubsub_closed).

Environment: see harness/__init__.py. RL_RELOADS=N changes the number of reloads (default 100; 60 in
the sanitizer build, still every pairing of the 3 invalid forms with the 2 triggers over the
10 configurations: each step there is several times slower and the whole must fit CI).
"""

import hashlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Memcached, Proxy, Raw, Redis, Runner, Skip, binary, check, eq,  # noqa: E402
                     free_port, http, resp_encode, tmpdir, yaml_dump, ring_owners)

from harness import patience, sanitized  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_reload", per_test_timeout=170, total_timeout=420)
RELOADS = int(os.environ.get("RL_RELOADS", "60" if sanitized() else "100"))
WORKERS = 2
MC_NAMES = ["alpha", "beta", "gamma", "delta", "epsilon"]
RD_NAMES = ["ra", "rb", "rc"]
SANITIZER_MARKS = (b"ERROR: AddressSanitizer", b"ERROR: LeakSanitizer", b"runtime error:",
                   b"SUMMARY: AddressSanitizer", b"SUMMARY: UndefinedBehaviorSanitizer")


def say(*a):
    print(*a)
    sys.stdout.flush()


# ---------------------------------------------------------------- the proxy under test

def write_atomic(path, text):
    """Write tmp then rename over path, so a reload never reads half a file (a file
    that is not pools: the invalid forms; Proxy.rewrite() writes the others)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class LogWatch:
    """Follows the proxy's log file (-o): complete lines appended since the last call."""

    def __init__(self, path):
        self.path = path
        self.off = 0
        self.partial = b""
        self.lines = []

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read()
        except FileNotFoundError:
            return []
        self.off += len(data)
        data = self.partial + data
        *done, self.partial = data.split(b"\n")
        new = [ln.decode("utf-8", "replace") for ln in done]
        self.lines.extend(new)
        return new

    def wait_for(self, pattern, timeout, start=0):
        """Index of the first line at or after `start` matching pattern, within timeout."""
        rx = re.compile(pattern)
        timeout = patience(timeout)
        deadline = time.monotonic() + timeout
        i = start
        while True:
            while i < len(self.lines):
                if rx.search(self.lines[i]):
                    return i
                i += 1
            if time.monotonic() > deadline:
                raise AssertionError("log: no line matching %r within %.1fs; last lines:\n%s" % (
                    pattern, timeout, "\n".join(self.lines[-15:])))
            if not self.poll():
                time.sleep(0.002)


class RLProxy(Proxy):
    """harness.Proxy on a file the tests rewrite: its pools and `ringleader:` block are
    pools_fn(ports) and glob_fn(ports), ports being PORTS on free ports picked afresh at
    each try (Proxy retries a start another process's bind spoiled; pools a later reload
    adds listen on those ports too); -v 6 so the log says when every worker runs a new
    configuration."""
    PORTS = ("admin", "mc", "rd", "extra", "gone", "keep", "big")

    def __init__(self, glob_fn, pools_fn, workers=WORKERS, verbosity=6):
        self.glob_fn = glob_fn
        self.pools_fn = pools_fn
        # jemalloc fills freed memory with junk (ignored by the sanitizer build, which uses
        # libc malloc): a use-after-free then crashes at once instead of now and then.
        env = dict(os.environ)
        env.setdefault("MALLOC_CONF", "junk:true")
        super().__init__({}, workers=workers, verbosity=verbosity, env=env)
        self.pid = self.proc.pid
        self.log = LogWatch(self.log_file)

    def _start(self, workers, verbosity):
        self.ports = {k: free_port() for k in self.PORTS}
        self.glob = self.glob_fn(self.ports)
        self.pools = self.pools_fn(self.ports)
        super()._start(workers, verbosity)

    def hup(self):
        os.kill(self.pid, signal.SIGHUP)

    def fds(self):
        return sorted(os.listdir("/proc/%d/fd" % self.pid), key=int)

    def finish(self):
        """SIGTERM; returns (exit status, sanitizer report lines or [])."""
        rc = self.proc.stop(timeout=15)
        with open(self.proc.log_path, "rb") as f:
            err = f.read()
        bad = [ln for ln in err.splitlines() if any(m in ln for m in SANITIZER_MARKS)]
        return rc, bad, err


# Bugs found by this file, both fixed since; a sanitizer report naming one of them fails
# the test as a regression (see known_crash).
#
# server_free_if_idle: sconn_close() clears srv->conns[i] at once while uv_close()
# completes later, so server_destroy() -> server_free_if_idle() frees a removed server
# whose connections are still closing, and their close callback (sconn_unref) calls
# server_free_if_idle() on the freed server: heap-use-after-free, double free. Hit by a
# reload that removes a server (or a pool) with an open connection, and by a shutdown with
# open server connections (worker_finish -> server_destroy(s, 1)).
#
# wpool_retire: wp->retired is set before its servers are destroyed and the retired
# list's reference is taken after; destroying the last idle server drops the pool's last
# reference, wpool_free() frees it, and the loop goes on reading wp->servers.
KNOWN_CRASHES = {
    b"server_free_if_idle": "BUG (reported): a removed server is freed while its connections "
                            "are still closing; their close callback then runs "
                            "server_free_if_idle() on freed memory (src/proxy/server.c)",
    b"wpool_retire": "BUG (reported): wpool_retire() frees the retired pool while destroying "
                     "its servers, then keeps using it (src/proxy/worker.c)",
}


def known_crash(rc, err):
    """Both crashes in KNOWN_CRASHES are fixed: a crash now fails the test (this stays as
    the place that names them should a regression bring one back)."""
    for fn, text in KNOWN_CRASHES.items():
        if b"AddressSanitizer" in err and fn in err:
            raise AssertionError("regression: " + text)
    return None


def finish_checked(env, px, what):
    """SIGTERM the proxy: exit status 0 and no sanitizer report, or Skip naming a known crash."""
    rc, bad, err = px.finish()
    if rc != 0 or bad:
        known = known_crash(rc, err)
        if known:
            env.known_bug = env.known_bug or known
            raise Skip("%s; seen at %s: exit status %s" % (known, what, rc))
    eq(rc, 0, "%s: exit status on SIGTERM (stderr tail %r)" % (what, err[-500:]))
    check(not bad, "%s: sanitizer report at exit: %s" % (what, b"\n".join(bad[:5])))


class CrashGuard:
    """Around a run of reloads. A failure because the proxy died of one of KNOWN_CRASHES
    becomes a skip naming the bug. Once removing_a_connected_server_keeps_the_proxy_running
    (which runs first) has seen one of them, any failure becomes a skip naming it as well,
    with the failure in the message: in a build without sanitizers the use-after-free
    shows as wrong replies (SERVER_ERROR malformed reply) before the process dies, and
    nothing that follows it means anything."""

    def __init__(self, env, px, what):
        self.env = env
        self.px = px
        self.what = what
        self.where = ""

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if typ is None or issubclass(typ, Skip):
            return False
        try:
            self.px.proc.popen.wait(1.0)
            rc = self.px.proc.popen.returncode
        except subprocess.TimeoutExpired:
            rc = None             # still alive
        with open(self.px.proc.log_path, "rb") as f:
            err = f.read()
        known = known_crash(rc, err) if rc is not None else None
        if known:
            self.env.known_bug = self.env.known_bug or known
            raise Skip("%s; the proxy died (exit %s) %s %s" % (known, rc, self.what, self.where))
        if self.env.known_bug:
            raise Skip("%s (seen by removing_a_connected_server_keeps_the_proxy_running); with "
                       "it this run is not meaningful. Failure %s %s: %s: %s" % (
                           self.env.known_bug, self.what, self.where, typ.__name__,
                           str(exc)[:300]))
        return False



class RingTool:
    """ringleader-ring on a file: expected checksum per pool, owners of keys."""

    def __init__(self):
        self.tool = binary("ringleader-ring")
        self.cache = {}

    def checksum(self, path, pool):
        with open(path, "rb") as f:
            key = (hashlib.sha1(f.read()).hexdigest(), pool)
        if key not in self.cache:
            r = subprocess.run([self.tool, "-c", path, "-p", pool, "--json"],
                               capture_output=True, timeout=60)
            eq(r.returncode, 0, "ringleader-ring -p %s exit (%s)" % (pool, r.stderr[-300:]))
            j = json.loads(r.stdout)
            self.cache[key] = j["checksum"]
        return self.cache[key]

    def owners(self, path, pool, keys):
        return ring_owners(path, pool, keys)

    def diff(self, old, new, samples=100000):
        r = subprocess.run([self.tool, "-c", old, "--diff", new, "--json",
                            "--samples", str(samples)], capture_output=True, timeout=60)
        eq(r.returncode, 0, "ringleader-ring --diff exit (%s)" % r.stderr[-300:])
        return json.loads(r.stdout)


RELOAD_LINE = re.compile(
    r"reload: pool '([^']+)' epoch (\d+) -> (\d+), checksum ([0-9a-f]{16}) -> ([0-9a-f]{16}), "
    r"\+(\d+) -(\d+) servers, moved ([0-9.]+) of the keyspace \(floor ([0-9.]+)\)")


def log_time(line):
    """Seconds (since midnight) of a log line's "[YYYY-mm-dd HH:MM:SS.mmm]" stamp."""
    m = re.match(r"\[\d{4}-\d\d-\d\d (\d\d):(\d\d):(\d\d\.\d+)\]", line)
    check(m is not None, "no time stamp in log line %r" % line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))


def reload_lines(lines):
    """{pool: (old_epoch, new_epoch, old_sum, new_sum, added, removed, moved, floor)}."""
    out = {}
    for ln in lines:
        m = RELOAD_LINE.search(ln)
        if m:
            g = m.groups()
            out[g[0]] = (int(g[1]), int(g[2]), g[3], g[4], int(g[5]), int(g[6]),
                         float(g[7]), float(g[8]))
    return out


# ---------------------------------------------------------------- environment

class Env(harness.Env):
    """The servers every test shares, and every RLProxy a test started (self.proxy is the
    latest: its log tail is what a failure shows); the base's close() stops them by PID."""

    def __init__(self):
        self.need_own_proxy("reload tests start their own proxy",
                            "hot reload, epochs and checksums are ringleader's")
        binary("ringleader")
        self.ring = RingTool()
        self.mc = [Memcached.start() for _ in MC_NAMES]
        self.rd = [Redis.start() for _ in RD_NAMES]
        self.backends = self.mc + self.rd
        self.addr = {}
        for n, b in zip(MC_NAMES, self.mc):
            self.addr[n] = b.hostport()
        for n, b in zip(RD_NAMES, self.rd):
            self.addr[n] = b.hostport()
        self.main_result = None
        self.proxies = []
        self.known_bug = None       # set when a test saw one of KNOWN_CRASHES
        self.phase = None
        self.alt_dist = self.available_dist(["maglev", "modula"])
        if self.alt_dist != "maglev":
            say("note: distribution 'maglev' is not available in this build (ringleader-ring "
                "says so); the distribution change uses ketama -> %s -> ketama" % self.alt_dist)

    def available_dist(self, names):
        """The first distribution of names that this build can build a ring with."""
        path = os.path.join(tmpdir(), "dist-probe.yml")
        for name in names:
            with open(path, "w") as f:
                f.write(yaml_dump({"p": {"listen": "127.0.0.1:1", "distribution": name,
                                         "servers": ["127.0.0.1:2:1 a"]}}))
            r = subprocess.run([self.ring.tool, "-c", path, "-p", "p"], capture_output=True,
                               timeout=30)
            if r.returncode == 0:
                return name
        raise AssertionError("none of %s available" % names)

    def backend(self, name):
        if name in MC_NAMES:
            return self.mc[MC_NAMES.index(name)]
        return self.rd[RD_NAMES.index(name)]


def pool_yaml(env, spec):
    """spec: {"dist", "servers": [(name, weight)], "redis", "listen"} -> pool keys."""
    p = {"listen": "127.0.0.1:%d" % spec["listen"], "hash": "fnv1a_64",
         "distribution": spec["dist"],
         "servers": ["%s:%d %s" % (env.addr[n], w, n) for n, w in spec["servers"]]}
    if spec.get("redis"):
        p["redis"] = True
    return p


def start_proxy(env, glob_fn, pools_fn):
    """An RLProxy (see there), recorded in env."""
    px = RLProxy(glob_fn, pools_fn)
    env.proxies.append(px)
    env.proxy = px
    return px


# ---------------------------------------------------------------- traffic

class Phase:
    """gen is even while every worker runs one configuration, odd while a reload is being
    applied. A write and a read both inside one even gen must meet on the same server."""

    def __init__(self):
        self.gen = 0
        self.stop = False
        self.extra = "down"         # "up", "removing", "down"
        self.extra_port = None
        self.lock = threading.Lock()

    def bump(self):
        with self.lock:
            self.gen += 1


class Book:
    """The values a client wrote: key -> (seq, gen at write)."""

    def __init__(self, name):
        self.name = name
        self.w = {}
        self.seq = 0
        self.strict = 0
        self.relaxed_misses = 0
        self.stale = 0

    def value(self, key, gen):
        self.seq += 1
        self.w[key] = (self.seq, gen)
        return b"%s=%d=%s" % (key, self.seq, b"x" * (self.seq % 61))

    def judge(self, key, val, gen_now):
        """A read of key gave val (None: miss). Raises on a reply for another request or a
        wrong value; a miss or an older value is fine only across a reload."""
        seq, wgen = self.w[key]
        settled = wgen == gen_now and gen_now % 2 == 0
        if val is None:
            if settled:
                raise AssertionError("%s: %r missed although written under the same ring (gen %d)"
                                     % (self.name, key, gen_now))
            self.relaxed_misses += 1
            return
        parts = val.split(b"=")
        if len(parts) != 3 or parts[0] != key or not parts[1].isdigit() or \
                parts[2] != b"x" * (int(parts[1]) % 61):
            raise AssertionError("%s: read of %r returned %r: not a value of that key"
                                 % (self.name, key, val[:80]))
        got = int(parts[1])
        if got > seq:
            raise AssertionError("%s: %r returned seq %d never written (latest %d)"
                                 % (self.name, key, got, seq))
        if settled:
            self.strict += 1
            if got != seq:
                raise AssertionError("%s: %r returned seq %d, latest %d written under the same ring"
                                     % (self.name, key, got, seq))
        elif got != seq:
            self.stale += 1


class Worker(threading.Thread):
    """One client connection doing a fixed kind of traffic until phase.stop."""

    def __init__(self, name, addr, phase, body):
        super().__init__(name=name, daemon=True)
        self.addr = addr
        self.phase = phase
        self.body = body
        self.book = Book(name)
        self.ops = 0
        self.error = None

    def run(self):
        try:
            c = Raw(self.addr, timeout=10)
            try:
                i = 0
                while not self.phase.stop:
                    self.body(self, c, i)
                    i += 1
            finally:
                c.close()
        except BaseException as e:  # noqa: B036 - reported by the main thread
            self.error = "%s: %s: %s" % (self.name, type(e).__name__, e)


def mc_simple(t, c, i):
    """set then get, one at a time; every 8th round a multi-get of 10 earlier keys."""
    key = b"mcs-%d" % (i % 300)
    g0 = t.phase.gen
    eq(c.mc_store(b"set", key, t.book.value(key, g0)), b"STORED\r\n", "set %r" % key)
    got = c.mc_get(b"get", key)
    g1 = t.phase.gen
    check(len(got) <= 1 and all(k == key for k, *_ in got), "get %r returned %r" % (key, got))
    t.book.judge(key, got[0][2] if got else None, g1)
    t.ops += 2
    if i % 8 == 7:
        keys = [b"mcs-%d" % ((i - j) % 300) for j in range(10) if i - j >= 0]
        got = c.mc_get(b"get", *keys)
        g1 = t.phase.gen
        mc_multi_check(t, keys, got, g1)
        t.ops += 1


def mc_multi_check(t, keys, got, gen):
    pos = {k: n for n, k in enumerate(keys)}
    last = -1
    seen = {}
    for k, _f, v, _cas in got:
        check(k in pos, "multi-get returned key %r not asked" % k)
        check(pos[k] > last, "multi-get reply out of request order: %r" % [g[0] for g in got])
        last = pos[k]
        seen[k] = v
    for k in keys:
        t.book.judge(k, seen.get(k), gen)


def mc_pipelined(t, c, i):
    """16 sets, one multi-get of them and 4 single gets in one write; replies in order."""
    keys = [b"mcp-%d" % ((i * 16 + j) % 400) for j in range(16)]
    g0 = t.phase.gen
    out = []
    for k in keys:
        v = t.book.value(k, g0)
        out.append(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
    out.append(b"get " + b" ".join(keys) + b"\r\n")
    for k in keys[:4]:
        out.append(b"get %s\r\n" % k)
    c.send(b"".join(out))
    for k in keys:
        eq(c.read_line(), b"STORED\r\n", "pipelined set %r" % k)
    multi = c.read_values()
    singles = [c.read_values() for _ in keys[:4]]
    g1 = t.phase.gen
    mc_multi_check(t, keys, multi, g1)
    for k, got in zip(keys[:4], singles):
        check(len(got) <= 1 and all(x[0] == k for x in got), "get %r returned %r" % (k, got))
        t.book.judge(k, got[0][2] if got else None, g1)
    t.ops += 21


def rd_traffic(t, c, i):
    """SET then GET; every 4th round 8 SETs, an MGET of them and a GET, pipelined."""
    key = b"rds-%d" % (i % 300)
    g0 = t.phase.gen
    r = c.rd("SET", key, t.book.value(key, g0))
    check(r == "OK", "SET %r -> %r" % (key, r))
    r = c.rd("GET", key)
    g1 = t.phase.gen
    check(r is None or isinstance(r, bytes), "GET %r -> %r" % (key, r))
    t.book.judge(key, r, g1)
    t.ops += 2
    if i % 4 == 3:
        keys = [b"rdp-%d" % ((i * 8 + j) % 400) for j in range(8)]
        g0 = t.phase.gen
        c.send(b"".join(resp_encode("SET", k, t.book.value(k, g0)) for k in keys) +
               resp_encode("MGET", *keys) + resp_encode("GET", keys[0]))
        for k in keys:
            r = c.read_resp()
            check(r == "OK", "pipelined SET %r -> %r" % (k, r))
        mget = c.read_resp()
        one = c.read_resp()
        g1 = t.phase.gen
        check(isinstance(mget, list) and len(mget) == len(keys), "MGET -> %r" % (mget,))
        for k, v in zip(keys, mget):
            check(v is None or isinstance(v, bytes), "MGET item %r -> %r" % (k, v))
            t.book.judge(k, v, g1)
        t.book.judge(keys[0], one, g1)
        t.ops += 10


class ExtraClient(threading.Thread):
    """Traffic on the pool that reloads add and remove: a disconnect or a refused connect
    is fine only once the reloader has started removing the pool."""

    def __init__(self, phase):
        super().__init__(name="extra", daemon=True)
        self.phase = phase
        self.book = Book("extra")
        self.ops = 0
        self.sessions = 0
        self.cut = 0
        self.error = None

    def run(self):
        try:
            while not self.phase.stop:
                if self.phase.extra != "up":
                    time.sleep(0.005)
                    continue
                self.session()
        except BaseException as e:  # noqa: B036
            self.error = "extra: %s: %s" % (type(e).__name__, e)

    def session(self):
        try:
            c = Raw(("127.0.0.1", self.phase.extra_port), timeout=10)
        except OSError:
            check(self.phase.extra != "up", "connect to the extra pool refused while it exists")
            return
        self.sessions += 1
        i = 0
        try:
            while not self.phase.stop:
                key = b"ext-%d" % (i % 100)
                i += 1
                g0 = self.phase.gen
                try:
                    r = c.mc_store(b"set", key, self.book.value(key, g0))
                    eq(r, b"STORED\r\n", "extra set")
                    got = c.mc_get(b"get", key)
                except (EOFError, OSError):
                    check(self.phase.extra != "up", "extra pool client cut while the pool exists")
                    self.cut += 1
                    return
                check(len(got) <= 1, "extra get -> %r" % got)
                self.book.judge(key, got[0][2] if got else None, self.phase.gen)
                self.ops += 2
                time.sleep(0.001)
        finally:
            c.close()


# ---------------------------------------------------------------- fds

def socket_peers(pid):
    """{fd: remote port or None} for the process's TCP sockets; other fds map to None."""
    inode_port = {}
    for table in ("/proc/%d/net/tcp" % pid, "/proc/%d/net/tcp6" % pid):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    p = line.split()
                    inode_port[p[9]] = int(p[2].rsplit(":", 1)[1], 16)
        except OSError:
            pass
    out = {}
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", target)
        out[fd] = inode_port.get(m.group(1)) if m else None
    return out


def fd_census(pid, server_ports):
    """(total, {backend port: connections}, non-server fds)."""
    peers = socket_peers(pid)
    srv = {}
    for port in peers.values():
        if port in server_ports:
            srv[port] = srv.get(port, 0) + 1
    return len(peers), srv, len(peers) - sum(srv.values())


# ---------------------------------------------------------------- the 100 reloads

def states(env, ports):
    """The 10 configurations one cycle goes through (the 10th is the base), each as
    (what, {pool: spec}, trigger, invalid-or-None)."""
    mc = lambda dist, servers: {"dist": dist, "servers": servers, "listen": ports["mc"]}  # noqa: E731
    rd = lambda servers: {"dist": "ketama", "servers": servers, "listen": ports["rd"],  # noqa: E731
                          "redis": True}
    ex = {"dist": "ketama", "servers": [("beta", 1), ("epsilon", 1)], "listen": ports["extra"]}
    abcd = [("alpha", 1), ("beta", 1), ("gamma", 1), ("delta", 1)]
    abcde = abcd + [("epsilon", 1)]
    acde = [("alpha", 1), ("gamma", 1), ("delta", 1), ("epsilon", 1)]
    acde_w = [("alpha", 1), ("gamma", 2), ("delta", 1), ("epsilon", 1)]
    rab = [("ra", 1), ("rb", 1)]
    return [
        ("add a server", {"mc": mc("ketama", abcde), "rd": rd(rab)}, "hup", None),
        ("remove a server", {"mc": mc("ketama", acde), "rd": rd(rab)}, "hup", None),
        ("change a weight", {"mc": mc("ketama", acde_w), "rd": rd(rab)}, "post", None),
        ("ketama -> " + env.alt_dist, {"mc": mc(env.alt_dist, acde_w), "rd": rd(rab)}, "hup",
         None),
        ("invalid file", None, None, "invalid"),
        (env.alt_dist + " -> ketama, add a redis server",
         {"mc": mc("ketama", acde_w), "rd": rd(rab + [("rc", 1)])}, "hup", None),
        ("add a pool", {"mc": mc("ketama", acde_w), "rd": rd(rab + [("rc", 1)]), "extra": ex},
         "post", None),
        ("remove the pool, remove a redis server",
         {"mc": mc("ketama", acde_w), "rd": rd([("rb", 1), ("rc", 1)])}, "hup", None),
        ("back to 4 equal servers", {"mc": mc("ketama", abcd), "rd": rd([("rb", 1), ("rc", 1)])},
         "hup", None),
        ("back to the base", {"mc": mc("ketama", abcd), "rd": rd(rab)}, "post", None),
    ]


def duplicate_server(text):
    """The file with the first server line of the first pool given twice."""
    lines = text.splitlines(True)
    for i, ln in enumerate(lines):
        if ln.startswith("   - "):
            return "".join(lines[:i + 1] + [ln] + lines[i + 1:])
    raise AssertionError("no server line")


# Invalid files: (transform of the running file, what the error must mention).
INVALID = [
    (lambda t: t + "broken:\n  listen: [\n", "YAML syntax error"),
    (lambda t: t.replace('distribution: "ketama"', 'distribution: "ketamax"', 1),
     "unknown distribution"),
    (duplicate_server, "duplicate server"),
]


def idents(env, spec):
    return {(n, env.addr[n]) for n, _w in spec["servers"]}


@R.test(ringleader=True)
def removing_a_connected_server_keeps_the_proxy_running(env):
    """Regression for KNOWN_CRASHES: reloads remove and add back a server the proxy is
    connected to, with traffic in between; then SIGTERM with server connections open.
    Runs before the 100 reloads: if it sees the crash, the tests after it say so."""
    def pools(names):
        return lambda pp: {"mc": {"listen": "127.0.0.1:%d" % pp["mc"], "hash": "fnv1a_64",
                                  "servers": ["%s:1 %s" % (env.addr[n], n) for n in names]}}
    px = start_proxy(env, lambda pp: {}, pools(["alpha", "beta"]))
    guard = CrashGuard(env, px, "after a reload removed a connected server")
    try:
        with guard:
            with Raw(("127.0.0.1", px.ports["mc"])) as c:
                for rnd in range(6):
                    guard.where = "(round %d)" % rnd
                    for i in range(40):      # a connection to each server
                        k = b"rc-%d" % i
                        eq(c.mc_store(b"set", k, b"v%d" % rnd), b"STORED\r\n", "set")
                        eq(c.mc_get(b"get", k), [(k, 0, b"v%d" % rnd, None)], "get")
                    names = ["alpha"] if rnd % 2 == 0 else ["alpha", "beta"]
                    px.rewrite(pools(names)(px.ports))
                    px.log.poll()
                    mark = len(px.log.lines)
                    px.hup()
                    px.log.wait_for(r"reload: every worker runs the new configuration", 5, mark)
                time.sleep(0.2)
                check(px.proc.alive(), "proxy died after removing a connected server")
    except Skip:
        raise
    finish_checked(env, px, "exit after removing a connected server")


@R.test(ringleader=True, timeout=300)   # a test of its own size: not the file's 170 s
def hundred_reloads_under_traffic_change_only_what_they_should(env):
    def glob(ports):
        return {"admin": "127.0.0.1:%d" % ports["admin"], "drain_timeout": 1000}

    def pools(ports):
        return {n: pool_yaml(env, s) for n, s in states(env, ports)[-1][1].items()}
    px = start_proxy(env, glob, pools)
    guard = CrashGuard(env, px, "during the reloads")
    try:
        with guard:
            moved = hundred_reloads(env, px, guard)
    finally:
        if env.phase is not None:
            env.phase.stop = True     # the traffic threads end on any way out
    finish_checked(env, px, "the end of %d reloads" % RELOADS)
    check(abs(moved[0] - 0.20) <= 0.015, "moved %.4f on adding a 5th server to 4: not within "
          "1.5 points of 20%%" % moved[0])


def hundred_reloads(env, px, guard):
    """The body of the test above; returns the (moved, floor) logged by the first reload."""
    ports = px.ports
    admin = ports["admin"]
    cycle = states(env, ports)
    path = px.conf_path
    phase = env.phase = Phase()
    phase.extra_port = ports["extra"]
    server_ports = {int(a.rsplit(":", 1)[1]) for a in env.addr.values()}

    # Expected state, from the tool: {pool: (epoch, checksum)}.
    cur = cycle[-1][1]
    expect = {p: (1, env.ring.checksum(path, p)) for p in cur}
    st = px.stats()
    for p, (ep, cs) in expect.items():
        eq((st[p]["epoch"], st[p]["ring_checksum"]), (ep, cs), "pool %s at start" % p)
    ring_changes = {p: 0 for p in expect}

    threads = [Worker("mc-simple", ("127.0.0.1", ports["mc"]), phase, mc_simple),
               Worker("mc-pipelined", ("127.0.0.1", ports["mc"]), phase, mc_pipelined),
               Worker("redis", ("127.0.0.1", ports["rd"]), phase, rd_traffic)]
    extra = ExtraClient(phase)
    checker = {"mc": Raw(("127.0.0.1", ports["mc"])), "rd": Raw(("127.0.0.1", ports["rd"]))}
    direct = {n: env.backend(n).client() for n in MC_NAMES + RD_NAMES}
    for t in threads + [extra]:
        t.start()

    def traffic_ok():
        for t in threads + [extra]:
            check(t.error is None, "traffic thread failed: %s" % t.error)
            check(t.is_alive(), "traffic thread %s ended" % t.name)

    def placement(step, spec_by_pool):
        """Keys written now are on the owner ringleader-ring names for the file, only there."""
        for p, spec in spec_by_pool.items():
            keys = [b"plc-%s-%d-%d" % (p.encode(), step, j) for j in range(8)]
            conn = checker.get(p) or Raw(("127.0.0.1", spec["listen"]))
            for k in keys:
                if spec.get("redis"):
                    eq(conn.rd("SET", k, b"v-" + k), "OK", "SET %r via %s" % (k, p))
                else:
                    eq(conn.mc_store(b"set", k, b"v-" + k), b"STORED\r\n", "set %r via %s" % (k, p))
            own = env.ring.owners(path, p, keys)
            names = RD_NAMES if spec.get("redis") else MC_NAMES
            held = {k: [] for k in keys}
            for n in names:
                c = direct[n]
                if spec.get("redis"):
                    c.send(b"".join(resp_encode("EXISTS", k) for k in keys))
                    for k in keys:
                        if c.read_resp() == 1:
                            held[k].append(n)
                else:
                    for k, *_ in c.mc_get(b"get", *keys):
                        held[k].append(n)
            for k in keys:
                eq(held[k], [own[k]], "step %d pool %s: backends holding %r" % (step, p, k))
            if p not in checker:
                conn.close()     # the pool that comes and goes: a connection per check

    # Warm up: every client and server connection open, then the fd census.
    time.sleep(0.5)
    placement(0, cur)
    traffic_ok()
    fd_before = fd_census(px.pid, server_ports)
    say("fds before: %d total, %d to backends %s" % (fd_before[0], sum(fd_before[1].values()),
                                                     sorted(fd_before[1].items())))

    t_visible, t_applied, moved_first_add = [], [], None
    idle_extra = None
    counts = {"hup": 0, "post": 0, "invalid": 0, "valid": 0}
    last_ok = True
    t_start = time.monotonic()
    for step in range(1, RELOADS + 1):
        what, target, trigger, invalid = cycle[(step - 1) % len(cycle)]
        guard.where = "at reload %d (%s)" % (step, what)
        traffic_ok()
        if invalid:
            form, reason = INVALID[(step // len(cycle)) % len(INVALID)]
            with open(path) as f:
                good = f.read()
            write_atomic(path, form(good))
            trigger = "post" if (step // len(cycle)) % 2 == 0 else "hup"
            counts["invalid"] += 1
            counts[trigger] += 1
            px.log.poll()
            mark = len(px.log.lines)
            phase.bump()
            if trigger == "post":
                status, body = http(admin, "POST", "/reload")
                eq(status, 422, "POST /reload of an invalid file (body %r)" % body)
                check(reason in body, "POST body %r names the reason %r" % (body, reason))
            else:
                px.hup()
            px.log.wait_for(r"reload \((SIGHUP|admin)\) refused", 5, mark)
            deadline = time.monotonic() + patience(5)
            while True:
                st = px.stats()
                lr = st["mc"]["last_reload"]
                if lr != "ok" or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            phase.bump()
            for p in st:
                if isinstance(st[p], dict) and "epoch" in st[p]:
                    check(reason in st[p]["last_reload"] and
                          os.path.basename(path) in st[p]["last_reload"],
                          "step %d pool %s last_reload %r names the file and %r" % (
                              step, p, st[p]["last_reload"], reason))
            for p, (ep, cs) in expect.items():
                eq((st[p]["epoch"], st[p]["ring_checksum"]), (ep, cs),
                   "step %d (invalid file): pool %s unchanged" % (step, p))
            last_ok = False
            write_atomic(path, good)
            placement(step, cur)
            time.sleep(0.03)
            continue

        # A valid change: write, trigger, wait for stats and for every worker.
        removing_extra = "extra" in cur and "extra" not in target
        if removing_extra:
            phase.extra = "removing"
        px.rewrite({n: pool_yaml(env, s) for n, s in target.items()})
        new_expect = {}
        for p in target:
            cs = env.ring.checksum(path, p)
            if p in expect:
                ep = expect[p][0] + (1 if cs != expect[p][1] else 0)
            else:
                ep = 1
            new_expect[p] = (ep, cs)
        px.log.poll()
        mark = len(px.log.lines)
        phase.bump()
        t0 = time.monotonic()
        counts[trigger] += 1
        counts["valid"] += 1
        if trigger == "post":
            status, body = http(admin, "POST", "/reload")
            eq((status, body.strip()), (200, "reloaded"), "POST /reload")
        else:
            px.hup()
        deadline = t0 + patience(5)
        while True:
            st = px.stats()
            got = {p: (st[p]["epoch"], st[p]["ring_checksum"]) for p in target if p in st}
            if got == new_expect and all(p not in st for p in cur if p not in target) \
                    and st["mc"]["last_reload"] == "ok":
                break
            check(time.monotonic() < deadline,
                  "step %d (%s): stats %r, expected %r" % (step, what, got, new_expect))
            time.sleep(0.002)
        t_visible.append(time.monotonic() - t0)
        i = px.log.wait_for(r"reload: every worker runs the new configuration", 5, mark)
        t_applied.append(time.monotonic() - t0)
        phase.bump()
        # The log line per pool: epochs, checksums, servers in and out.
        lines = reload_lines(px.log.lines[mark:i])
        for p in set(cur) | set(target):
            check(p in lines, "step %d: no reload log line for pool %s in %r" % (
                step, p, px.log.lines[mark:i]))
            oe, oc = expect.get(p, (0, "0" * 16))
            ne, nc = new_expect.get(p, (0, "0" * 16))
            added = len(idents(env, target[p]) - idents(env, cur[p])) if p in cur and p in target \
                else (len(target[p]["servers"]) if p in target else 0)
            removed = len(idents(env, cur[p]) - idents(env, target[p])) if p in cur and p in target \
                else (len(cur[p]["servers"]) if p in cur else 0)
            eq(lines[p][:6], (oe, ne, oc, nc, added, removed),
               "step %d (%s): log line for pool %s" % (step, what, p))
            if p in cur and p in target and oc != nc:
                ring_changes[p] = ring_changes.get(p, 0) + 1
        if step == 1:
            moved_first_add = lines["mc"][6:8]
        check(last_ok or st["mc"]["last_reload"] == "ok", "last_reload back to ok")
        last_ok = True
        expect = new_expect
        cur = target
        # The pool that comes and goes: its listener opens; when removed, it is closed and
        # an idle client of it is disconnected.
        if "extra" in cur and phase.extra != "up":
            idle_extra = Raw(("127.0.0.1", ports["extra"]))
            eq(idle_extra.mc_store(b"set", b"idle", b"1"), b"STORED\r\n", "extra pool set")
            phase.extra = "up"
        if removing_extra:
            check(idle_extra.closed(2.0), "step %d: idle client of the removed pool still open"
                  % step)
            idle_extra.close()
            refused = False
            try:
                socket.create_connection(("127.0.0.1", ports["extra"]), 1).close()
            except ConnectionRefusedError:
                refused = True
            check(refused, "step %d: the removed pool's port still accepts" % step)
            phase.extra = "down"
        placement(step, cur)
        time.sleep(0.03)

    elapsed = time.monotonic() - t_start
    time.sleep(0.3)
    traffic_ok()
    fd_after = fd_census(px.pid, server_ports)
    phase.stop = True
    for t in threads + [extra]:
        t.join(15)
    for t in threads + [extra]:
        check(t.error is None, "traffic thread failed: %s" % t.error)
    st = px.stats()
    for c in list(checker.values()) + list(direct.values()):
        c.close()

    # Report.
    say("reloads: %d (%d valid, %d invalid; %d SIGHUP, %d POST) in %.1fs" % (
        RELOADS, counts["valid"], counts["invalid"], counts["hup"], counts["post"], elapsed))
    say("trigger -> new epoch in stats: median %.1f ms, max %.1f ms; -> every worker switched: "
        "median %.1f ms, max %.1f ms" % (
            1000 * statistics.median(t_visible), 1000 * max(t_visible),
            1000 * statistics.median(t_applied), 1000 * max(t_applied)))
    for t in threads + [extra]:
        say("  %-13s %6d ops, %5d strict reads (same ring), %4d misses and %3d older values "
            "across a reload" % (t.name, t.ops, t.book.strict, t.book.relaxed_misses,
                                 t.book.stale))
    say("  extra pool: %d sessions, %d cut by its removal" % (extra.sessions, extra.cut))
    say("fds after:  %d total, %d to backends %s" % (fd_after[0], sum(fd_after[1].values()),
                                                     sorted(fd_after[1].items())))
    say("moved on adding a 5th server to 4 (log): %.4f, floor %.4f" % moved_first_add)

    check(sum(t.book.strict for t in threads) > 1000,
          "too few reads under a settled ring to mean anything")
    # No fd leak: everything but backend connections is as before; backend connections
    # go only to servers of the final configuration, at most one per worker each.
    eq(fd_after[2], fd_before[2], "non-backend fds before/after %d reloads" % RELOADS)
    final_ports = {int(env.addr[n].rsplit(":", 1)[1]): n
                   for s in cur.values() for n, _w in s["servers"]}
    for port, n in fd_after[1].items():
        check(port in final_ports, "a connection to %s, which the final config does not have"
              % port)
        check(n <= WORKERS, "%d connections to backend port %d (server_connections 1, %d workers)"
              % (n, port, WORKERS))
    eq(cur, cycle[-1][1], "final configuration is the base")
    env.main_result = {"stats": st, "changes": ring_changes, "valid": counts["valid"]}
    return moved_first_add


@R.test(ringleader=True)
def stats_reloads_counts_reloads_that_changed_the_pools_ring(env):
    """docs/stats.md: `reloads` is "reloads that changed this pool's ring"."""
    res = env.main_result
    if res is None:
        raise Skip("needs the 100-reload test's result")
    for p, n in res["changes"].items():
        got = res["stats"][p]["reloads"]
        if got != n and got == res["valid"]:
            raise Skip("BUG (reported): stats pool '%s' reloads = %d, every applied reload "
                       "(reload_state.count), not the %d that changed its ring as "
                       "docs/stats.md says" % (p, got, n))
        eq(got, n, "pool %s reloads" % p)


# ---------------------------------------------------------------- moved fraction

def closed_ports(n):
    """n ports on 127.0.0.1 that nothing listens on (connect is refused)."""
    return [free_port() for _ in range(n)]


@R.test(ringleader=True)
def adding_a_fifth_equal_server_to_four_moves_a_fifth_of_the_keys(env):
    ports = closed_ports(5)
    srv = ["127.0.0.1:%d:1 %s" % (p, n) for p, n in zip(ports, MC_NAMES)]

    def pools(n):
        return lambda pp: {"mc": {"listen": "127.0.0.1:%d" % pp["mc"], "hash": "fnv1a_64",
                                  "distribution": "ketama", "servers": srv[:n]}}
    px = start_proxy(env, lambda pp: {}, pools(4))
    old = os.path.join(tmpdir(), "moved-4.yml")
    with open(px.conf_path) as f:
        four = f.read()
    with open(old, "w") as f:
        f.write(four)
    px.rewrite(pools(5)(px.ports))
    px.log.poll()
    mark = len(px.log.lines)
    px.hup()
    i = px.log.wait_for(r"reload: every worker runs the new configuration", 5, mark)
    line = reload_lines(px.log.lines[mark:i])["mc"]
    d = env.ring.diff(old, px.conf_path)["pools"][0]
    say("moved on adding a 5th server to 4 under ketama: log %.4f (floor %.4f), "
        "ringleader-ring --diff %.4f (%s, floor %.4f), sampled %.4f" % (
            line[6], line[7], d["moved"], "exact" if d["moved_exact"] else "estimated",
            d["floor"], d["sample_moved"]))
    eq(line[4:6], (1, 0), "servers added/removed in the log line")
    eq(d["added"], ["epsilon"], "--diff added")
    check(abs(line[6] - 0.20) <= 0.015, "log: moved %.4f not within 1.5 points of 20%%" % line[6])
    check(abs(d["moved"] - 0.20) <= 0.015, "--diff: moved %.4f not within 1.5 points of 20%%"
          % d["moved"])
    check(abs(line[6] - d["moved"]) < 1e-4, "log %.4f and --diff %.6f disagree"
          % (line[6], d["moved"]))
    eq(line[7], 0.2, "floor")
    finish_checked(env, px, "exit")


# ---------------------------------------------------------------- watch: true

@R.test(ringleader=True)
def watch_reloads_once_on_an_atomic_rename(env):
    ports = closed_ports(5)
    srv = ["127.0.0.1:%d:1 %s" % (p, n) for p, n in zip(ports, MC_NAMES)]

    def pools(n):
        return lambda pp: {"mc": {"listen": "127.0.0.1:%d" % pp["mc"], "distribution": "ketama",
                                  "servers": srv[:n]}}
    px = start_proxy(env, lambda pp: {"watch": True}, pools(4))
    px.log.wait_for(r"watching '", 5)
    eq(px.stats()["mc"]["reloads"], 0, "reloads at start")
    # Unrelated files in the same directory (the proxy's own log is one) do not reload.
    with open(os.path.join(os.path.dirname(px.conf_path), "unrelated.yml"), "w") as f:
        f.write("x: 1\n")
    time.sleep(0.6)
    eq(px.stats()["mc"]["reloads"], 0, "reloads after writing another file")
    want = None
    px.log.poll()
    mark = len(px.log.lines)
    t0 = time.monotonic()
    px.rewrite(pools(5)(px.ports))
    want = env.ring.checksum(px.conf_path, "mc")
    while True:
        st = px.stats()["mc"]
        if st["ring_checksum"] == want:
            break
        check(time.monotonic() - t0 < patience(5.0), "no reload within 5 s of the rename (stats %r)"
              % {k: st[k] for k in ("epoch", "ring_checksum", "reloads")})
        time.sleep(0.01)
    took = time.monotonic() - t0
    time.sleep(1.0)
    st = px.stats()["mc"]
    px.log.poll()
    watch_lines = [ln for ln in px.log.lines[mark:] if "reload (watch)" in ln]
    say("watch: atomic rename -> new epoch in stats after %.0f ms (debounce 200 ms)" %
        (1000 * took))
    eq((st["epoch"], st["ring_checksum"]), (2, want), "epoch and checksum after the rename")
    eq(len(watch_lines), 1, "reloads logged for one rename: %r" % watch_lines)
    eq(st["reloads"], 1, "stats reloads after one rename")
    finish_checked(env, px, "exit")


# ---------------------------------------------------------------- a removed pool

class Silent:
    """A backend that accepts and reads but never answers (127.0.0.1, stopped by close)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.done = False
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        self.sock.settimeout(0.1)
        while not self.done:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                pass

    def close(self):
        self.done = True
        self.t.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


@R.test(ringleader=True)
def removed_pool_closes_its_listener_and_its_clients(env):
    silent = Silent()
    try:
        a = env.mc[0]

        def pools(with_gone):
            def f(pp):
                out = {"keep": {"listen": "127.0.0.1:%d" % pp["keep"],
                                "servers": ["%s:1 alpha" % a.hostport()]}}
                if with_gone:
                    out["gone"] = {"listen": "127.0.0.1:%d" % pp["gone"],
                                   "servers": ["%s:1 alpha" % a.hostport()]}
                    out["hang"] = {"listen": "127.0.0.1:%d" % pp["extra"],
                                   "servers": ["127.0.0.1:%d:1 mute" % silent.port]}
                return out
            return f
        px = start_proxy(env, lambda pp: {"drain_timeout": 500}, pools(True))
        pp = px.ports
        with CrashGuard(env, px, "after removing pools 'gone' and 'hang'"):
            closed, took = removed_pool_checks(px, pp, pools)
        bugs = []
        if not closed:
            bugs.append("BUG (reported): a client of a removed pool with a request in flight on "
                        "a server that never answers is still open %.1f s after the reload "
                        "(drain_timeout 500 ms; wpool.retired_at is set but nothing reads it)"
                        % took)
        try:
            finish_checked(env, px, "exit")
        except Skip as e:
            bugs.append(str(e))
        if bugs:
            raise Skip("; ".join(bugs))
    finally:
        silent.close()


def removed_pool_checks(px, pp, pools):
    """Returns (busy client closed?, seconds from SIGHUP to that)."""
    keep = Raw(("127.0.0.1", pp["keep"]))
    idle = Raw(("127.0.0.1", pp["gone"]))
    eq(idle.mc_store(b"set", b"gone-k", b"v"), b"STORED\r\n", "set via the pool to remove")
    busy = Raw(("127.0.0.1", pp["extra"]))
    busy.send(b"get never-answered\r\n")     # in flight on a server that never replies
    time.sleep(0.2)
    px.rewrite(pools(False)(pp))
    px.log.poll()
    mark = len(px.log.lines)
    t0 = time.monotonic()
    px.hup()
    px.log.wait_for(r"reload: every worker runs the new configuration", 5, mark)
    lines = reload_lines(px.log.lines[mark:])
    eq((lines["gone"][1], lines["gone"][3]), (0, "0" * 16), "removed pool's new epoch and checksum in the log")
    check(idle.closed(2.0), "idle client of a removed pool not disconnected")
    for port in (pp["gone"], pp["extra"]):
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            raise AssertionError("removed pool's port %d still accepts" % port)
        except ConnectionRefusedError:
            pass
    st = px.stats()
    check("gone" not in st and "hang" not in st and "keep" in st, "stats pools: %r" % [
        k for k, v in st.items() if isinstance(v, dict)])
    eq(keep.mc_store(b"set", b"keep-k", b"v"), b"STORED\r\n", "the kept pool still serves")
    eq(keep.mc_get(b"get", b"keep-k"), [(b"keep-k", 0, b"v", None)], "kept pool get")
    # docs/configuration.md: drain_timeout bounds how long in-flight requests may finish
    # "on shutdown or reload"; this client of the removed pool waits on a server that
    # never answers.
    closed = busy.closed(0.5 + 2.5)
    took = time.monotonic() - t0
    for c in (keep, idle, busy):
        c.close()
    return closed, took


# ---------------------------------------------------------------- 1,000 servers

@R.test(ringleader=True)
def reload_of_a_1000_server_ketama_pool_is_fast(env):
    ports = closed_ports(1001)
    srv = ["127.0.0.1:%d:1 s%04d" % (p, i) for i, p in enumerate(ports)]

    def pools(servers):
        return lambda pp: {"big": {"listen": "127.0.0.1:%d" % pp["big"], "distribution": "ketama",
                                   "servers": servers}}
    px = start_proxy(env, lambda pp: {}, pools(srv[:1000]))
    eq(px.stats()["big"]["epoch"], 1, "epoch at start")
    # Change one server (remove s0000, add s1000): a full rebuild, epoch 2.
    px.rewrite(pools(srv[1:])(px.ports))
    want = env.ring.checksum(px.conf_path, "big")
    px.log.poll()
    mark = len(px.log.lines)
    t0 = time.monotonic()
    px.hup()
    polls = 0
    while True:
        st = px.stats()["big"]
        polls += 1
        if st["epoch"] == 2:
            break
        check(time.monotonic() - t0 < patience(5.0), "1,000-server reload not visible within 5 s")
    took = time.monotonic() - t0
    i = px.log.wait_for(r"reload: every worker runs the new configuration", 5, mark)
    pub = [(n, re.search(r"published in ([0-9.]+) ms", ln))
           for n, ln in enumerate(px.log.lines[mark:i], mark)]
    n_pub, m_pub = [(n, m) for n, m in pub if m][0]
    switch_ms = 1000 * (log_time(px.log.lines[i]) - log_time(px.log.lines[n_pub]))
    line = reload_lines(px.log.lines[mark:i])["big"]
    say("1,000-server ketama reload: read, built and published in %.1f ms (log); workers all "
        "switched %.0f ms after that (log, ms resolution); SIGHUP -> epoch 2 on the stats "
        "port %.1f ms (%d stats polls); moved %.4f (floor %.4f)" % (
            float(m_pub.group(1)), switch_ms, 1000 * took, polls, line[6], line[7]))
    eq(st["ring_checksum"], want, "checksum")
    eq(line[4:6], (1, 1), "servers added/removed")
    # an O(n^2) rebuild of 1,000 ketama servers takes many seconds; the bound tells that
    # apart from the milliseconds this takes, and is scaled for the sanitizer build
    check(took < patience(2.0), "took %.2fs" % took)
    finish_checked(env, px, "exit")


# ---------------------------------------------------------------- pinned state on a reload

def rd_conn(addr, *first):
    """A raw Redis connection to addr that sent `first` (one command) and read its reply."""
    c = Raw(addr, timeout=10)
    if first:
        c.send(resp_encode(*first))
        c.read_line()
    return c


def reply_then_eof(c, timeout=15.0):
    """What c receives until the proxy closes it (bounded): None when it stays open."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            c._fill(deadline)
    except EOFError:
        return bytes(c.buf)
    except TimeoutError:
        return None


def wait_blocked(backends, n, timeout=10.0):
    """Until the backends hold n blocked clients in all (a BLPOP has reached its server)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        total = 0
        for b in backends:
            with Raw(b.addr, timeout=5) as d:
                info = d.rd("INFO", "clients").decode()
            total += int(re.search(r"blocked_clients:(\d+)", info).group(1))
        if total >= n:
            return
        time.sleep(0.05)
    raise AssertionError("%d blocked clients never reached the servers" % n)


def pinned_state_clients(addr, key, chan):
    """The four kinds of client state a pinned connection holds, opened through the proxy:
    a pattern subscriber, a channel subscriber, a WATCH of key and a BLPOP 0 of key's list."""
    c = {"psub": rd_conn(addr, "PSUBSCRIBE", "pat*"),
         "sub": rd_conn(addr, "SUBSCRIBE", chan),
         "watch": rd_conn(addr, "WATCH", key)}
    c["psub"].read_until(lambda b: b.count(b"\r\n") >= 5 and len(b) or None)  # rest of it
    c["sub"].read_until(lambda b: b.count(b"\r\n") >= 5 and len(b) or None)
    c["blpop"] = rd_conn(addr)
    c["blpop"].send(resp_encode("BLPOP", key + "-list", "0"))
    return c


def reload_to(proxy, pools):
    """Rewrite the proxy's file with pools (their listen kept) and SIGHUP it."""
    proxy.rewrite(pools)
    os.kill(proxy.proc.pid, signal.SIGHUP)


def expect_told(env, cs, kinds, what):
    """Each client of kinds is closed after the reload (a blocked one after an error
    reply for its BLPOP; a WATCH client without one: it waits for nothing)."""
    for k in kinds:
        got = reply_then_eof(cs[k])
        check(got is not None, "%s: the %s client stays open after the reload" % (what, k))
        if k == "blpop":
            check(got.startswith(b"-ERR"), "%s: BLPOP got %r before the close" % (what, got))
        else:
            check(b"-" not in got[:1] or k in ("psub", "sub"),
                  "%s: the %s client got %r" % (what, k, got))


def single_node_cluster():
    """One cluster-enabled redis-server that owns every slot: a plain pool of that one
    server and a cluster pool seeded by it serve the same keys."""
    from cluster_harness import Node
    n = Node(free_port(), free_port())
    try:
        with Raw(n.addr, timeout=10) as c:
            eq(c.rd("CLUSTER", "ADDSLOTSRANGE", "0", "16383"), "OK")
            deadline = time.monotonic() + 20
            while b"cluster_state:ok" not in c.rd("CLUSTER", "INFO"):
                check(time.monotonic() < deadline, "single-node cluster never ok")
                time.sleep(0.1)
        return n
    except BaseException:
        n.stop()
        raise


def plain_pool(addrs):
    return {"redis": True, "hash": "fnv1a_64", "distribution": "ketama", "hash_tag": "{}",
            "timeout": 2000, "auto_eject_hosts": False,
            "servers": ["%s:1 s%d" % (a, i) for i, a in enumerate(addrs)]}


def cluster_pool(addr):
    return {"redis_cluster": True, "timeout": 2000, "servers": ["%s:1" % addr]}


@R.test
def reload_to_cluster_tells_every_pinned_client(env):
    """A plain pool becomes `redis_cluster: true` (one node owning every slot, the same
    server): a client whose state lives on a pinned connection of the old pool (pattern or
    channel subscriber, WATCH, BLPOP 0) is closed after what it is owed, none orphaned;
    then back to plain, likewise. Counted in sessions_lost and pubsub_closed."""
    node = single_node_cluster()
    px = None
    try:
        px = Proxy({"rd": plain_pool([node.hostport()])}, glob={})
        addr = px.addr()
        for step, pools in (("plain -> cluster", {"rd": cluster_pool(node.hostport())}),
                            ("cluster -> plain", {"rd": plain_pool([node.hostport()])})):
            cs = pinned_state_clients(addr, "{w}k", "ch")
            wait_blocked([node], 1)
            before = px.stats()["rd"]
            reload_to(px, pools)
            expect_told(env, cs, ("psub", "sub", "watch", "blpop"), step)
            after = px.stats()["rd"]
            eq(after["sessions_lost"] - before["sessions_lost"], 2, step + ": sessions_lost")
            eq(after["pubsub_closed"] - before["pubsub_closed"], 2, step + ": pubsub_closed")
            for c in cs.values():
                c.close()
            # the pool serves afterwards: a new client's session and pattern work
            with Raw(addr, timeout=10) as c:
                eq(c.rd("SET", "{w}k", "v"), "OK")
                eq(c.rd("WATCH", "{w}k"), "OK")
                eq(c.rd("MULTI"), "OK")
                eq(c.rd("GET", "{w}k"), "QUEUED")
                eq(c.rd("EXEC"), [b"v"])
    finally:
        if px is not None:
            px.stop()
        node.stop()


@R.test
def reload_removing_a_server_tells_its_pinned_clients(env):
    """A server leaves a plain pool: the WATCH and BLPOP 0 pinned to it, and every pattern
    subscriber (pinned to each server), are closed after what they are owed; a WATCH and a
    channel subscriber on a server that stays go on."""
    pools = lambda addrs: {"rd": plain_pool(addrs)}
    px = Proxy(pools([b.hostport() for b in env.rd]), glob={})
    try:
        addr = px.addr()
        gone = env.rd[-1]
        # a key of the server that goes and one of a server that stays (asked of them)
        keys = {}
        for i in range(500):
            k = "{t%d}k" % i
            with Raw(addr, timeout=10) as c:
                c.rd("SET", k, "1")
            for b in env.rd:
                with Raw(b.addr, timeout=5) as d:
                    if d.rd("EXISTS", k) == 1:
                        keys.setdefault(b is gone, k)
            with Raw(addr, timeout=10) as c:
                c.rd("DEL", k)
            if len(keys) == 2:
                break
        cs = pinned_state_clients(addr, keys[True], keys[False])
        stay = rd_conn(addr, "WATCH", keys[False])
        wait_blocked([gone], 1)
        before = px.stats()["rd"]
        reload_to(px, pools([b.hostport() for b in env.rd[:-1]]))
        expect_told(env, cs, ("psub", "watch", "blpop"), "server removed")
        after = px.stats()["rd"]
        eq(after["sessions_lost"] - before["sessions_lost"], 2, "sessions_lost")
        eq(after["pubsub_closed"] - before["pubsub_closed"], 1, "pubsub_closed")
        # the channel subscriber and the WATCH on a server that stays go on
        stay.send(resp_encode("MULTI") + resp_encode("GET", keys[False]) + resp_encode("EXEC"))
        eq([stay.read_line() for _ in range(3)], [b"+OK\r\n", b"+QUEUED\r\n", b"*1\r\n"])
        stay.close()
        with Raw(addr, timeout=10) as p:
            eq(p.rd("PUBLISH", keys[False], "hi") >= 0, True)
        got = cs["sub"].read_until(lambda b: b.count(b"\r\n") >= 7 and len(b) or None)
        check(got.endswith(b"$2\r\nhi\r\n"), "the channel subscriber got %r" % got)
        for c in cs.values():
            c.close()
    finally:
        px.stop()


if __name__ == "__main__":
    R.main(Env)
