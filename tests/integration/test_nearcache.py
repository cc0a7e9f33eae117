"""test_nearcache.py: near_cache — gets answered from the proxy's copy, never stale.

What each test proves, against real redis-server and memcached:
  redis_hits_exact
      a value read once is served from the proxy: once its fill is in, 40 GETs reach the
      server 0 times, RESP2 and RESP3 clients get the bytes the
      server sends, a missing key (null) and a wrong type (error) are never kept.
  hot_keys_only
      keys: hot: a key the hot-key sketch names is served from the cache, keys read a
      few times are never kept.
  transaction_writes
      a write inside MULTI/EXEC evicts before it is sent: the next GET on that connection
      and on another returns the transaction's value (300 rounds).
  flushall_through_proxy
      FLUSHALL through the proxy empties the cache of every worker at once.
  writes_through_proxy_then_read_elsewhere
      two workers, 1,500 pairs: SET k v_i on one connection, then GET k on another
      (either worker): always v_i, though k is cached all along (0 stale); DEL, EXPIRE
      and FLUSHALL through the proxy evict at once too.
  write_straight_to_server
      a SET made by another client of the server: once the proxy counted the
      invalidation, every read through it returns the new value (never the old one).
  race_invalidation_wins
      DEBUG SLEEP on the server, then a write of the key queued behind it, then a GET
      through the proxy (whose fill lands behind the write): the invalidation that
      reaches the tracking connection before the fill's reply wins — the fill is not
      kept (near_cache_fill_races), and no read returns the old value.
  server_restart
      a cached key's server is killed and restarted (empty): the lost tracking
      connection evicts its entries; reads through the proxy never return the old value.
  reload_moves_keys
      a reload that moves keys to another server: reads return the new owner's value.
  selected_database
      a client that SELECTed another database reads that database's value, never the
      pool database's cached copy of the same name.
  memcached_ttl
      memcached pool with ttl_ms: hits from the proxy; writes through the proxy are seen
      at once; a write made elsewhere is seen once ttl_ms has passed; a memcached pool
      without ttl_ms is a configuration error.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Memcached, Proxy, Raw, Redis, Runner, check, eq  # noqa: E402
from harness.common import binary, patience  # noqa: E402

R = Runner("test_nearcache", per_test_timeout=60, total_timeout=240)


def redis_gets(be):
    with be.client() as c:
        info = c.rd("INFO", "commandstats")
    for line in info.split(b"\r\n"):
        if line.startswith(b"cmdstat_get:"):
            return int(line.split(b"calls=")[1].split(b",")[0])
    return 0


def nc(px, pool, name):
    return px.stats()[pool]["near_cache_" + name]


def wait_for(pred, what, seconds=10):
    deadline = time.monotonic() + patience(seconds)
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def asleep(probe):
    """Wait until the server stops answering (DEBUG SLEEP began): a PING unanswered for
    400 ms. Returns the PINGs sent, whose replies come once it wakes."""
    sent = 0
    for _ in range(100):
        probe.send(b"PING\r\n")
        sent += 1
        probe.sock.settimeout(0.4)
        try:
            data = probe.sock.recv(64)
        except OSError:
            return sent
        probe.buf += data
        while probe.buf.startswith(b"+PONG\r\n"):
            del probe.buf[:7]
            sent -= 1
    raise AssertionError("the server never slept")


def dump(doc):
    return harness.ydump(doc) + "\n"


def rd_pool(servers, **nc_conf):
    conf = {"size": "1MiB", "keys": "all"}
    conf.update(nc_conf)
    return {"redis": True, "hash": "fnv1a_64", "distribution": "ketama", "timeout": 3000,
            "server_connections": 1, "near_cache": conf,
            "servers": ["%s:1 s%d" % (be.hostport(), i) for i, be in enumerate(servers)]}


class Env(harness.Env):
    def __init__(self):
        # DEBUG SLEEP holds the server still for the race (off by default since 7.0)
        self.rd = Redis.start(extra=("--enable-debug-command", "yes"))
        self.rd2 = Redis.start()
        self.mc = Memcached.start()
        self.backends = [self.rd, self.rd2, self.mc]
        self.px = Proxy({"rd": rd_pool([self.rd])}, workers=2, dump=dump)
        self.proxies = [self.px]

    def own_proxy(self, pools, workers=1):
        px = Proxy(pools, workers=workers, dump=dump)
        self.proxies.append(px)
        return px


@R.test(ringleader=True)
def redis_hits_exact(env):
    px = env.px
    val = os.urandom(200).hex().encode()
    with px.client("rd") as c, env.rd.client() as d:
        eq(c.rd("SET", "hx", val), "OK")
        eq(c.rd("GET", "hx"), val)          # forwarded, and the fill sent beside it
        wait_for(lambda: nc(px, "rd", "entries") >= 1, "the fill")
        before, hits = redis_gets(env.rd), nc(px, "rd", "hits")
        for _ in range(40):
            eq(c.rd("GET", "hx"), val)
        got = redis_gets(env.rd) - before
        eq(got, 0, "GETs that reached the server")
        eq(nc(px, "rd", "hits") - hits, 40, "hits")
        # byte for byte: a RESP3 client, and what the server itself answers
        c.send(b"*1\r\n$3\r\nGET\r\n")
        c3 = px.client("rd")
        c3.send(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n")
        c3.read_until(lambda b: b.find(b"+PONG\r\n") + 7 if b.find(b"+PONG\r\n") >= 0 else None)
        d.send(b"*2\r\n$3\r\nGET\r\n$2\r\nhx\r\n")
        want = d.read_until(lambda b: len(b) if b.endswith(val + b"\r\n") else None)
        c3.send(b"*2\r\n$3\r\nGET\r\n$2\r\nhx\r\n")
        eq(c3.read_until(lambda b: len(b) if b.endswith(val + b"\r\n") else None), want)
        c3.close()
        # a null and an error are forwarded every time, in each client's shape
        c.read_until(lambda b: len(b) if b.endswith(b"\r\n") else None)
        before = redis_gets(env.rd)
        for _ in range(5):
            eq(c.rd("GET", "hx-missing"), None)
        d.rd("LPUSH", "hx-list", "a")
        for _ in range(3):
            c.send(b"*2\r\n$3\r\nGET\r\n$7\r\nhx-list\r\n")
            check(c.read_line().startswith(b"-WRONGTYPE"), "GET of a list is an error")
        check(redis_gets(env.rd) - before >= 8, "nulls and errors were not all forwarded")


@R.test(ringleader=True, timeout=120)
def writes_through_proxy_then_read_elsewhere(env):
    px = env.px
    writers = [px.client("rd") for _ in range(2)]
    readers = [px.client("rd") for _ in range(4)]
    stale = 0
    try:
        eq(writers[0].rd("SET", "rw", "v0"), "OK")
        for _ in range(5):
            eq(readers[0].rd("GET", "rw"), b"v0")
        for i in range(1, 1501):
            v = b"v%d" % i
            eq(writers[i % 2].rd("SET", "rw", v), "OK")
            got = readers[i % 4].rd("GET", "rw")
            if got != v:
                stale += 1
            # once more on that connection (its worker's fill is in, or nearly: a hit) and
            # on another (maybe the other worker, whose copy the write made invalid)
            if readers[i % 4].rd("GET", "rw") != v:
                stale += 1
            if readers[(i + 1) % 4].rd("GET", "rw") != v:
                stale += 1
        eq(stale, 0, "stale reads")
        check(nc(px, "rd", "hits") > 0, "the key was served from the cache meanwhile")
        # DEL, EXPIRE, FLUSHALL through the proxy
        for cmd, want in ((("DEL", "rw"), None), (("SET", "rw", "x"), b"x"),
                          (("PEXPIRE", "rw", "1"), None)):
            writers[0].rd(*cmd)
            if cmd[0] == "PEXPIRE":
                time.sleep(0.01)
            for r in readers:
                eq(r.rd("GET", "rw"), want, "after %s" % (cmd,))
    finally:
        for s in writers + readers:
            s.close()


@R.test(ringleader=True)
def hot_keys_only(env):
    """keys: hot (the default): a key read often enough for the hot-key sketch to name it
    is served from the cache; keys read a few times are never kept."""
    px = env.own_proxy({"rd": rd_pool([env.rd], keys="hot")}, workers=1)
    with px.client("rd") as c:
        eq(c.rd("SET", "hot1", "h"), "OK")
        for i in range(10):
            eq(c.rd("SET", "cold%d" % i, "c"), "OK")
        # the sketch is read again once a second: bounded polling, not a sleep
        deadline = time.monotonic() + patience(10)
        while nc(px, "rd", "hits") == 0 and time.monotonic() < deadline:
            for _ in range(20):
                eq(c.rd("GET", "hot1"), b"h")
        check(nc(px, "rd", "hits") > 0, "the hot key was never served from the cache")
        for i in range(10):
            for _ in range(3):
                eq(c.rd("GET", "cold%d" % i), b"c")
        eq(nc(px, "rd", "entries"), 1, "values held (the hot key only)")
    px.stop()


@R.test(ringleader=True)
def transaction_writes(env):
    """A write inside MULTI/EXEC evicts before it is sent: the client's next GET, and
    every other connection's, returns the value the transaction wrote."""
    px = env.px
    with px.client("rd") as c, px.client("rd") as o:
        for i in range(300):
            v = b"t%d" % i
            eq(o.rd("GET", "tx"), None if i == 0 else b"t%d" % (i - 1))
            eq(o.rd("GET", "tx"), None if i == 0 else b"t%d" % (i - 1))
            c.send(b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$2\r\ntx\r\n$%d\r\n%s\r\n"
                   b"*1\r\n$4\r\nEXEC\r\n*2\r\n$3\r\nGET\r\n$2\r\ntx\r\n" % (len(v), v))
            eq(c.read_resp(), "OK")
            eq(c.read_resp(), "QUEUED")
            eq(c.read_resp(), ["OK"])
            eq(c.read_resp(), v, "GET after EXEC on the same connection")
            eq(o.rd("GET", "tx"), v, "GET after EXEC on another connection")


