"""test_collapse.py: collapse_gets — a stampede on one key reaches the backend a few times, every reply exact, read-your-writes kept.

What each test proves, against real memcached and redis-server:
  stampede_memcache, stampede_redis
      200 client connections ask for one key at once, through a proxy with one worker and
      one server connection: with collapse_gets: false the backend serves ~200 gets (its
      own get counter), with true one per batch the proxy read (exactly one when
      the proxy is stopped while they send, every thread seen stopped in /proc first),
      with inflight one; every client gets the value byte for byte.
  read_your_writes
      while 150 clients hammer one key, a writer pipelines `set k v_i` + `get k` 300
      times: its get always returns v_i (a get never joins one queued before the
      client's own write); the readers only ever see values that were written.
  flags_must_match
      gets joins only gets (each reply with its own command's form), mg only mg with the
      same flags; mg with N (memcached's own recache guard) never joins.
"""

import fcntl
import os
import signal
import socket
import struct
import sys
import termios
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Memcached, Proxy, Raw, Redis, Runner, check, eq  # noqa: E402

R = Runner("test_collapse", per_test_timeout=60, total_timeout=180)

CLIENTS = 200


def mc_stat(be, name):
    with be.client() as c:
        c.send(b"stats\r\n")
        raw = c.read_until(lambda b: b.find(b"END\r\n") + 5 if b.find(b"END\r\n") >= 0 else None)
    for line in raw.split(b"\r\n"):
        f = line.split()
        if len(f) == 3 and f[1] == name.encode():
            return int(f[2])
    raise AssertionError("no stat %s" % name)


def redis_gets(be):
    with be.client() as c:
        info = c.rd("INFO", "commandstats")
    for line in info.split(b"\r\n"):
        if line.startswith(b"cmdstat_get:"):
            return int(line.split(b"calls=")[1].split(b",")[0])
    return 0


class Env(harness.Env):
    def __init__(self):
        self.mc = Memcached.start()
        self.rd = Redis.start()
        self.proxies = {}
        self.backends = [self.mc, self.rd]

    def proxy(self, kind, collapse):
        key = (kind, collapse)
        if key not in self.proxies:
            be = self.mc if kind == "memcache" else self.rd
            pool = {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 2000,
                    "server_connections": 1, "collapse_gets": collapse,
                    "servers": ["%s:1 alpha" % be.hostport()]}
            if kind == "redis":
                pool["redis"] = True
            self.proxies[key] = Proxy({"p": pool}, workers=1)
        return self.proxies[key]


def unacked(s):
    """Bytes of s not yet acknowledged by its peer (SIOCOUTQ, Linux)."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


def burst(px, request, n, at_once=True):
    """n connections, opened first, then each sends `request`; returns the replies (read
    after every send went out). `at_once`: the proxy is stopped (SIGSTOP) while they send,
    so that every request is there when it next reads: one instant, as a stampede is when
    a hot key expires under a fleet of clients. Else one thread sends them as fast as it
    can (a few ms for 200), which a proxy 50 us from its backend sees as many instants."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(px.addr("p"), 5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    # Every connection accepted before the proxy is stopped (a loaded box may take
    # longer than a sleep), else late accepts are read in later iterations.
    for _ in range(200):
        if not at_once or px.stats()["p"]["client_connections"] >= n:
            break
        time.sleep(0.025)
    if at_once:
        os.kill(px.proc.pid, signal.SIGSTOP)
        # kill() only queues the stop: a thread woken by a first request before it
        # stops would read that one alone. Send once every thread is stopped.
        harness.wait_stopped(px.proc.pid)
    try:
        for s in socks:
            s.sendall(request)
        if at_once:
            # sent is not yet received on a loaded box (loopback delivery may wait for
            # ksoftirqd): wait until the proxy's kernel has acknowledged every byte
            for _ in range(2000):
                if all(unacked(s) == 0 for s in socks):
                    break
                time.sleep(0.005)
            else:
                raise AssertionError("the proxy's kernel did not take every request in 10 s")
    finally:
        if at_once:
            os.kill(px.proc.pid, signal.SIGCONT)
    replies = []
    for s in socks:
        s.settimeout(5)
        buf = b""
        while not (buf.endswith(b"END\r\n") or (buf.startswith(b"$") and buf.count(b"\r\n") >= 2)):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        replies.append(buf)
        s.close()
    return replies


def backend_gets(env, kind):
    return redis_gets(env.rd) if kind == "redis" else mc_stat(env.mc, "cmd_get")


