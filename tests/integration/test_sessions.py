"""test_sessions.py: transactions, WATCH, blocking commands and pool-wide keyspace commands, through the proxy (4 redis-servers) and straight at one redis-server, compared.

Every script of requests runs twice, on a proxy connection and on a connection to a
lone redis-server, once pipelined (all requests in one write) and once a request at a
time, and the replies must be equal (the one intended difference: keys of one
transaction on different servers, answered -CROSSSLOT then -EXECABORT with nothing
applied, as Redis Cluster answers). Also:
  blocked_disconnect_keeps_value  a client blocked in BLPOP closes: its pinned
      connection goes at once, so a later LPUSH stays in the list.
  blocking_timeouts               BLPOP's own timeout applies, not the pool's (300 ms);
      BLPOP 0 waits past it.
  max_pinned_refuses              over max_pinned a blocking command gets a clear -ERR,
      counted in pin_refused; INFO shows the blocked clients.
  blocked_clients_do_not_slow_others  50 clients blocked at once; another client's 1,500
      GET/SETs are all answered right, none waiting for a BLPOP (the p99 is printed).
  keyspace_across_the_pool        SCAN (MATCH, COUNT, TYPE) yields every key once, KEYS,
      DBSIZE, RANDOMKEY, SCRIPT LOAD/EXISTS/FLUSH, equal to one server holding them all.
  hello_while_pinned_switches_the_pin  HELLO 3 / HELLO 2 while WATCH holds a pin: the
      replies through it and EXEC's are in the new protocol, byte for byte as direct.
  blocking_command_goes_out_on_a_ready_pin  a first BLPOP goes out on a connection the
      server had before it was sent (stats ready_pins); upstream's BRPOPLPUSH with
      multiple blocked clients.
  own_requests_never_overtake_a_blocking_one  BLPOP 0.3; RPUSH; LRANGE pipelined, with
      and without a ready pin, as direct.
"""

import hashlib
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Proxy, Raw, Redis, RespError, Runner, Skip, check, eq,  # noqa: E402
                     resp_encode, server_lines, unique)

from harness import patience, resp3_end  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_sessions", per_test_timeout=60, total_timeout=200)
CROSS = RespError("CROSSSLOT Keys in request don't hash to the same server")
ABORT = RespError("EXECABORT Transaction discarded because of previous errors.")


class Env(harness.Env):
    def __init__(self):
        if os.environ.get("RL_PROXY_ADDR") or os.environ.get("RL_REDIS_PROXY_ADDR"):
            raise Skip("compares the proxy's backends with a server of its own")
        if os.environ.get("RL_PROXY", "ringleader") != "ringleader":
            raise Skip("documents ringleader's behaviour")
        self.backends = [Redis.start() for _ in range(4)]
        self.direct = Redis.start()
        self.proxy = Proxy({"rd": self.pool()})
        self.extra = self.proxies = []
        self.more_backends = [self.direct]

    def pool(self, **extra):
        p = {"redis": True, "hash": "fnv1a_64", "distribution": "ketama", "hash_tag": "{}",
             "timeout": 2000, "auto_eject_hosts": False,
             "servers": server_lines(self.backends, ["a", "b", "c", "d"])}
        p.update(extra)
        return p

    def another(self, glob=None, workers=2, **extra):
        px = Proxy({"rd": self.pool(**extra)}, glob=glob, workers=workers)
        self.extra.append(px)
        return px


def run(addr, script, pipelined):
    """The replies to script (a list of argument lists) on a new connection to addr."""
    with Raw(addr, timeout=10) as c:
        if pipelined:
            c.send(b"".join(resp_encode(*cmd) for cmd in script))
            return [c.read_resp() for _ in script]
        return [c.rd(*cmd) for cmd in script]


def both(env, script, pipelined=True):
    """script through the proxy and at the lone server: (proxy's, server's)."""
    return (run(env.proxy.addr(), script, pipelined), run(env.direct.addr, script, pipelined))


def same(env, script, what):
    for pipelined in (True, False):
        got, want = both(env, script, pipelined)
        eq(got, want, "%s (%s)" % (what, "pipelined" if pipelined else "one by one"))
        # each script runs twice: start both sides from the same state again
        for addr in (env.proxy.addr(), env.direct.addr):
            keys = {a for cmd in script for a in cmd[1:] if isinstance(a, str) and "{" in a}
            if keys:
                run(addr, [["DEL", k] for k in sorted(keys)], True)