@R.test(ringleader=True)
def flushall_through_proxy(env):
    px = env.own_proxy({"rd": dict(rd_pool([env.rd]), allow_flush=True)}, workers=2)
    with px.client("rd") as c, px.client("rd") as c2:
        eq(c.rd("SET", "fl", "1"), "OK")
        for _ in range(4):
            eq(c2.rd("GET", "fl"), b"1")
        eq(c.rd("FLUSHALL"), "OK")
        eq(c2.rd("GET", "fl"), None)
        eq(c.rd("GET", "fl"), None)
    px.stop()


@R.test(ringleader=True)
def write_straight_to_server(env):
    px = env.px
    with px.client("rd") as c, env.rd.client() as d:
        for i in range(30):
            old, new = b"old%d" % i, b"new%d" % i
            eq(d.rd("SET", "sw", old), "OK")
            # cached (the value was filled and is served)
            wait_for(lambda: c.rd("GET", "sw") == old, "the old value")
            c.rd("GET", "sw")
            inv = nc(px, "rd", "evict_invalidation")
            eq(d.rd("SET", "sw", new), "OK")
            seen_new = False
            deadline = time.monotonic() + patience(10)
            while time.monotonic() < deadline:
                processed = nc(px, "rd", "evict_invalidation") > inv
                got = c.rd("GET", "sw")
                if processed:
                    eq(got, new, "a read after the invalidation was processed")
                if got == new:
                    seen_new = True
                if processed and seen_new:
                    break
            check(seen_new, "the server's write became visible through the proxy")
            for _ in range(5):
                eq(c.rd("GET", "sw"), new)


