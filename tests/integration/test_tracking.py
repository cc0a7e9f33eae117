"""test_tracking.py: CLIENT TRACKING through the proxy (client-side caching for its clients).

Differential: the same sequence of commands runs against one redis-server directly and
through the proxy (three redis-servers behind it, two workers), and each tracking
client's invalidation messages (keys, in order) are compared.

  default_resp3
      RESP3, default mode: reads (GET, MGET over servers, a read inside MULTI) are
      remembered, and the keys EVAL and EVAL_RO declare; writes by another client, by the
      client itself, a DEL, an unread key, a write made straight on a backend server: the
      same invalidations as from one redis-server (the writer's own after its reply).
  bcast_prefix
      BCAST with PREFIX (and NOLOOP): every write under a prefix, from any client, none
      for the other keys, none for the NOLOOP client's own writes.
  ok_after_servers_track
      the first tracking client of a worker: its +OK comes once every server tracks
      the worker's connection, so a write another client sends after the +OK is one the
      proxy hears of. One server is stopped (SIGSTOP) while CLIENT TRACKING is sent: no
      reply until it runs again, then +OK, and each server's CLIENT LIST shows a
      tracking connection (flag t). Five rounds, each after every server's tracking
      connection has gone; then a client that leaves while its +OK waits (nothing
      leaks, the next client is served).
  optin_optout
      OPTIN: only a read after CLIENT CACHING yes is tracked; OPTOUT: every read but one
      after CLIENT CACHING no.
  resp2_redirect
      RESP2 with REDIRECT to a client subscribed to __redis__:invalidate: the `message`
      form; the target's id is a proxy client id (the target may live on the other
      worker); a gone target gives tracking-redir-broken to a RESP3 tracker.
  writers_on_other_workers
      eight writer connections (two workers: some on the other worker than the reader's,
      unless the kernel put all eight on one, 1 in 256), each writing a key the tracking
      client read: one invalidation each, and tracking_invalidations counts 8.
  command_replies
      CLIENT TRACKING's errors, CLIENT CACHING, GETREDIR, TRACKINGINFO and CLIENT LIST's
      flags= and redir= fields, compared with redis-server's replies.
  flush_and_killed_server
      FLUSHALL through the proxy: one null invalidation (a flush), as from one server;
      a killed backend server: a flush to the tracking client, counted in the pool's
      tracking_flushes (1), tracking_invalidations 0.
  table_bound
      262,145 keys read by one tracking client (MGETs): the worker's table keeps 262,144,
      the oldest is invalidated to its reader.
  node_redis_client_side_cache
      node-redis 5 with clientSideCache (RESP3) through the proxy: a cached GET is served
      from the client's cache, and after another client's SET the next GET returns the new
      value. Skipped without node or the npm packages.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Proxy, Redis, Runner, check, eq  # noqa: E402
from harness.common import Skip, patience  # noqa: E402
from harness.procs import wait_stopped  # noqa: E402
from harness.wire import resp_encode  # noqa: E402

R = Runner("test_tracking", per_test_timeout=60, total_timeout=200)
TOP_SRCDIR = os.environ.get("top_srcdir", os.path.join(os.path.dirname(__file__), "..", ".."))
NODE_DIR = os.path.join(TOP_SRCDIR, "tests", "clients")
SETTLE = 0.25       # how long "no more invalidations" is waited for, scaled by patience()


class Push:
    """A RESP3 push (or a RESP2 pub/sub message array, on a subscribed connection)."""

    def __init__(self, items):
        self.items = items

    def __repr__(self):
        return "Push(%r)" % (self.items,)


def parse(b, pos):
    """One RESP2/RESP3 value at b[pos:]: (value, end) or None when incomplete. Pushes
    come back as Push, errors as ('ERR', text), nulls as None, maps as lists of pairs."""
    i = b.find(b"\r\n", pos)
    if i < 0:
        return None
    t = b[pos:pos + 1]
    line = bytes(b[pos + 1:i])
    p = i + 2
    if t in (b"+",):
        return line.decode("latin-1"), p
    if t == b"-":
        return ("ERR", line.decode("latin-1")), p
    if t == b":":
        return int(line), p
    if t == b"_":
        return None, p
    if t in (b"$", b"="):
        n = int(line)
        if n < 0:
            return None, p
        if len(b) < p + n + 2:
            return None
        return bytes(b[p:p + n]), p + n + 2
    if t in (b"*", b"~", b">", b"%"):
        n = int(line)
        if n < 0:
            return None, p
        if t == b"%":
            n *= 2
        items = []
        for _ in range(n):
            r = parse(b, p)
            if r is None:
                return None
            items.append(r[0])
            p = r[1]
        if t == b">":
            return Push(items), p
        if t == b"%":
            return [(items[j], items[j + 1]) for j in range(0, n, 2)], p
        return items, p
    raise AssertionError("bad RESP type %r" % t)


class Conn:
    """A connection that keeps the invalidations it reads apart from its replies."""

    def __init__(self, addr, resp3=False, subscriber=False):
        self.sock = socket.create_connection(addr, patience(10))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pushes = []
        self.subscriber = subscriber
        if resp3:
            r = self.cmd("HELLO", "3")
            check(isinstance(r, list), "HELLO 3: %r" % (r,))

    def close(self):
        self.sock.close()

    def _read_one(self, deadline):
        while True:
            r = parse(self.buf, 0) if self.buf else None
            if r is not None:
                del self.buf[:r[1]]
                return r[0]
            left = deadline - time.monotonic()
            if left <= 0:
                return TimeoutError
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return TimeoutError
            if not data:
                raise AssertionError("connection closed")
            self.buf += data

    def _is_push(self, v):
        if isinstance(v, Push):
            return True
        return (self.subscriber and isinstance(v, list) and len(v) == 3 and
                v[0] == b"message" and v[1] == b"__redis__:invalidate")

    def cmd(self, *args):
        self.sock.sendall(resp_encode(*args))
        deadline = time.monotonic() + patience(10)
        while True:
            v = self._read_one(deadline)
            if v is TimeoutError:
                raise AssertionError("no reply to %r" % (args,))
            if self._is_push(v):
                self.pushes.append(v)
                continue
            return v

    def settle(self, want=None, seconds=SETTLE):
        """Read invalidations: until `want` have arrived in all (then a short while more),
        or for `seconds` when want is None."""
        if want is not None:
            deadline = time.monotonic() + patience(10)
            while len(self.pushes) < want:
                v = self._read_one(deadline)
                if v is TimeoutError:
                    break
                check(self._is_push(v), "a reply nobody asked for: %r" % (v,))
                self.pushes.append(v)
        deadline = time.monotonic() + patience(seconds)
        while True:
            v = self._read_one(deadline)
            if v is TimeoutError:
                return
            check(self._is_push(v), "a reply nobody asked for: %r" % (v,))
            self.pushes.append(v)

    def take(self):
        """The invalidations read so far, as lists of keys (None: a flush), emptied."""
        out = []
        for p in self.pushes:
            items = p.items if isinstance(p, Push) else p
            if isinstance(p, Push) and items[0] == b"invalidate":
                out.append(None if items[1] is None else list(items[1]))
            elif isinstance(p, Push):
                out.append(("push",) + tuple(items))
            else:
                out.append(None if items[2] is None else list(items[2]))
        self.pushes = []
        return out


def keys_of(msgs):
    """Invalidated keys in order, a flush as None (BCAST batches differ by timing)."""
    out = []
    for m in msgs:
        if m is None or isinstance(m, tuple):
            out.append(m)
        else:
            out.extend(m)
    return out


def dump(doc):
    return harness.ydump(doc) + "\n"


class Env(harness.Env):
    def __init__(self):
        if os.environ.get("RL_PROXY", "ringleader") != "ringleader":
            raise Skip("documents ringleader's behaviour")
        self.ref = Redis.start()
        self.servers = [Redis.start() for _ in range(3)]
        self.backends = [self.ref] + self.servers
        self.pool = {"redis": True, "hash": "fnv1a_64", "distribution": "ketama",
                     "timeout": 3000, "auto_eject_hosts": False, "allow_flush": True,
                     "servers": ["%s:1 s%d" % (be.hostport(), i)
                                 for i, be in enumerate(self.servers)]}
        self.px = Proxy({"rd": dict(self.pool)}, workers=2, dump=dump)
        self.proxies = [self.px]

    def targets(self):
        """(name, address, direct-to-server function) for the reference and the proxy."""
        return [("redis", self.ref.addr), ("proxy", self.px.addr("rd"))]

    def owner_of(self, key):
        for be in self.servers:
            with be.client() as c:
                if c.rd("EXISTS", key) == 1:
                    return be
        return None


def run_both(env, scenario):
    """Run scenario(addr, direct) on the reference server and through the proxy; return
    both results. direct(key) gives a raw client of the server that holds key."""
    results = {}
    for name, addr in env.targets():
        if name == "redis":
            def direct(key):
                return env.ref.client()
        else:
            def direct(key):
                be = env.owner_of(key)
                check(be is not None, "no server holds %r" % key)
                return be.client()
        results[name] = scenario(addr, direct)
    return results["redis"], results["proxy"]


def compare_both(env, scenario, what):
    """run_both, each step of the two runs printed side by side, and the proxy's equal to
    redis-server's."""
    want, got = run_both(env, scenario)
    for w, g in zip(want, got):
        print("  %s: redis %r proxy %r" % (what, w, g))
    eq(got, want, what)