def tagged(tag):
    """Keys of one hash tag: one server of the pool."""
    return lambda name: "{%s}%s" % (tag, name)


def mixed(prefix, i):
    """A key name unique to this run whose bytes differ all over from i to i + 1: under
    nutcracker's fnv1a_64 with ketama, names that differ only in a counter's last digits
    can all land on one server (for about 4 % of process ids, "{o<pid>-<i>}" put all 200
    of a test's tags on one of four servers)."""
    return prefix + hashlib.sha1(b"%d-%d" % (os.getpid(), i)).hexdigest()[:16]


def other_server_keys(env, n=2):
    """n keys that the pool puts on n different servers (asked of the backends)."""
    found = []
    seen = set()
    for i in range(400):
        k = mixed("spread", i)
        run(env.proxy.addr(), [["SET", k, "1"]], True)
        for j, be in enumerate(env.backends):
            if be.exists_many([k]):
                if j not in seen:
                    seen.add(j)
                    found.append(k)
                break
        run(env.proxy.addr(), [["DEL", k]], True)
        if len(found) == n:
            return found
    raise AssertionError("keys spread over %d servers not found" % n)


@R.test
def transactions_match_one_server(env):
    k = tagged(unique("t").decode())
    scripts = {
        "multi exec": [["MULTI"], ["SET", k("a"), "1"], ["INCR", k("a")], ["GET", k("a")],
                       ["EXEC"], ["GET", k("a")]],
        "keyless only": [["MULTI"], ["PING"], ["ECHO", "x"], ["PING", "y"], ["EXEC"]],
        "empty": [["MULTI"], ["EXEC"]],
        "keyless first": [["MULTI"], ["PING"], ["SET", k("a"), "v"], ["ECHO", "e"],
                          ["GET", k("a")], ["EXEC"]],
        "discard": [["MULTI"], ["SET", k("a"), "1"], ["DISCARD"], ["GET", k("a")], ["EXEC"]],
        "discard deferred": [["MULTI"], ["PING"], ["DISCARD"], ["DISCARD"]],
        "nested multi": [["MULTI"], ["MULTI"], ["SET", k("a"), "2"], ["EXEC"]],
        "unknown command": [["MULTI"], ["FOO"], ["SET", k("a"), "3"], ["EXEC"], ["GET", k("a")]],
        "wrong arity": [["MULTI"], ["SET", k("a"), "3"], ["GET"], ["EXEC"], ["GET", k("a")]],
        "error at exec": [["MULTI"], ["SET", k("s"), "str"], ["LPUSH", k("s"), "x"],
                          ["INCR", k("n")], ["EXEC"]],
        "numkeys queued": [["MULTI"], ["EVAL", "return 1", "x"], ["SET", k("b"), "1"], ["EXEC"]],
        "script in multi": [["MULTI"], ["EVAL", "return redis.call('incr', KEYS[1])", "1",
                                        k("n")], ["EVAL", "return 7", "0"], ["EXEC"]],
        "blocking inside": [["MULTI"], ["LPUSH", k("l"), "a"], ["BLPOP", k("l"), "0"],
                            ["BLPOP", k("l"), "0"], ["EXEC"]],
        "alone": [["EXEC"], ["DISCARD"], ["UNWATCH"], ["PING"]],
        "watch": [["WATCH", k("a")], ["GET", k("a")], ["MULTI"], ["SET", k("a"), "5"], ["EXEC"],
                  ["GET", k("a")]],
        "watch twice": [["WATCH", k("a")], ["WATCH", k("b"), k("c")], ["MULTI"],
                        ["INCR", k("a")], ["EXEC"]],
        "unwatch": [["WATCH", k("a")], ["UNWATCH"], ["SET", k("a"), "1"], ["MULTI"],
                    ["INCR", k("a")], ["EXEC"]],
        "own write": [["WATCH", k("a")], ["SET", k("a"), "own"], ["MULTI"], ["SET", k("a"), "6"],
                      ["EXEC"], ["GET", k("a")]],
        "watch in multi": [["MULTI"], ["WATCH", k("a")], ["SET", k("a"), "7"], ["EXEC"]],
        "reset": [["MULTI"], ["SET", k("a"), "8"], ["RESET"], ["GET", k("a")], ["EXEC"]],
        "wait after watch": [["WATCH", k("a")], ["SET", k("a"), "1"], ["WAIT", "0", "100"],
                             ["UNWATCH"]],
        "wait in multi": [["MULTI"], ["SET", k("a"), "1"], ["WAIT", "0", "0"], ["EXEC"]],
        "mget in multi": [["MULTI"], ["MSET", k("a"), "1", k("b"), "2"],
                          ["MGET", k("a"), k("b"), k("c")], ["DEL", k("a"), k("b")], ["EXEC"]],
        "back to back": [["MULTI"], ["INCR", k("a")], ["EXEC"], ["MULTI"], ["INCR", k("a")],
                         ["EXEC"], ["GET", k("a")], ["WATCH", k("a")], ["MULTI"],
                         ["INCR", k("a")], ["EXEC"]],
    }
    for what, script in scripts.items():
        same(env, script, what)