@R.test(ringleader=True)
def race_invalidation_wins(env):
    # one worker: the fill is on the one tracking connection this test reads the
    # counters of
    px = env.own_proxy({"rd": rd_pool([env.rd], ttl_ms=50)}, workers=1)
    raced = 0
    with px.client("rd") as c, env.rd.client() as a, env.rd.client() as probe:
        for i in range(3):
            old, new = b"r-old%d" % i, b"r-new%d" % i
            eq(a.rd("SET", "race", old), "OK")
            # a write made elsewhere: seen once its invalidation arrives
            wait_for(lambda: c.rd("GET", "race") == old, "the write made elsewhere")
            wait_for(lambda: nc(px, "rd", "entries") == 1, "the fill")
            eq(c.rd("GET", "race"), old)
            # the entry expires here (ttl_ms), but the server still tracks the key
            time.sleep(0.1)
            races, fills = nc(px, "rd", "fill_races"), nc(px, "rd", "fills")
            # the server sleeps; the write is in the same buffer, so it runs right after
            a.send(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$3\r\n1.5\r\n"
                   b"*3\r\n$3\r\nSET\r\n$4\r\nrace\r\n$%d\r\n%s\r\n" % (len(new), new))
            pings = asleep(probe)
            # a GET now: forwarded, and its fill queued behind the write
            eq(c.rd("GET", "race"), new)
            eq(a.read_resp(), "OK")
            eq(a.read_resp(), "OK")
            for _ in range(pings):
                probe.read_line(timeout=10)
            # the fill's reply is in (its marker is gone either way) ...
            wait_for(lambda: nc(px, "rd", "entries") <= 1 and
                     nc(px, "rd", "fill_races") + nc(px, "rd", "fills") > races + fills,
                     "the fill's reply")
            for _ in range(5):
                eq(c.rd("GET", "race"), new)
            raced += nc(px, "rd", "fill_races") > races
        # ... and it lost to the invalidation (every round, unless a loaded box read the
        # write only after the fill: then it was simply stored, then invalidated)
        check(raced >= 1, "no fill lost its race to the invalidation")
    px.stop()