@R.test
def default_resp3(env):
    def scenario(addr, direct):
        a = Conn(addr, resp3=True)
        b = Conn(addr)
        seen = []
        try:
            eq(a.cmd("CLIENT", "TRACKING", "on"), "OK")
            eq(b.cmd("MSET", "d:1", "x", "d:2", "y", "d:3", "z", "d:4", "w", "d:5", "v"), "OK")
            eq(a.cmd("GET", "d:1"), b"x")
            eq(a.cmd("MGET", "d:2", "d:3"), [b"y", b"z"])
            eq(a.cmd("STRLEN", "d:4"), 1)
            eq(b.cmd("SET", "d:1", "x2"), "OK")
            a.settle(1)
            seen.append(("set d:1", a.take()))
            eq(b.cmd("SET", "d:1", "x3"), "OK")          # not read again: nothing
            a.settle()
            seen.append(("set d:1 again", a.take()))
            eq(b.cmd("DEL", "d:2"), 1)
            a.settle(1)
            seen.append(("del d:2", a.take()))
            eq(b.cmd("SET", "d:9", "u"), "OK")           # never read: nothing
            a.settle()
            seen.append(("unread", a.take()))
            eq(a.cmd("SET", "d:4", "mine"), "OK")        # its own write: after the reply
            a.settle(1)
            seen.append(("own write", a.take()))
            with direct("d:3") as d:                      # written on the server itself
                eq(d.rd("SET", "d:3", "elsewhere"), "OK")
            a.settle(1)
            seen.append(("direct write", a.take()))
            # a read inside a transaction is remembered too
            eq(a.cmd("MULTI"), "OK")
            eq(a.cmd("GET", "d:5"), "QUEUED")
            eq(a.cmd("EXEC"), [b"v"])
            eq(b.cmd("APPEND", "d:5", "!"), 2)
            a.settle(1)
            seen.append(("read in multi", a.take()))
            # a script's declared keys are remembered, as Redis remembers a script's reads
            eq(a.cmd("EVAL", "return redis.call('GET', KEYS[1])", "1", "d:6"), None)
            eq(a.cmd("EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "d:7"), None)
            eq(b.cmd("MSET", "d:6", "s", "d:7", "t"), "OK")
            a.settle(2)
            seen.append(("read by scripts", sorted(keys_of(a.take()))))
            eq(a.cmd("CLIENT", "TRACKING", "off"), "OK")
            eq(a.cmd("GET", "d:1"), b"x3")
            eq(b.cmd("SET", "d:1", "x4"), "OK")           # tracking off: nothing
            a.settle()
            seen.append(("off", a.take()))
        finally:
            a.close()
            b.close()
        return seen

    compare_both(env, scenario, "invalidations, default mode")


@R.test
def bcast_prefix(env):
    def scenario(addr, direct):
        a = Conn(addr, resp3=True)
        n = Conn(addr, resp3=True)
        b = Conn(addr)
        seen = []
        try:
            eq(b.cmd("SET", "user:2", "y"), "OK")         # before tracking: written straight later
            eq(a.cmd("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:", "PREFIX", "cfg:"), "OK")
            eq(n.cmd("CLIENT", "TRACKING", "on", "BCAST", "NOLOOP", "PREFIX", "cfg:"), "OK")
            eq(b.cmd("SET", "user:1", "a"), "OK")
            a.settle(1)
            n.settle()
            seen.append(("user:1", keys_of(a.take()), keys_of(n.take())))
            eq(b.cmd("SET", "other", "a"), "OK")
            a.settle()
            n.settle()
            seen.append(("other", keys_of(a.take()), keys_of(n.take())))
            eq(b.cmd("SET", "cfg:a", "1"), "OK")
            eq(b.cmd("SET", "cfg:b", "2"), "OK")
            a.settle(2)
            n.settle(2)
            seen.append(("cfg", sorted(keys_of(a.take())), sorted(keys_of(n.take()))))
            eq(n.cmd("SET", "cfg:c", "3"), "OK")          # NOLOOP: not to itself
            a.settle(1)
            n.settle()
            seen.append(("noloop", keys_of(a.take()), keys_of(n.take())))
            with direct("user:2") as d:
                eq(d.rd("SET", "user:2", "z"), "OK")
            a.settle(1)
            n.settle()
            seen.append(("direct", keys_of(a.take()), keys_of(n.take())))
        finally:
            a.close()
            n.close()
            b.close()
        return seen

    compare_both(env, scenario, "invalidations, BCAST")


def tracking_conns(be):
    """How many of be's clients track (CLIENT LIST flags with t): the proxy's own."""
    with be.client() as c:
        listing = c.rd("CLIENT", "LIST")
    if isinstance(listing, bytes):
        listing = listing.decode("latin-1")
    n = 0
    for line in listing.splitlines():
        for field in line.split(" "):
            if field.startswith("flags=") and "t" in field[6:]:
                n += 1
    return n


@R.test
def ok_after_servers_track(env):
    addr = env.px.addr("rd")
    for rnd in range(5):
        deadline = time.monotonic() + patience(10)
        while any(tracking_conns(be) for be in env.servers):
            check(time.monotonic() < deadline,
                  "round %d: tracking connections left after their clients closed" % rnd)
            time.sleep(0.02)
        a = Conn(addr, resp3=True)
        stopped = env.servers[rnd % len(env.servers)]
        try:
            opts = ("BCAST", "PREFIX", "t:") if rnd % 2 else ()
            os.kill(stopped.proc.pid, signal.SIGSTOP)
            try:
                wait_stopped(stopped.proc.pid)
                a.sock.sendall(resp_encode("CLIENT", "TRACKING", "on", *opts))
                early = a._read_one(time.monotonic() + 0.2)
            finally:
                os.kill(stopped.proc.pid, signal.SIGCONT)
            eq(early, TimeoutError, "round %d: a reply while server %d was stopped"
               % (rnd, rnd % len(env.servers)))
            eq(a._read_one(time.monotonic() + patience(10)), "OK")
            got = [tracking_conns(be) for be in env.servers]
            check(all(n >= 1 for n in got),
                  "round %d: +OK before every server tracked: %r" % (rnd, got))
            eq(a.cmd("PING"), "PONG")           # the held input goes on
        finally:
            a.close()
    # a client that leaves while its +OK waits: its message goes with it (the sanitizer
    # build's clean stop says nothing leaked), and the others are served
    deadline = time.monotonic() + patience(10)
    while any(tracking_conns(be) for be in env.servers):
        check(time.monotonic() < deadline, "tracking connections left")
        time.sleep(0.02)
    stopped = env.servers[0]
    gone = Conn(addr, resp3=True)
    os.kill(stopped.proc.pid, signal.SIGSTOP)
    try:
        wait_stopped(stopped.proc.pid)
        gone.sock.sendall(resp_encode("CLIENT", "TRACKING", "on") + resp_encode("GET", "g:1"))
        time.sleep(0.1)
        gone.close()
        time.sleep(0.1)
    finally:
        os.kill(stopped.proc.pid, signal.SIGCONT)
    b = Conn(addr, resp3=True)
    try:
        eq(b.cmd("CLIENT", "TRACKING", "on"), "OK")
        eq(b.cmd("GET", "g:1"), None)
    finally:
        b.close()


@R.test
def optin_optout(env):
    def scenario(addr, direct):
        a = Conn(addr, resp3=True)
        o = Conn(addr, resp3=True)
        b = Conn(addr)
        seen = []
        try:
            eq(a.cmd("CLIENT", "TRACKING", "on", "OPTIN"), "OK")
            eq(o.cmd("CLIENT", "TRACKING", "on", "OPTOUT"), "OK")
            eq(b.cmd("MSET", "o:1", "a", "o:2", "b", "o:3", "c", "o:4", "d"), "OK")
            eq(a.cmd("GET", "o:1"), b"a")                  # not tracked
            eq(a.cmd("CLIENT", "CACHING", "yes"), "OK")
            eq(a.cmd("GET", "o:2"), b"b")                  # tracked
            eq(a.cmd("GET", "o:3"), b"c")                  # not: CACHING was for one
            eq(o.cmd("GET", "o:1"), b"a")                  # tracked
            eq(o.cmd("CLIENT", "CACHING", "no"), "OK")
            eq(o.cmd("GET", "o:4"), b"d")                  # not tracked
            eq(b.cmd("MSET", "o:1", "A", "o:2", "B", "o:3", "C", "o:4", "D"), "OK")
            a.settle(1)
            o.settle(1)
            seen.append((keys_of(a.take()), keys_of(o.take())))
        finally:
            a.close()
            o.close()
            b.close()
        return seen

    compare_both(env, scenario, "invalidations, OPTIN/OPTOUT")


@R.test
def resp2_redirect(env):
    def scenario(addr, direct):
        t = Conn(addr, subscriber=True)
        a = Conn(addr)
        b = Conn(addr)
        a3 = Conn(addr, resp3=True)
        seen = []
        try:
            tid = t.cmd("CLIENT", "ID")
            eq(t.cmd("SUBSCRIBE", "__redis__:invalidate"), [b"subscribe", b"__redis__:invalidate", 1])
            eq(a.cmd("CLIENT", "TRACKING", "on", "REDIRECT", str(tid)), "OK")
            eq(a.cmd("CLIENT", "GETREDIR"), tid)
            eq(b.cmd("MSET", "r:1", "a", "r:2", "b"), "OK")
            eq(a.cmd("MGET", "r:1", "r:2"), [b"a", b"b"])
            eq(b.cmd("SET", "r:1", "A"), "OK")
            t.settle(1)
            seen.append(("redirect", t.take(), a.take()))
            eq(b.cmd("FLUSHALL"), "OK")
            t.settle(1)
            seen.append(("flushall", t.take()))
            # a RESP3 tracker whose target goes away
            eq(a3.cmd("CLIENT", "TRACKING", "on", "REDIRECT", str(tid)), "OK")
            eq(a3.cmd("GET", "r:2"), None)
            t.close()
            time.sleep(patience(0.2))
            eq(b.cmd("SET", "r:2", "B"), "OK")
            a3.settle(1)
            msgs = a3.take()
            seen.append(("broken", [m if not isinstance(m, tuple) else m[:2] for m in msgs]))
            info = a3.cmd("CLIENT", "TRACKINGINFO")
            seen.append(("info", info[0][1]))
            line = a3.cmd("CLIENT", "INFO").decode()
            seen.append(("flags", [f for f in line.split() if f.startswith("flags=")]))
        finally:
            a.close()
            b.close()
            a3.close()
        return seen

    compare_both(env, scenario, "RESP2 REDIRECT")


@R.test(ringleader=True)
def writers_on_other_workers(env):
    addr = env.px.addr("rd")
    a = Conn(addr, resp3=True)
    writers = [Conn(addr) for _ in range(8)]
    try:
        eq(a.cmd("CLIENT", "TRACKING", "on"), "OK")
        before = env.px.stats()["rd"]["tracking_invalidations"]
        keys = ["w:%d" % i for i in range(8)]
        for k in keys:
            eq(a.cmd("GET", k), None)
        for w, k in zip(writers, keys):
            eq(w.cmd("SET", k, "v"), "OK")
        a.settle(8)
        got = keys_of(a.take())
        eq(sorted(got), sorted(k.encode() for k in keys), "one invalidation per written key")
        eq(env.px.stats()["rd"]["tracking_invalidations"] - before, 8,
           "tracking_invalidations counts each message sent")
        # the value a tracked reader sees after the invalidation is the new one
        for k in keys:
            eq(a.cmd("GET", k), b"v")
    finally:
        a.close()
        for w in writers:
            w.close()


@R.test
def command_replies(env):
    def scenario(addr, direct):
        c = Conn(addr, resp3=True)
        c2 = Conn(addr)
        out = []
        try:
            for args in (("CLIENT", "TRACKING", "on", "PREFIX", "x"),
                         ("CLIENT", "TRACKING", "on", "BCAST", "OPTIN"),
                         ("CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"),
                         ("CLIENT", "TRACKING", "on", "REDIRECT", "987654"),
                         ("CLIENT", "TRACKING", "on", "REDIRECT", "abc"),
                         ("CLIENT", "TRACKING", "on", "FOO"),
                         ("CLIENT", "TRACKING", "maybe"),
                         ("CLIENT", "CACHING", "yes"),
                         ("CLIENT", "GETREDIR"),
                         ("CLIENT", "TRACKINGINFO"),
                         ("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "ab", "PREFIX", "a"),
                         ("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "b", "PREFIX", "a"),
                         ("CLIENT", "TRACKINGINFO"),
                         ("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "bc"),
                         ("CLIENT", "TRACKING", "on"),
                         ("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "c", "NOLOOP"),
                         ("CLIENT", "TRACKINGINFO"),
                         ("CLIENT", "GETREDIR"),
                         ("CLIENT", "CACHING", "no"),
                         ("CLIENT", "TRACKING", "off"),
                         ("CLIENT", "TRACKING", "on", "OPTIN"),
                         ("CLIENT", "CACHING", "no"),
                         ("CLIENT", "CACHING", "maybe"),
                         ("CLIENT", "CACHING", "yes"),
                         ("CLIENT", "TRACKINGINFO"),
                         ("CLIENT", "TRACKING", "on", "OPTOUT"),
                         ("CLIENT", "TRACKINGINFO")):
                out.append((args, c.cmd(*args)))
            line = c.cmd("CLIENT", "INFO").decode()
            out.append(("info", [f for f in line.split() if f.split("=")[0] in ("flags", "redir")]))
            eq(c.cmd("CLIENT", "TRACKING", "off"), "OK")
            eq(c.cmd("CLIENT", "TRACKING", "on", "BCAST"), "OK")
            line = c.cmd("CLIENT", "INFO").decode()
            out.append(("info bcast", [f for f in line.split() if f.split("=")[0] in ("flags", "redir")]))
            eq(c.cmd("RESET"), "RESET")
            out.append(("after reset", c2.cmd("CLIENT", "TRACKINGINFO"), c.cmd("CLIENT", "GETREDIR")))
            line = c.cmd("CLIENT", "INFO").decode()
            out.append(("info reset", [f for f in line.split() if f.split("=")[0] in ("flags", "redir")]))
            out.append(("resp2 info", c2.cmd("CLIENT", "TRACKINGINFO")))
        finally:
            c.close()
            c2.close()
        return out

    want, got = run_both(env, scenario)
    bad = 0
    for w, g in zip(want, got):
        if w != g:
            bad += 1
            print("  DIFF %r\n     redis %r\n     proxy %r" % (w[0], w[1:], g[1:]))
    eq(len(got), len(want))
    eq(bad, 0, "replies that differ")


@R.test
def flush_and_killed_server(env):
    def scenario(addr, direct):
        a = Conn(addr, resp3=True)
        b = Conn(addr)
        try:
            eq(a.cmd("CLIENT", "TRACKING", "on"), "OK")
            eq(a.cmd("MGET", "f:1", "f:2", "f:3", "f:4"), [None] * 4)
            eq(b.cmd("FLUSHALL"), "OK")
            a.settle(1)
            return a.take()
        finally:
            a.close()
            b.close()

    compare_both(env, scenario, "FLUSHALL")

    # a server of the proxy's pool dies: its tracking connection is lost, and every
    # tracking client is told to flush
    victim = Redis.start()
    px = Proxy({"k": {"redis": True, "timeout": 2000, "auto_eject_hosts": False,
                      "servers": ["%s:1 v" % victim.hostport()]}}, workers=1, dump=dump)
    env.proxies.append(px)
    env.backends.append(victim)
    a = Conn(px.addr("k"), resp3=True)
    try:
        eq(a.cmd("CLIENT", "TRACKING", "on"), "OK")
        eq(a.cmd("GET", "kk"), None)
        victim.proc.kill()
        a.settle(1)
        eq(a.take(), [None], "a flush after the server's loss")
        # counted: the one flush sent, no invalidation with keys
        deadline = time.monotonic() + patience(10)
        while px.stats()["k"]["tracking_flushes"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        st = px.stats()["k"]
        eq((st["tracking_flushes"], st["tracking_invalidations"]), (1, 0), "tracking counters")
    finally:
        a.close()


@R.test(ringleader=True)
def table_bound(env):
    """The keys a worker remembers are bounded (262,144): one more read key evicts the
    oldest, whose reader gets its invalidation, as Redis's tracking-table-max-keys does."""
    limit = 262144
    a = Conn(env.px.addr("rd"), resp3=True)
    try:
        eq(a.cmd("CLIENT", "TRACKING", "on"), "OK")
        batch = 2048
        sent = 0
        for start in range(0, limit + 1, batch):
            keys = ["tb:%d" % i for i in range(start, min(start + batch, limit + 1))]
            a.sock.sendall(resp_encode("MGET", *keys))
            sent += 1
        for _ in range(sent):
            deadline = time.monotonic() + patience(30)
            while True:
                v = a._read_one(deadline)
                check(v is not TimeoutError, "MGET reply late")
                if a._is_push(v):
                    a.pushes.append(v)
                    continue
                check(isinstance(v, list), "MGET: %r" % (v,))
                break
        a.settle(1)
        eq(keys_of(a.take()), [b"tb:0"], "the oldest key evicted with an invalidation")
    finally:
        a.close()


@R.test(ringleader=True)
def node_redis_client_side_cache(env):
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        raise Skip("node not installed (scripts/deps)")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "redis")):
        raise Skip("npm package redis not installed: npm ci in tests/clients (scripts/deps)")
    out = subprocess.run([node, os.path.join(NODE_DIR, "tracking.js"), str(env.px.addr("rd")[1])],
                         capture_output=True, text=True, timeout=patience(60), cwd=NODE_DIR,
                         stdin=subprocess.DEVNULL)
    print(out.stdout.rstrip())
    if out.stderr.strip():
        print(out.stderr.rstrip()[-2000:])
    check(out.returncode == 0 and " 0 failed" in out.stdout,
          "node-redis client-side cache failed (exit %d)" % out.returncode)


if __name__ == "__main__":
    R.main(Env)