@R.test
def cross_server_transaction_aborts(env):
    a, b = other_server_keys(env)
    got = run(env.proxy.addr(), [["MULTI"], ["SET", a, "1"], ["SET", b, "2"], ["EXEC"],
                                 ["MGET", a, b]], True)
    eq(got, ["OK", "QUEUED", CROSS, ABORT, [None, None]], "the intended difference")
    # the same from a keyless start, and for WATCH and a blocking command
    got = run(env.proxy.addr(), [["MULTI"], ["PING"], ["SET", a, "1"], ["DEL", a, b],
                                 ["EXEC"], ["EXISTS", a]], True)
    eq(got, ["OK", "QUEUED", "QUEUED", CROSS, ABORT, 0])
    eq(run(env.proxy.addr(), [["WATCH", a, b], ["BLPOP", a, b, "0.1"]], False), [CROSS, CROSS])
    got = run(env.proxy.addr(), [["WATCH", a], ["WATCH", b], ["GET", b], ["UNWATCH"]], True)
    eq(got, ["OK", CROSS, None, "OK"], "one session watches one server's keys")


@R.test
def watch_conflict_and_retry(env):
    for addr in (env.proxy.addr(), env.direct.addr):
        k = "{w%s}k" % unique().decode()
        with Raw(addr) as a, Raw(addr) as b:
            eq(a.rd("WATCH", k), "OK")
            eq(b.rd("SET", k, "other"), "OK")
            eq(a.rd("MULTI"), "OK")
            eq(a.rd("SET", k, "mine"), "QUEUED")
            eq(a.rd("EXEC"), None, "another client's write aborts EXEC")
            eq(a.rd("GET", k), b"other")
            # the retry: watch again, nobody writes, EXEC applies
            eq(a.rd("WATCH", k), "OK")
            eq(a.rd("MULTI"), "OK")
            eq(a.rd("SET", k, "mine"), "QUEUED")
            eq(a.rd("EXEC"), ["OK"])
            eq(b.rd("GET", k), b"mine")


def push_later(addr, cmd, delay):
    def go():
        time.sleep(delay)
        run(addr, [cmd], True)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@R.test