@R.test(ringleader=True, timeout=90)
def server_restart(env):
    be = Redis.start()
    px = env.own_proxy({"rd": rd_pool([be])}, workers=1)
    with px.client("rd") as c:
        eq(c.rd("SET", "rs", "before"), "OK")
        for _ in range(3):
            eq(c.rd("GET", "rs"), b"before")
        check(nc(px, "rd", "entries") == 1, "cached")
        port = be.port
        be.stop()
        be = Redis.start(port=port)
        with be.client() as d:
            eq(d.rd("SET", "rs", "after"), "OK")
        wait_for(lambda: nc(px, "rd", "evict_conn") >= 1, "the lost connection's eviction")
        deadline = time.monotonic() + patience(10)
        ok = 0
        while time.monotonic() < deadline and ok < 20:
            c2 = px.client("rd")
            try:
                got = c2.rd("GET", "rs")
            except Exception:
                got = "error"
            finally:
                c2.close()
            check(got != b"before", "the dead server's value was served")
            ok += got == b"after"
    check(ok >= 20, "the restarted server's value was served")
    px.stop()
    be.stop()


@R.test(ringleader=True)
def reload_moves_keys(env):
    pools = {"rd": rd_pool([env.rd, env.rd2])}
    px = env.own_proxy(pools, workers=1)
    keys = ["mv%d" % i for i in range(40)]
    with env.rd.client() as a, env.rd2.client() as b:
        for k in keys:
            a.rd("SET", k, "on-1")
            b.rd("SET", k, "on-2")
    with px.client("rd") as c:
        first = {k: c.rd("GET", k) for k in keys}
        for k in keys:
            eq(c.rd("GET", k), first[k])
        check(nc(px, "rd", "hits") >= 40, "cached")
        # one server only: every key of the other moves
        moved = [k for k in keys if first[k] == b"on-1"]
        check(len(moved) > 0, "some keys on the first server")
        pools["rd"]["servers"] = ["%s:1 s1" % env.rd2.hostport()]
        px.rewrite(pools)
        os.kill(px.proc.pid, 1)
        wait_for(lambda: c.rd("GET", moved[0]) == b"on-2", "the reload")
        for k in keys:
            eq(c.rd("GET", k), b"on-2", k)
        check(nc(px, "rd", "evict_ring") >= 1, "ring-change evictions counted")
    px.stop()