def stampede(env, kind):
    value = os.urandom(300).hex().encode()
    if kind == "redis":
        req, want = harness.resp_encode("GET", "hot"), b"$%d\r\n%s\r\n" % (len(value), value)
    else:
        req, want = b"get hot\r\n", b"VALUE hot 0 %d\r\n%s\r\nEND\r\n" % (len(value), value)
    counts, spread = {}, {}
    for collapse in (False, True, "inflight"):
        px = env.proxy(kind, collapse)
        with px.client() as c:
            if kind == "redis":
                eq(c.rd("SET", "hot", value), "OK")
            else:
                eq(c.mc_store(b"set", b"hot", value), b"STORED\r\n")
        for at_once in (True, False):
            collapsed = px.stats()["p"]["collapsed_gets"]
            before = backend_gets(env, kind)
            replies = burst(px, req, CLIENTS, at_once)
            n = backend_gets(env, kind) - before
            bad = [r[:80] for r in replies if r != want]
            eq(bad, [], "%s collapse_gets %s: replies that are not the value" % (kind, collapse))
            eq(px.stats()["p"]["collapsed_gets"] - collapsed, CLIENTS - n,
               "collapsed_gets counts the gets that shared a reply")
            (counts if at_once else spread)[collapse] = n
    print("  %s: %d clients asking for one key at once; backend gets: collapse_gets false %d, "
          "true %d, inflight %d (sent over a few ms instead: %d, %d, %d)" % (
              kind, CLIENTS, counts[False], counts[True], counts["inflight"], spread[False],
              spread[True], spread["inflight"]))
    eq(counts[False], CLIENTS, "without collapsing every get reaches the backend")
    # every request was there when the proxy next read: one batch, one backend get
    eq(counts[True], 1, "collapse_gets: true: backend gets for %d clients in one batch" % CLIENTS)
    eq(counts["inflight"], 1, "collapse_gets: inflight: backend gets for %d clients" % CLIENTS)
    check(spread[True] < CLIENTS and spread["inflight"] < CLIENTS, "spread bursts collapse too")


@R.test(ringleader=True)
def stampede_memcache(env):
    stampede(env, "memcache")


@R.test(ringleader=True)
def stampede_redis(env):
    stampede(env, "redis")


@R.test(ringleader=True)
def read_your_writes(env):
    for collapse in (True, "inflight"):
        px = env.proxy("memcache", collapse)
        key = harness.unique("ryw")
        with px.client() as c:
            eq(c.mc_store(b"set", key, b"v0"), b"STORED\r\n")
        stop = threading.Event()
        seen, errors = set(), []

        def reader():
            try:
                with Raw(px.addr("p"), timeout=5) as c:
                    while not stop.is_set():
                        vals = c.mc_get(b"get", key)
                        if len(vals) != 1:
                            errors.append(("miss", vals))
                        else:
                            seen.add(vals[0][2])
            except Exception as e:      # noqa: BLE001 - reported below
                errors.append(("reader", repr(e)))

        readers = [threading.Thread(target=reader, daemon=True) for _ in range(150)]
        for t in readers:
            t.start()
        written = {b"v0"}
        stale = []
        try:
            with Raw(px.addr("p"), timeout=5) as w:
                for i in range(1, 301):
                    v = b"v%d" % i
                    written.add(v)
                    w.send(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n" % (key, len(v), v, key))
                    eq(w.read_line(), b"STORED\r\n")
                    vals = w.read_values()
                    if not vals or vals[0][2] != v:
                        stale.append((v, vals))
        finally:
            stop.set()
            for t in readers:
                t.join(10)
        collapsed = px.stats()["p"]["collapsed_gets"]
        eq(stale, [], "collapse_gets %s: the writer's get returned another value" % collapse)
        eq(errors, [], "reader errors")
        eq(seen - written, set(), "values never written")
        print("  collapse_gets %s: 300 set+get pipelines among 150 readers: 0 stale, "
              "%d values seen by readers, %d gets collapsed so far" % (
                  collapse, len(seen), collapsed))
        check(collapsed > 0, "the readers' gets collapsed")


@R.test(ringleader=True)
def flags_must_match(env):
    px = env.proxy("memcache", "inflight")
    key = harness.unique("flags")
    with px.client() as c:
        eq(c.mc_store(b"set", key, b"abc", flags=7), b"STORED\r\n")
    # one pipeline of differing requests for one key: each gets its own command's reply
    reqs = [b"get %s\r\n" % key, b"gets %s\r\n" % key, b"get %s\r\n" % key,
            b"mg %s v f\r\n" % key, b"mg %s v\r\n" % key, b"mg %s v f\r\n" % key,
            b"mg %s v N30\r\n" % key, b"gets %s\r\n" % key]
    with Raw(px.addr("p")) as c:
        c.send(b"".join(reqs))
        out = []
        for r in reqs:
            if r.startswith(b"mg"):
                out.append(c.read_meta())
            else:
                out.append(c.read_values())
    eq(out[0], [(key, 7, b"abc", None)], "get")
    check(out[1][0][3] is not None, "gets carries a cas: %r", out[1])
    eq(out[2], out[0], "get")
    eq(out[3], (b"VA 3 f7", b"abc"), "mg v f")
    eq(out[4], (b"VA 3", b"abc"), "mg v")
    eq(out[5], out[3], "mg v f")
    eq(out[6], (b"VA 3", b"abc"), "mg v N30: a hit")
    eq(out[7], out[1], "gets")


if __name__ == "__main__":
    R.main(Env)