def blocking_commands_match_one_server(env):
    k = tagged(unique("b").decode())
    ready = {
        "blpop": [["RPUSH", k("l"), "a", "b"], ["BLPOP", k("x"), k("l"), "1"], ["BRPOP", k("l"), "1"]],
        "blmove": [["RPUSH", k("l"), "a"], ["BLMOVE", k("l"), k("m"), "LEFT", "RIGHT", "1"],
                   ["BRPOPLPUSH", k("m"), k("l"), "1"], ["LRANGE", k("l"), "0", "-1"]],
        "blmpop": [["RPUSH", k("l"), "a", "b", "c"], ["BLMPOP", "1", "2", k("x"), k("l"), "LEFT",
                                                      "COUNT", "2"]],
        "zsets": [["ZADD", k("z"), "1", "a", "2", "b", "3", "c"], ["BZPOPMIN", k("z"), "1"],
                  ["BZPOPMAX", k("z"), "1"], ["BZMPOP", "1", "1", k("z"), "MIN"]],
        "timeouts": [["BLPOP", k("none"), "0.1"], ["BZPOPMIN", k("none"), "0.05"],
                     ["BLMPOP", "0.1", "1", k("none"), "RIGHT"]],
        "bad timeouts": [["BLPOP", k("l"), "-1"], ["BLPOP", k("l"), "abc"], ["BLPOP", k("l"), "nan"],
                         ["XREAD", "BLOCK", "1.5", "STREAMS", k("s"), "0"],
                         ["BLMPOP", "x", "1", k("l"), "LEFT"], ["PING"]],
        "streams": [["XADD", k("s"), "1-1", "f", "v"], ["XREAD", "BLOCK", "100", "STREAMS", k("s"), "0"],
                    ["XREAD", "COUNT", "1", "BLOCK", "50", "STREAMS", k("s"), k("t"), "$", "0"],
                    ["XGROUP", "CREATE", k("s"), "g", "0"],
                    ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "100", "STREAMS", k("s"), ">"],
                    ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "50", "STREAMS", k("s"), ">"]],
        "wrong type": [["SET", k("str"), "x"], ["BLPOP", k("str"), "1"]],
        "pipelined after": [["BLPOP", k("none"), "0.05"], ["SET", k("a"), "1"], ["GET", k("a")]],
    }
    for what, script in ready.items():
        same(env, script, what)
    # a value pushed while the client waits (BLPOP 0: for ever)
    for addr in (env.proxy.addr(), env.direct.addr):
        key = k("later")
        t = push_later(addr, ["LPUSH", key, "v"], 0.3)
        t0 = time.monotonic()
        eq(run(addr, [["BLPOP", key, "0"], ["LLEN", key]], True), [[key.encode(), b"v"], 0])
        check(time.monotonic() - t0 >= 0.25, "BLPOP returned before the push")
        t.join(5)
        t = push_later(addr, ["XADD", k("st"), "*", "f", "v"], 0.2)
        got = run(addr, [["XREAD", "BLOCK", "0", "STREAMS", k("st"), "$"]], True)
        check(isinstance(got[0], list) and got[0][0][0] == k("st").encode(), "XREAD BLOCK 0: %r" % got)
        t.join(5)
        run(addr, [["DEL", key, k("st")]], True)


def backend_blocked(env):
    n = 0
    for be in env.backends:
        with be.client() as c:
            info = c.rd("INFO", "clients").decode()
        n += int(info.split("blocked_clients:")[1].split("\r")[0])
    return n