@R.test(ringleader=True)
def memcached_ttl(env):
    ttl = 300
    pool = {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 3000,
            "servers": ["%s:1 m" % env.mc.hostport()],
            "near_cache": {"size": "1MiB", "keys": ["cfg:"], "ttl_ms": ttl}}
    px = env.own_proxy({"mc": pool}, workers=2)
    with px.client("mc") as c, px.client("mc") as c2, env.mc.client() as d:
        eq(c.mc_store(b"set", b"cfg:a", b"v1", flags=7), b"STORED\r\n")
        for _ in range(10):
            eq(c2.mc_get(b"get", b"cfg:a"), [(b"cfg:a", 7, b"v1", None)])
        check(nc(px, "mc", "hits") >= 5, "hits %d" % nc(px, "mc", "hits"))
        # not a cached prefix: never kept
        eq(c.mc_store(b"set", b"other", b"o"), b"STORED\r\n")
        for _ in range(3):
            eq(c.mc_get(b"get", b"other"), [(b"other", 0, b"o", None)])
        eq(nc(px, "mc", "entries"), 1)
        # writes through the proxy: at once, on every connection
        for i in range(200):
            v = b"w%d" % i
            eq(c.mc_store(b"set", b"cfg:a", v), b"STORED\r\n")
            eq(c2.mc_get(b"get", b"cfg:a"), [(b"cfg:a", 0, v, None)])
            eq(c2.mc_get(b"get", b"cfg:a"), [(b"cfg:a", 0, v, None)])
        # a write elsewhere: visible once ttl_ms has passed
        eq(d.mc_store(b"set", b"cfg:a", b"elsewhere"), b"STORED\r\n")
        time.sleep(ttl / 1000.0 + 0.2)
        for _ in range(5):
            eq(c2.mc_get(b"get", b"cfg:a"), [(b"cfg:a", 0, b"elsewhere", None)])
    px.stop()
    # no ttl_ms on a memcached pool: refused
    bad = os.path.join(harness.procs.tmpdir(), "nc-bad.yml")
    with open(bad, "w") as f:
        f.write("mc:\n  listen: 127.0.0.1:1\n  servers: [\"127.0.0.1:2:1\"]\n"
                "  near_cache: {size: 1MiB}\n")
    r = subprocess.run([binary("ringleader"), "-t", "-c", bad], capture_output=True, timeout=30)
    check(r.returncode != 0, "a memcached near_cache without ttl_ms was accepted")
    check(b"ttl_ms" in r.stdout + r.stderr, "the error names ttl_ms: %r" % (r.stdout + r.stderr))


@R.test(ringleader=True)
def selected_database(env):
    px = env.px
    with px.client("rd") as c, px.client("rd") as c2, env.rd.client() as d:
        eq(c.rd("SET", "sdb", "db0"), "OK")
        eq(c.rd("GET", "sdb"), b"db0")
        wait_for(lambda: nc(px, "rd", "entries") >= 1, "the fill")
        eq(c.rd("GET", "sdb"), b"db0")              # served from the cache
        eq(d.rd("SELECT", "2"), "OK")
        eq(d.rd("SET", "sdb", "db2"), "OK")         # the same name in database 2
        eq(c2.rd("SELECT", "2"), "OK")
        for _ in range(5):
            eq(c2.rd("GET", "sdb"), b"db2", "GET after SELECT 2")
        eq(c.rd("GET", "sdb"), b"db0", "the pool's database")


if __name__ == "__main__":
    R.main(Env)