def wait_until(pred, timeout=5.0, what="condition"):
    timeout = patience(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("%s not met within %.0f s" % (what, timeout))


@R.test
def blocked_disconnect_keeps_value(env):
    key = "{q%s}" % unique().decode()
    s = socket.create_connection(env.proxy.addr(), 5)
    s.sendall(resp_encode("BLPOP", key, "0"))
    wait_until(lambda: backend_blocked(env) == 1, what="BLPOP blocked on its server")
    s.close()
    t0 = time.monotonic()
    wait_until(lambda: backend_blocked(env) == 0, what="the pinned connection closed")
    gone = time.monotonic() - t0
    with env.proxy.client() as c:
        eq(c.rd("LPUSH", key, "kept"), 1)
        time.sleep(0.05)
        eq(c.rd("LRANGE", key, "0", "-1"), [b"kept"], "the value stays in the list")
        c.rd("DEL", key)
    check(gone < patience(1.5), "pinned connection closed %.2f s after the client" % gone)
    # and a client that closes inside a transaction leaves nothing behind
    with env.proxy.client() as c:
        eq(c.rd("MULTI"), "OK")
        eq(c.rd("SET", key, "never"), "QUEUED")
    time.sleep(0.1)
    with env.proxy.client() as c:
        eq(c.rd("GET", key), None)


@R.test
def blocking_timeouts(env):
    px = env.another(timeout=300)
    key = "{bt%s}" % unique().decode()
    with px.client() as c:
        t0 = time.monotonic()
        eq(c.rd("BLPOP", key, "1"), None, "its own timeout, not the pool's 300 ms")
        took = time.monotonic() - t0
        # not before its own 1 s (strict); after it, a bound against a hang
        check(0.9 <= took < 1 + patience(1), "BLPOP 1 took %.2f s" % took)
        t = push_later(px.addr(), ["RPUSH", key, "late"], 0.8)
        eq(c.rd("BLPOP", key, "0"), [key.encode(), b"late"], "BLPOP 0 waits past the pool timeout")
        t.join(5)
        eq(c.rd("PING"), "PONG")
        # WATCH then a blocking command there: on the session's connection
        eq(c.rd("WATCH", key), "OK")
        eq(c.rd("BLPOP", key, "0.2"), None)
        eq(c.rd("MULTI"), "OK")
        eq(c.rd("SET", key, "x"), "QUEUED")
        eq(c.rd("EXEC"), ["OK"])


@R.test
def max_pinned_refuses(env):
    px = env.another(workers=1, max_pinned=2)
    key = "{mp%s}" % unique().decode()
    held = []
    try:
        for _ in range(2):
            s = socket.create_connection(px.addr(), 5)
            s.sendall(resp_encode("BLPOP", key, "5"))
            held.append(s)
        wait_until(lambda: "blocked_clients:2" in px.client().rd("INFO", "clients").decode(),
                   what="two clients blocked")
        with px.client() as c:
            got = c.rd("BLPOP", key, "5")
            check(isinstance(got, RespError) and "max_pinned" in str(got), "got %r" % got)
            eq(c.rd("MULTI"), "OK")
            got = c.rd("SET", key, "x")
            check(isinstance(got, RespError) and "max_pinned" in str(got), "got %r" % got)
            eq(c.rd("EXEC"), ABORT)
            eq(c.rd("RPUSH", key, "1", "2"), 2)      # shared connections still serve
        for s in held:
            s.settimeout(5)
            check(s.recv(100).startswith(b"*2\r\n"), "a blocked client got its value")
        stats = px.stats()
        pool = stats["rd"]
        check(pool["pin_refused"] >= 2, "pin_refused %r" % pool["pin_refused"])
        check(pool["blocking_requests"] >= 2, "blocking_requests %r" % pool["blocking_requests"])
        eq(pool["blocked_clients"], 0)
    finally:
        for s in held:
            s.close()


def p99_ms(samples):
    samples = sorted(samples)
    return samples[int(len(samples) * 0.99) - 1] * 1000


def getset_latencies(addr, n):
    out = []
    with Raw(addr) as c:
        for i in range(n):
            t0 = time.perf_counter()
            eq(c.rd("SET", "lat%d" % (i % 50), "v"), "OK", "SET %d" % i)
            eq(c.rd("GET", "lat%d" % (i % 50)), b"v", "GET %d" % i)
            out.append(time.perf_counter() - t0)
    return out


@R.test
def blocked_clients_do_not_slow_others(env):
    n = 1500
    base = p99_ms(getset_latencies(env.proxy.addr(), n))
    blocked = []
    try:
        for i in range(50):
            s = socket.create_connection(env.proxy.addr(), 5)
            s.sendall(resp_encode("BLPOP", "{blk%d-%d}" % (os.getpid(), i), "60"))
            blocked.append(s)
        wait_until(lambda: backend_blocked(env) == 50, timeout=10, what="50 clients blocked")
        lat = getset_latencies(env.proxy.addr(), n)
        during, worst = p99_ms(lat), max(lat)
        check(backend_blocked(env) == 50, "still 50 blocked")
    finally:
        for s in blocked:
            s.close()
    print("GET+SET p99: %.3f ms alone, %.3f ms beside 50 blocked clients" % (base, during))
    # Not a latency target (a loaded sanitizer run is noisy): a request queued behind a
    # blocked client would wait for its BLPOP (60 s); every one of the 1,500 round trips
    # answered right and well under that is the outcome.
    check(worst < 20.0, "a round trip took %.1f s beside blocked clients (p99 %.3f ms, "
          "%.3f ms alone)" % (worst, during, base))
    wait_until(lambda: backend_blocked(env) == 0, what="their pinned connections closed")


def scan_all(addr, *opts):
    keys, cursor, calls = [], b"0", 0
    with Raw(addr) as c:
        while True:
            cursor, batch = c.rd("SCAN", cursor, *opts)
            keys += batch
            calls += 1
            check(calls < 10000, "SCAN never ends")
            if cursor == b"0":
                return keys


@R.test
def keyspace_across_the_pool(env):
    for be in env.backends + [env.direct]:
        with be.client() as c:
            c.rd("FLUSHALL")
    keys = ["ks:%d" % i for i in range(300)] + ["other:%d" % i for i in range(50)]
    for addr in (env.proxy.addr(), env.direct.addr):
        with Raw(addr) as c:
            c.send(b"".join(resp_encode("SET", k, "v") for k in keys))
            for _ in keys:
                c.read_resp()
            eq(c.rd("LPUSH", "ks:list", "x"), 1)
    held = [len(be.exists_many(keys)) for be in env.backends]
    check(sum(1 for h in held if h > 0) >= 3, "keys on most servers: %r" % held)
    want = sorted(k.encode() for k in keys + ["ks:list"])
    for opts in ((), ("COUNT", "7"), ("MATCH", "ks:*"), ("TYPE", "list"), ("MATCH", "o*", "COUNT", "1000")):
        got = scan_all(env.proxy.addr(), *opts)
        eq(len(got), len(set(got)), "SCAN %r yields every key once" % (opts,))
        eq(sorted(got), sorted(scan_all(env.direct.addr, *opts)), "SCAN %r" % (opts,))
    eq(sorted(scan_all(env.proxy.addr())), want)
    with env.proxy.client() as p, env.direct.client() as d:
        for cmd in (["KEYS", "*"], ["KEYS", "ks:1*"], ["KEYS", "nothing*"]):
            eq(sorted(p.rd(*cmd)), sorted(d.rd(*cmd)), " ".join(cmd))
        eq(p.rd("DBSIZE"), d.rd("DBSIZE"))
        for _ in range(20):
            check(p.rd("RANDOMKEY") in want, "RANDOMKEY names a key")
        for cmd in (["SCAN", "abc"], ["SCAN", "0", "COUNT", "0"], ["SCAN", "0", "FOO"]):
            eq(p.rd(*cmd), d.rd(*cmd), " ".join(cmd))
        sha = d.rd("SCRIPT", "LOAD", "return redis.call('get', KEYS[1])")
        eq(p.rd("SCRIPT", "LOAD", "return redis.call('get', KEYS[1])"), sha)
        # EVALSHA works on every server, whichever the key's is
        for k in keys[:40]:
            eq(p.rd("EVALSHA", sha, "1", k), b"v")
        eq(p.rd("SCRIPT", "EXISTS", sha, "0" * 40), d.rd("SCRIPT", "EXISTS", sha, "0" * 40))
        eq(p.rd("SCRIPT", "FLUSH"), d.rd("SCRIPT", "FLUSH"))
        eq(p.rd("SCRIPT", "EXISTS", sha), [0])
        got = p.rd("FLUSHDB")
        check(isinstance(got, RespError) and "not supported" in str(got), "FLUSHDB: %r" % got)
        eq(p.rd("DBSIZE"), len(want))
        # empty servers: RANDOMKEY answers nil only when every one is empty
        for be in env.backends[1:]:
            with be.client() as c:
                c.rd("FLUSHALL")
        left = [k for k in want if k in env.backends[0].exists_many(want)]
        if left:
            for _ in range(5):
                check(p.rd("RANDOMKEY") in left, "a key of the one server that has any")
        with env.backends[0].client() as c:
            c.rd("FLUSHALL")
        eq(p.rd("RANDOMKEY"), None)
        eq(scan_all(env.proxy.addr()), [])


# ---------------------------------------------------------------- HELLO while pinned

def hello_normalized(reply):
    """HELLO's reply with what differs by design (server, version, id) blanked."""
    if not reply.startswith((b"%7", b"*14")):
        return reply
    out = reply
    for field in (b"server", b"version", b"id"):
        key = b"$%d\r\n%s\r\n" % (len(field), field)
        i = out.find(key)
        if i >= 0:
            j = i + len(key)
            out = out[:j] + b"<x>" + out[resp3_end(out, j):]
    return out


def raw_replies(addr, script, pipelined):
    """script's replies on a new connection to addr, each as the bytes received."""
    with Raw(addr, timeout=10) as c:
        def one():
            return hello_normalized(bytes(c.read_until(lambda b: resp3_end(b, 0))))
        if pipelined:
            c.send(b"".join(resp_encode(*cmd) for cmd in script))
            return [one() for _ in script]
        out = []
        for cmd in script:
            c.send(resp_encode(*cmd))
            out.append(one())
        return out


@R.test
def hello_while_pinned_switches_the_pin(env):
    """WATCH pins a connection; HELLO 3 (or 2) switches the client's protocol: what the
    pin answers afterwards (a read through the pin, the queued commands, EXEC's array)
    is in the new protocol, byte for byte what one redis-server sends."""
    k = tagged("hp%d" % os.getpid())
    h, z, s = k("h"), k("z"), k("s")
    body = [["HGETALL", h], ["ZRANGE", z, "0", "-1", "WITHSCORES"], ["SMEMBERS", s],
            ["HGET", h, "nope"]]
    setup = [["HSET", h, "a", "1", "b", "2"], ["ZADD", z, "1.5", "m"], ["SADD", s, "x"]]
    scripts = {
        "2->3 inside WATCH": setup + [["WATCH", h], ["HGETALL", h], ["HELLO", "3"]] + body +
                             [["MULTI"]] + body + [["EXEC"]] + body,
        "3->2 inside WATCH": [["HELLO", "3"]] + setup + [["WATCH", h], ["HGETALL", h],
                             ["HELLO", "2"]] + body + [["MULTI"]] + body + [["EXEC"]] + body,
        "2->3->2 inside WATCH": setup + [["WATCH", h, z], ["HELLO", "3"], ["HGETALL", h],
                                ["HELLO", "2"], ["MULTI"]] + body + [["EXEC"], ["HELLO", "3"]] +
                                body,
    }
    for what, script in scripts.items():
        for pipelined in (True, False):
            got = raw_replies(env.proxy.addr(), script, pipelined)
            want = raw_replies(env.direct.addr, script, pipelined)
            for i, (a, b) in enumerate(zip(got, want)):
                check(a == b, "%s (%s): step %d %r differs:\n proxy  %r\n direct %r",
                      what, "pipelined" if pipelined else "one by one", i, script[i], a, b)
            eq(len(got), len(want))
            for addr in (env.proxy.addr(), env.direct.addr):
                run(addr, [["DEL", h, z, s]], True)
    # A pin reset for the next client speaks RESP2 again: a RESP2 client's WATCH now
    # gets RESP2 replies (the reset pin of the 3->2 session is reused).
    eq(run(env.proxy.addr(), setup + [["WATCH", h], ["HGETALL", h], ["UNWATCH"]], False)[-2],
       [b"a", b"1", b"b", b"2"])
    run(env.proxy.addr(), [["DEL", h, z, s]], True)
    # Inside MULTI Redis would queue HELLO and switch at EXEC: the proxy refuses a switch
    # there (documented), as an error Redis gives while queueing: EXEC aborts.
    with Raw(env.proxy.addr(), timeout=10) as c:
        eq(c.rd("MULTI"), "OK")
        r = c.rd("HELLO", "3")
        check(isinstance(r, RespError) and "inside MULTI" in str(r), "HELLO 3 in MULTI: %r", r)
        eq(c.rd("HSET", h, "a", "1"), "QUEUED")
        eq(c.rd("EXEC"), ABORT)
        eq(c.rd("HGETALL", h), [])


# ---------------------------------------------------------------- ready pinned connections

def client_entries(be):
    """The backend's CLIENT LIST as dicts."""
    with be.client() as c:
        text = c.rd("CLIENT", "LIST").decode()
    return [dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
            for line in text.splitlines() if line]


@R.test
def blocking_command_goes_out_on_a_ready_pin(env):
    """Once a server is in use in a pool whose clients use sessions, pinned connections
    to it are open and reset ahead of demand (stats ready_pins): a client's first BLPOP is written at once on one of them,
    a connection the server accepted before the BLPOP was sent (its CLIENT ID is lower
    than that of a connection made just before), so a push another client sends right
    after it cannot overtake it on a shared connection. Then the two BRPOPLPUSH of
    Redis's own 'multiple blocked clients' test, sent just before the LPUSH, are served
    in the order they were sent."""
    px = env.another(workers=1)
    k = tagged(unique("rp").decode())
    key = k("l")
    with Raw(px.addr(), timeout=10) as c:          # the server comes into use
        eq(c.rd("SET", key, "x"), "OK")
    be = next(b for b in env.backends if b.exists_many([key]))
    name = "abcd"[env.backends.index(be)]
    run(px.addr(), [["DEL", key]], True)
    # the pool's first session, on another server: from now on the servers in use keep
    # ready pins (a pool that never pins pays no extra connection)
    for i in range(200):
        other = "{%s}w" % mixed("o", i)
        run(px.addr(), [["SET", other, "1"]], True)
        elsewhere = not be.exists_many([other])
        run(px.addr(), [["DEL", other]], True)
        if elsewhere:
            break
    check(elsewhere, "no key on another server")
    eq(run(px.addr(), [["WATCH", other], ["UNWATCH"]], False), ["OK", "OK"])
    wait_until(lambda: px.stats()["rd"][name]["ready_pins"] >= 2, 10, "two ready pins")
    with be.client() as d:
        mark = d.rd("CLIENT", "ID")           # every connection made before it has a lower id
    a = Raw(px.addr(), timeout=10)
    try:
        a.send(resp_encode("BLPOP", key, "0"))
        wait_until(lambda: any(e.get("cmd") == "blpop" for e in client_entries(be)), 10,
                   "the BLPOP blocked on its server")
        blocked = [e for e in client_entries(be) if e.get("cmd") == "blpop"]
        eq(len(blocked), 1, "blocked clients")
        check(int(blocked[0]["id"]) < mark, "the BLPOP went out on connection id %s, made "
              "after it was sent (ids before it are < %d)" % (blocked[0]["id"], mark))
        eq(run(px.addr(), [["LPUSH", key, "v"]], True), [1])
        eq(a.read_resp(), [key.encode(), b"v"])
    finally:
        a.close()
    # a taken ready pin is replaced; a reset one is kept: ready again for the next client
    wait_until(lambda: px.stats()["rd"][name]["ready_pins"] >= 2, 10, "ready pins again")
    # Redis's 'BRPOPLPUSH with multiple blocked clients', each command sent without
    # waiting: the first blocked client is served first
    t1, t2 = k("t1"), k("t2")
    eq(run(px.addr(), [["DEL", key, t1, t2], ["SET", t1, "nolist"]], True), [0, "OK"])
    rd1, rd2 = Raw(px.addr(), timeout=10), Raw(px.addr(), timeout=10)
    try:
        rd1.send(resp_encode("BRPOPLPUSH", key, t1, "0"))
        rd2.send(resp_encode("BRPOPLPUSH", key, t2, "0"))
        wait_until(lambda: backend_blocked(env) >= 2, 10, "both blocked")
        eq(run(px.addr(), [["LPUSH", key, "foo"]], True), [1])
        r1 = rd1.read_resp()
        check(isinstance(r1, RespError) and str(r1).startswith("WRONGTYPE"), "rd1: %r" % r1)
        eq(rd2.read_resp(), b"foo")
        eq(run(px.addr(), [["LINDEX", t2, "0"], ["DEL", t1, t2]], True), [b"foo", 2])
    finally:
        rd1.close()
        rd2.close()


@R.test
def own_requests_never_overtake_a_blocking_one(env):
    """A client pipelines BLPOP of an empty list with a short timeout, then its own RPUSH
    of that list and an LRANGE: as on one redis-server the BLPOP times out first (nil)
    and the value stays, with a ready pin and without one (a pool that never pinned
    keeps none, and max_pinned 1 would not let it: the first BLPOP waits for a new
    connection, and the RPUSH behind it waits too)."""
    k = tagged(unique("ord").decode())
    script = [["SET", k("s"), "1"], ["BLPOP", k("l"), "0.3"], ["RPUSH", k("l"), "x"],
              ["LRANGE", k("l"), "0", "-1"], ["DEL", k("l"), k("s")]]
    want = run(env.direct.addr, script, True)
    eq(want, ["OK", None, 1, [b"x"], 2])
    for extra in ({}, {"max_pinned": 1}):
        px = env.another(workers=1, **extra)
        if not extra:                   # the pool pins now: ready pins from here on
            run(px.addr(), [["WATCH", k("w")], ["UNWATCH"]], False)
        for _ in range(3):
            eq(run(px.addr(), script, True), want, "pipelined, %r" % (extra,))


if __name__ == "__main__":
    R.main(Env)
