"""test_leases.py: leases — cache-aside clients recompute an expired key about once per expiry, every reply exact.

What each test proves, against real memcached and redis-server:
  stampede_memcache_two_proxies
      CLIENTS cache-aside clients (get; on a miss 20 ms of "database", then set) over two
      proxies in front of the same three memcached (one with collapse_gets too), the key
      expiring (deleted at its server) CYCLES times: at most 2 recomputations per expiry
      (one lease per proxy), every hit the bytes a winner stored in that cycle. The
      waiting clients' p50/p99 is printed, not asserted.
  stampede_memcache_fleet_lease
      the same with lease_prefix: the lease is taken from memcached (`add`), one win
      between the two proxies per expiry (at most 2 asserted).
  fleet_lease_memcache, fleet_lease_redis
      two proxies with lease_prefix: a miss at the second proxy while the first one's
      client holds the fleet-wide lease is held, not a second winner, and gets the value
      stored through the first proxy; the lease key is deleted with the store.
  stampede_redis
      the same through one proxy in front of redis-server: at most 2 per expiry.
  collapse_and_leases
      collapse_gets and leases together: gets of a missing key that arrive at once (the
      proxy stopped while they are sent) share one backend get; its miss wins the lease
      for one client only, the collapsed followers are held and get the stored value.
  winner_never_sets
      the winner never stores: the held readers are released after ttl_ms (not before),
      exactly one of them gets the miss (the new winner) and the others are held again,
      then get the value that winner stores.
  store_straight_to_server
      a set written to memcached directly (no proxy sees it) releases the held readers
      well before ttl_ms: the re-reads (1 ms, doubling to 8 ms while the hold is young,
      then to 100 ms) find it.
  meta_differential, meta_mg, meta_client_writes
      leases: {meta: true}: every command on a key whose lease a client won through the
      proxy (memcached's vivified empty item) gets the bytes the same command gets on a
      missing key straight to memcached (text, noreply, mg, ms/md/ma).
  meta_fleet, meta_stampede, meta_winner_never_sets
      meta leases across two proxies: one win in the fleet per expiry, the other proxy's
      readers held and answered in their shape; a winner that never stores: one new
      winner after memcached's empty item expires.
  stop_while_held
      a proxy stopped while it holds reads (and has leases, a re-read out) exits cleanly:
      status 0, nothing from the sanitizers in its output (the held reads are freed with
      their pool); and so does every proxy of the file.
  set_answers_held_gets
      a set through the proxy answers the held gets with its own value (the bytes a get
      straight to memcached then reads), a held gets is read again (its cas), and a set
      whose exptime already passed answers nobody (one released reader wins).
  limits
      max_waiters holds exactly that many reads while their key is being re-read (the
      next read is answered at once, counted lease_overflow); a held reader that closes is
      dropped (lease_dropped) and its place is free again; the winner disconnecting does
      not end the lease; a multi-key get is never held; a delete through the proxy
      releases the readers (one of them wins the next lease, the others are held again
      until its set).
"""

import os
import random
import signal
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Memcached, Proxy, Raw, Redis, Runner, check, eq  # noqa: E402

R = Runner("test_leases", per_test_timeout=60, total_timeout=240)

CLIENTS = int(os.environ.get("RL_LEASE_CLIENTS", "200"))
CYCLES = int(os.environ.get("RL_LEASE_CYCLES", "10"))
COMPUTE_S = 0.020           # the "database" a winner asks
LEASES = {"ttl_ms": 2000, "max_waiters": 10000}


class Env(harness.Env):
    def __init__(self):
        self.mcs = [Memcached.start() for _ in range(3)]
        self.rd = Redis.start()
        self.backends = self.mcs + [self.rd]
        self.proxies = []

    def proxy(self, kind="memcache", leases=None, collapse=False, backends=None):
        be = backends or (self.mcs if kind == "memcache" else [self.rd])
        pool = {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 4000,
                "server_connections": 1, "collapse_gets": collapse,
                "servers": ["%s:1 s%d" % (b.hostport(), i) for i, b in enumerate(be)]}
        if leases is not None:
            pool["leases"] = leases
        if kind == "redis":
            pool["redis"] = True
        px = Proxy({"p": pool}, workers=1, dump=lambda pools: harness.ydump(pools) + "\n")
        self.proxies.append(px)
        return px

    def close(self):
        for px in self.proxies:
            px.stop()
        super().close()


def pstats(px):
    return px.stats()["p"]


def wait_stat(px, name, want, what, timeout=10):
    """Until the pool's counter `name` reaches want (bounded)."""
    deadline = time.monotonic() + harness.patience(timeout)
    while True:
        got = pstats(px)[name]
        if got >= want:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("%s: %s is %d, not %d" % (what, name, got, want))
        time.sleep(0.01)


def mc_reply(key, value):
    return b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(value), value)


def rd_reply(value):
    return b"$%d\r\n%s\r\n" % (len(value), value)


def expire_everywhere(env, kind, key):
    """The key expires: deleted at every server, no proxy sees it."""
    if kind == "redis":
        with env.rd.client() as c:
            c.rd("DEL", key)
        return
    for m in env.mcs:
        with m.client() as c:
            c.mc(b"delete " + key)


def stampede(env, kind, proxies):
    """CLIENTS cache-aside clients over `proxies` for CYCLES expiries of one key. Returns
    (recomputations per cycle, wait times of the clients that got a hit)."""
    key = harness.unique("hot")
    barrier = threading.Barrier(CLIENTS + 1, timeout=harness.patience(60))
    stored = [set() for _ in range(CYCLES)]       # what the winners wrote, by cycle
    replies = [[] for _ in range(CYCLES)]         # (client, reply bytes, seconds)
    errors = []

    def client(i):
        px = proxies[i % len(proxies)]
        try:
            with Raw(px.addr("p"), timeout=harness.patience(20)) as c:
                for cyc in range(CYCLES):
                    barrier.wait()
                    t0 = time.monotonic()
                    if kind == "redis":
                        c.send(harness.resp_encode("GET", key))
                        raw = c.read_until(lambda b: harness.resp_parse(b, 0)[1]
                                           if harness.resp_parse(b, 0) else None)
                        miss = raw in (b"$-1\r\n", b"_\r\n")
                    else:
                        c.send(b"get " + key + b"\r\n")
                        raw = c.read_until(harness.mc_values_len)
                        miss = raw == b"END\r\n"
                    waited = time.monotonic() - t0
                    replies[cyc].append((i, raw, waited, miss))
                    if miss:
                        time.sleep(COMPUTE_S)       # the database
                        value = b"c%d-%d-%s" % (cyc, i, os.urandom(8).hex().encode())
                        stored[cyc].add(value)
                        if kind == "redis":
                            eq(c.rd("SET", key, value), "OK")
                        else:
                            eq(c.mc_store(b"set", key, value), b"STORED\r\n")
                    barrier.wait()
        except Exception as e:      # noqa: BLE001 - reported below
            errors.append((i, repr(e)))
            barrier.abort()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    try:
        for cyc in range(CYCLES):
            expire_everywhere(env, kind, key)
            barrier.wait()          # go
            barrier.wait()          # every client answered (and the winners stored)
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join(harness.patience(30))
    eq(errors, [], "clients failed")
    misses, waits = [], []
    for cyc in range(CYCLES):
        want = {(mc_reply(key, v) if kind != "redis" else rd_reply(v)) for v in stored[cyc]}
        n = 0
        for i, raw, waited, miss in replies[cyc]:
            if miss:
                n += 1
                continue
            check(raw in want, "cycle %d client %d: %r is not a value stored in the cycle"
                  % (cyc, i, raw[:80]))
            waits.append(waited)
        eq(len(replies[cyc]), CLIENTS, "every client answered in cycle %d" % cyc)
        misses.append(n)
    return misses, waits


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def report(what, misses, waits, proxies=()):
    print("  %s: %d clients, %d expiries: recomputations per expiry %s; waiting clients "
          "p50 %.1f ms, p99 %.1f ms" % (what, CLIENTS, CYCLES, misses,
                                        pct(waits, 0.5) * 1000, pct(waits, 0.99) * 1000))
    if proxies:
        # the proxies' side of the wait: from a read's arrival to its release
        st = [pstats(px) for px in proxies]
        n = sum(x["lease_released_store"] + x["lease_released_timeout"] for x in st)
        us = sum(x["lease_hold_time"] for x in st)
        print("    held in the proxies: mean %.1f ms over %d releases; <=10 ms %d, "
              "<=100 ms %d, <=1 s %d, over %d; re-reads %d" % (
                  us / 1000.0 / max(n, 1), n, sum(x["lease_hold_le_10ms"] for x in st),
                  sum(x["lease_hold_le_100ms"] for x in st),
                  sum(x["lease_hold_le_1s"] for x in st),
                  sum(x["lease_hold_over_1s"] for x in st),
                  sum(x["lease_rereads"] for x in st)))


@R.test(ringleader=True)
def stampede_memcache_two_proxies(env):
    a = env.proxy("memcache", LEASES, collapse=True)
    b = env.proxy("memcache", LEASES)
    misses, waits = stampede(env, "memcache", [a, b])
    report("memcached, two proxies, leases on", misses, waits, [a, b])
    check(max(misses) <= 2, "at most 2 recomputations per expiry: %s" % misses)
    check(min(misses) >= 1, "every expiry recomputed: %s" % misses)
    won = pstats(a)["leases_won"] + pstats(b)["leases_won"]
    eq(won, sum(misses), "leases_won counts the recomputations")


@R.test(ringleader=True)
def stampede_memcache_fleet_lease(env):
    fleet = dict(LEASES, lease_prefix="__rl_lease:")
    a = env.proxy("memcache", fleet, collapse=True)
    b = env.proxy("memcache", fleet)
    misses, waits = stampede(env, "memcache", [a, b])
    report("memcached, two proxies, lease_prefix (fleet-wide)", misses, waits, [a, b])
    check(max(misses) <= 2, "at most 2 recomputations per expiry: %s" % misses)
    won = pstats(a)["leases_won"] + pstats(b)["leases_won"]
    eq(won, sum(misses), "leases_won counts the recomputations")


def fleet(env, kind):
    """Two proxies with lease_prefix: the second proxy's reader of a key the first one's
    client won is held (not a second winner), and gets the value stored through the
    first proxy; the lease key is gone afterwards."""
    conf = {"ttl_ms": 5000, "lease_prefix": "__rl_lease:"}
    be = env.mcs[:1] if kind == "memcache" else [env.rd]
    a, b = env.proxy(kind, conf, backends=be), env.proxy(kind, conf, backends=be)
    key = harness.unique("fleet")
    value = b"stored-through-a"
    with a.client() as wa:
        if kind == "redis":
            eq(wa.rd("GET", key), None, "the first miss in the fleet wins")
        else:
            eq(wa.mc_get(b"get", key), [], "the first miss in the fleet wins")
        rb = Raw(b.addr("p"), timeout=harness.patience(10))
        rb.send(harness.resp_encode("GET", key) if kind == "redis" else b"get " + key + b"\r\n")
        wait_stat(b, "lease_fleet_lost", 1, "the other proxy's miss lost the fleet lease")
        check(pending(rb, 0.2), "and its reader is held")
        lk = b"__rl_lease:" + key
        with be[0].client() as d:       # a client straight to the server sees the lease key
            if kind == "redis":
                eq(d.rd("EXISTS", lk), 1, "the lease key is on the server")
            else:
                eq(len(d.mc_get(b"get", lk)), 1, "the lease key is on the server")
        refused = 0
        with b.client() as c:           # but never through a proxy: refused, key by key
            if kind == "redis":
                err = harness.RespError("ERR key is reserved for the proxy's leases "
                                        "(lease_prefix)")
                for cmd in (("GET", lk), ("SET", lk, "x"), ("DEL", lk), ("MGET", key, lk),
                            ("EXISTS", lk), ("PEXPIRE", lk, "1")):
                    eq(c.rd(*cmd), err, "%s of a lease key" % cmd[0])
                    refused += 1
            else:
                err = b"CLIENT_ERROR key is reserved for the proxy's leases (lease_prefix)\r\n"
                for line in (b"get " + lk, b"get " + key + b" " + lk, b"delete " + lk,
                             b"touch " + lk + b" 10", b"set " + lk + b" 0 0 1\r\nx"):
                    eq(c.mc(line), err, "%r" % line)
                    refused += 1
                eq(c.mc(b"version")[:8], b"VERSION ", "the connection goes on")
        eq(pstats(b)["refused_commands"], refused, "counted in refused_commands")
        check(pending(rb, 0.1), "the lease was untouched: still held")
        if kind == "redis":
            eq(wa.rd("SET", key, value), "OK")
        else:
            eq(wa.mc_store(b"set", key, value), b"STORED\r\n")
    if kind == "redis":
        eq(rb.read_resp(), value, "released with the value stored through the other proxy")
    else:
        eq(rb.read_until(harness.mc_values_len), mc_reply(key, value))
    rb.close()
    eq(pstats(a)["leases_won"], 1, "one win")
    eq(pstats(b)["leases_won"], 0, "in the whole fleet")
    with be[0].client() as d:
        if kind == "redis":
            eq(d.rd("EXISTS", lk), 0, "the lease key is deleted with the store")
        else:
            eq(d.mc_get(b"get", lk), [], "the lease key is deleted with the store")


@R.test(ringleader=True)
def fleet_lease_memcache(env):
    fleet(env, "memcache")


@R.test(ringleader=True)
def fleet_lease_redis(env):
    fleet(env, "redis")


@R.test(ringleader=True)
def stampede_redis(env):
    px = env.proxy("redis", LEASES)
    misses, waits = stampede(env, "redis", [px])
    report("redis, one proxy, leases on", misses, waits, [px])
    check(max(misses) <= 2, "at most 2 recomputations per expiry: %s" % misses)
    eq(pstats(px)["leases_won"], sum(misses), "leases_won counts the recomputations")


def readers(px, key, n, cmd=b"get"):
    """n connections that each send `cmd key` now; returns them (replies unread)."""
    out = []
    for _ in range(n):
        c = Raw(px.addr("p"), timeout=harness.patience(10))
        c.send(cmd + b" " + key + b"\r\n")
        out.append(c)
    return out


def pending(c, wait=0.05):
    """Whether c has received nothing (and is not closed) within `wait` seconds."""
    if c.buf:
        return False
    c.sock.settimeout(wait)
    try:
        c.sock.recv(1, socket.MSG_PEEK)
        return False
    except (socket.timeout, BlockingIOError):
        return True
    finally:
        c.sock.settimeout(harness.patience(10))


def answered(conns, wait=0.1):
    """The connections of conns that have something to read within `wait` seconds."""
    import select
    ready, _, _ = select.select([c.sock for c in conns if not c.buf], [], [], wait)
    return [c for c in conns if c.buf or c.sock in ready]


@R.test(ringleader=True)
def collapse_and_leases(env):
    px = env.proxy("memcache", {"ttl_ms": 5000}, collapse=True, backends=env.mcs[:1])
    key = harness.unique("col")
    n = 30
    socks = []
    for _ in range(n):
        s = socket.create_connection(px.addr("p"), 5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    for _ in range(400):
        if pstats(px)["client_connections"] >= n:
            break
        time.sleep(0.025)
    os.kill(px.proc.pid, signal.SIGSTOP)
    harness.wait_stopped(px.proc.pid)
    try:
        for s in socks:
            s.sendall(b"get " + key + b"\r\n")
        time.sleep(0.2)         # loopback delivery (the proxy reads them all at once)
    finally:
        os.kill(px.proc.pid, signal.SIGCONT)
    # exactly one client gets the miss; the others are held
    wait_stat(px, "leases_won", 1, "one miss wins")
    wait_stat(px, "lease_reads_held", n - 1, "the others are held")
    winner = None
    for s in socks:
        s.settimeout(0.05)
        try:
            got = s.recv(100)
            eq(got, b"END\r\n", "the winner's miss")
            check(winner is None, "two clients got the miss")
            winner = s
        except socket.timeout:
            pass
    check(winner is not None, "nobody got the miss")
    value = b"collapsed-and-leased"
    winner.settimeout(5)
    winner.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
    eq(winner.recv(100), b"STORED\r\n")
    for s in socks:
        if s is winner:
            continue
        s.settimeout(harness.patience(10))
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(4096)
            check(chunk != b"", "closed")
            buf += chunk
        eq(buf, mc_reply(key, value), "a held follower gets the stored value")
    for s in socks:
        s.close()
    st = pstats(px)
    eq(st["leases_won"], 1, "one lease")
    eq(st["lease_released_store"], n - 1, "released by the store")
    check(st["collapsed_gets"] > 0, "the gets were collapsed too")


@R.test(ringleader=True)
def winner_never_sets(env):
    ttl = 1000
    px = env.proxy("memcache", {"ttl_ms": ttl}, backends=env.mcs[:1])
    key = harness.unique("nw")
    with px.client() as w:
        eq(w.mc_get(b"get", key), [], "the first miss wins")
        t_won = time.monotonic()
        rs = readers(px, key, 5)
        wait_stat(px, "lease_reads_held", 5, "held")
        # released by the ttl: one of them (the first to miss again) is the new winner,
        # and the others are held again (the next release is a whole ttl_ms away)
        got = answered(rs, harness.patience(10))
        elapsed = time.monotonic() - t_won
        check(elapsed >= ttl / 1000.0 * 0.9, "released after ttl_ms (%.3f s)" % elapsed)
        got = answered(rs, 0.05)
        eq(len(got), 1, "exactly one released reader got an answer (the new winner)")
        new = got[0]
        eq(new.read_until(harness.mc_values_len), b"END\r\n", "the new winner's miss")
        value = b"second-winner"
        eq(new.mc_store(b"set", key, value), b"STORED\r\n")
        for c in rs:
            if c is not new:
                eq(c.read_until(harness.mc_values_len), mc_reply(key, value),
                   "held again, then the value")
        for c in rs:
            c.close()
    st = pstats(px)
    eq(st["lease_released_timeout"], 5, "the five were released by the ttl")
    eq(st["leases_won"], 2, "one new winner")
    eq(st["lease_reads_held"], 5 + 4, "the four held again are counted again")
    eq(st["lease_released_store"], 4, "the second winner's set released the four")


@R.test(ringleader=True)
def store_straight_to_server(env):
    ttl = 5000
    px = env.proxy("memcache", {"ttl_ms": ttl}, backends=env.mcs[:1])
    key = harness.unique("direct")
    with px.client() as w:
        eq(w.mc_get(b"get", key), [], "the first miss wins")
    rs = readers(px, key, 4)
    wait_stat(px, "lease_reads_held", 4, "held")
    value = b"written-around-the-proxy"
    with env.mcs[0].client() as direct:
        eq(direct.mc_store(b"set", key, value), b"STORED\r\n")
    t0 = time.monotonic()
    for c in rs:
        eq(c.read_until(harness.mc_values_len), mc_reply(key, value))
        c.close()
    took = time.monotonic() - t0
    st = pstats(px)
    eq(st["lease_released_store"], 4, "released because the key was seen stored")
    eq(st["lease_released_timeout"], 0, "not by the ttl")
    check(st["lease_rereads"] >= 1, "re-reads found it")
    print("  a set straight to the server released the held readers in %.0f ms "
          "(re-reads back off to 8 ms while the hold is young, then 100 ms; ttl_ms %d)" % (took * 1000, ttl))


@R.test(ringleader=True)
def set_answers_held_gets(env):
    """A set through the proxy answers the held gets of its key with its own value (what a
    get sent after its STORED reads: the same bytes as a get straight to memcached then);
    a held gets is read again (its cas is the server's); a set whose exptime has already
    passed answers nobody: the held reads read again and one of them wins."""
    px = env.proxy("memcache", {"ttl_ms": 30000}, backends=env.mcs[:1])
    key = harness.unique("sv")
    with px.client() as w, env.mcs[0].client() as d:
        eq(w.mc_get(b"get", key), [], "the first miss wins")
        gs = readers(px, key, 3)
        gss = readers(px, key, 1, cmd=b"gets")
        wait_stat(px, "lease_reads_held", 4, "held")
        eq(w.mc_store(b"set", key, b"seven", flags=7, exptime=100), b"STORED\r\n")
        direct_get = mc_one(d, b"get %s\r\n" % key)
        direct_gets = mc_one(d, b"gets %s\r\n" % key)
        eq(direct_get, b"VALUE %s 7 5\r\nseven\r\nEND\r\n" % key)
        for c in gs:
            eq(c.read_until(harness.mc_values_len), direct_get, "a held get: the set's value")
        eq(gss[0].read_until(harness.mc_values_len), direct_gets, "a held gets: with its cas")
        for c in gs + gss:
            c.close()
        # an exptime already passed: the value is gone at once, a get would miss
        key = harness.unique("svx")
        eq(w.mc_get(b"get", key), [], "the first miss wins")
        won = pstats(px)["leases_won"]
        rs = readers(px, key, 2)
        wait_stat(px, "lease_reads_held", 6, "held")
        eq(w.mc_store(b"set", key, b"gone", exptime=-1), b"STORED\r\n")
        wait_stat(px, "leases_won", won + 1, "a released reader wins the next lease")
        got = []
        deadline = time.monotonic() + harness.patience(10)
        while not got and time.monotonic() < deadline:
            got = answered(rs)
        eq(len(got), 1, "one released reader got the miss")
        eq(got[0].read_until(harness.mc_values_len), b"END\r\n")
        for c in rs:
            c.close()


@R.test(ringleader=True)
def limits(env):
    # a ttl no run of this test outlasts, however loaded the box: every release here is
    # by the delete or the set, and every hold is certain (the winner stores only at the
    # end). max_waiters 3: the held reads keep their places while the key is re-read.
    px = env.proxy("memcache", {"ttl_ms": 300000, "max_waiters": 3}, backends=env.mcs[:1])
    key = harness.unique("lim")
    w = Raw(px.addr("p"))
    eq(w.mc_get(b"get", key), [], "the first miss wins")
    rs = readers(px, key, 3)
    wait_stat(px, "lease_reads_held", 3, "held")
    wait_stat(px, "lease_rereads", 3, "re-reads of the held key went out")
    # max_waiters: a fourth read is answered at once with the server's miss
    with px.client() as c:
        eq(c.mc_get(b"get", key), [], "past max_waiters: answered at once")
    st = pstats(px)
    eq(st["lease_overflow"], 1, "counted as an overflow")
    eq(st["lease_reads_held"], 3, "and not held")
    # a held reader that closes is dropped, and frees its place
    gone = rs.pop(0)
    gone.close()
    wait_stat(px, "lease_dropped", 1, "the closed reader is dropped")
    rs += readers(px, key, 1)
    wait_stat(px, "lease_reads_held", 4, "the freed place is taken")
    eq(pstats(px)["lease_overflow"], 1, "no other overflow")
    # the winner disconnecting does not end the lease
    w.close()
    # a multi-key get is never held
    with px.client() as c:
        eq(c.mc_get(b"get", key, b"other-" + key), [], "a multi-key get is answered")
    for c in rs:
        check(pending(c, 0.2), "still held after the winner left")
    # a delete through the proxy releases them: one wins the next lease, two are held
    won = pstats(px)["leases_won"]
    with px.client() as c:
        eq(c.mc(b"delete " + key), b"NOT_FOUND\r\n")
    wait_stat(px, "leases_won", won + 1, "a released reader wins the next lease")
    got = []
    deadline = time.monotonic() + harness.patience(10)
    while not got and time.monotonic() < deadline:
        got = answered(rs)
    eq(len(got), 1, "one released reader got the miss")
    eq(got[0].read_until(harness.mc_values_len), b"END\r\n")
    for c in rs:
        if c is not got[0]:
            check(pending(c, 0.2), "the others are held again")
    eq(got[0].mc_store(b"set", key, b"v"), b"STORED\r\n")
    for c in rs:
        if c is not got[0]:
            eq(c.read_until(harness.mc_values_len), mc_reply(key, b"v"))
        c.close()
    st = pstats(px)
    eq(st["lease_overflow"], 1, "one overflow in all")
    eq(st["lease_dropped"], 1, "one dropped reader in all")
    eq(st["lease_released_timeout"], 0, "nothing waited for the ttl")


META = dict(LEASES, meta=True)


def mc_one(c, req):
    """Send one memcached request (a line, and a data block for a storage command); its
    whole reply: a retrieval's through END, anything else one line."""
    c.send(req)
    if req.split(b" ", 1)[0] in (b"get", b"gets", b"gat", b"gats"):
        return c.read_until(harness.mc_values_len)
    return c.read_line()


@R.test(ringleader=True)
def meta_differential(env):
    """leases: {meta: true}: a key whose lease a client won through the proxy is an empty
    item memcached vivified (what a client straight to that memcached sees is printed);
    every command on it through the proxy gets, byte for byte, what the same command gets
    from a memcached where the key is simply missing (no lease); so does a multi-key get
    with the key among others."""
    import re
    px = env.proxy("memcache", dict(META, ttl_ms=30000), backends=env.mcs[:1])
    ref = env.mcs[1]                    # the reference: the key missing, no lease anywhere
    cases = [
        (b"add", b"add %s 5 0 1\r\nx\r\n"), (b"set", b"set %s 5 0 1\r\nx\r\n"),
        (b"replace", b"replace %s 5 0 1\r\nx\r\n"),
        (b"append", b"append %s 0 0 1\r\nx\r\n"),
        (b"prepend", b"prepend %s 0 0 1\r\nx\r\n"),
        (b"cas", b"cas %s 5 0 1 CAS\r\nx\r\n"), (b"delete", b"delete %s\r\n"),
        (b"touch", b"touch %s 100\r\n"), (b"incr", b"incr %s 1\r\n"),
        (b"decr", b"decr %s 1\r\n"), (b"gat", b"gat 100 %s\r\n"),
        (b"gats", b"gats 100 %s\r\n"), (b"gets", b"gets %s\r\n"),
    ]
    seen = {}
    with px.client() as w, px.client() as c, env.mcs[0].client() as d, ref.client() as r:
        for name, tmpl in cases:
            key = harness.unique("md" + name.decode())
            if name == b"gets":         # the first read is a gets: its miss, not held
                eq(mc_one(w, b"gets %s\r\n" % key), mc_one(r, b"gets %s\r\n" % key))
                continue
            eq(w.mc_get(b"get", key), [], "%s: the first miss wins" % name)
            hdr, _ = (d.send(b"mg %s c\r\n" % key), d.read_meta())[1]
            cas = hdr.split()[1][1:]    # the vivified item's cas, as a direct client sees it
            req = tmpl.replace(b"CAS", cas)
            seen[name] = mc_one(d, b"gets %s\r\n" % key) if name == b"add" else None
            got = mc_one(c, req % key)
            want = mc_one(r, req % key)
            eq(got, want, "%s on a vivified key through the proxy, as on a missing key" % name)
            if name in (b"add", b"set"):
                # stored: a get through the proxy reads the value (the lease ended)
                eq(mc_one(c, b"get %s\r\n" % key), mc_one(r, b"get %s\r\n" % key),
                   "%s: then a get" % name)
        # noreply: nothing comes back either way, and nothing is stored over the empty
        # item (what memcached would have refused on a missing key)
        for name in (b"replace", b"append", b"prepend", b"incr", b"touch"):
            key = harness.unique("mdq" + name.decode())
            eq(w.mc_get(b"get", key), [], "%s noreply: the first miss wins" % name)
            tmpl = dict(cases)[name].replace(b" 1\r\n", b" 1 noreply\r\n", 1) \
                if name in (b"replace", b"append", b"prepend") \
                else dict(cases)[name].replace(b"\r\n", b" noreply\r\n", 1)
            c.send(tmpl % key)
            eq(c.mc(b"mn"), b"MN\r\n", "%s noreply: no reply" % name)
            d.send(b"mg %s v\r\n" % key)
            eq(d.read_meta(), (b"VA 0 Z", b""), "%s noreply: the item is still the empty one"
               % name)
        # a multi-key get: the leased key is missing, the others as they are
        leased, there, absent = (harness.unique("mdm"), harness.unique("mdm"),
                                 harness.unique("mdm"))
        eq(w.mc_get(b"get", leased), [], "multi-key: the first miss wins")
        for cl in (c, r):
            eq(cl.mc_store(b"set", there, b"here", flags=9), b"STORED\r\n")
        for cmd in (b"get", b"gets"):
            req = b"%s %s %s %s %s\r\n" % (cmd, leased, there, absent, there)
            eq(re.sub(rb" [0-9]+\r\n", b" #\r\n", mc_one(c, req)) if cmd == b"gets"
               else mc_one(c, req),
               re.sub(rb" [0-9]+\r\n", b" #\r\n", mc_one(r, req)) if cmd == b"gets"
               else mc_one(r, req), "%s of several keys, one leased" % cmd)
        print("  straight to memcached a vivified key reads %r" % seen[b"add"])
    st = pstats(px)
    eq(st["leases_won"], len(cases) + 6, "one win per key")
    eq(st["lease_reads_held"], 0, "nothing held")


def meta_raw(c):
    """One meta reply's bytes (its line, and a VA's value)."""
    line = c.read_line()
    if line.startswith(b"VA "):
        line += c.read_exact(int(line.split()[1]) + 2)
    return line


@R.test(ringleader=True)
def meta_mg(env):
    """meta: a client's own mg (without N) is read with N added: its winner gets the bytes
    an mg of a missing key gets (EN, with the O and k it asked for), another reader is
    held and then gets the stored value in its mg's shape (without the W, Z or c the
    proxy's read brought), and a hit is the bytes a memcached without the lease gives."""
    px = env.proxy("memcache", dict(META, ttl_ms=30000), backends=env.mcs[:1])
    ref = env.mcs[1]
    forms = [b"mg %s v", b"mg %s v f", b"mg %s s v O77 k", b"mg %s", b"mg %s f t s k"]
    held = 0
    with px.client() as c, ref.client() as r:
        for form in forms:
            key = harness.unique("mg")
            line = form % key + b"\r\n"
            c.send(line)
            r.send(line)
            eq(meta_raw(c), meta_raw(r), "%r: the winner's miss" % form)
            other = Raw(px.addr("p"), timeout=harness.patience(10))
            other.send(line)
            held += 1
            wait_stat(px, "lease_reads_held", held, "%r: another reader is held" % form)
            value = b"v-" + key
            eq(c.mc_store(b"set", key, value, flags=3), b"STORED\r\n")
            eq(r.mc_store(b"set", key, value, flags=3), b"STORED\r\n")
            r.send(line)
            eq(meta_raw(other), meta_raw(r), "%r: the held reader, released" % form)
            other.close()
            c.send(line)
            r.send(line)
            eq(meta_raw(c), meta_raw(r), "%r: a hit" % form)
    eq(pstats(px)["leases_won"], len(forms), "one win per key")


@R.test(ringleader=True)
def meta_client_writes(env):
    """meta: a meta client's writes of a key whose lease a plain client won through the
    proxy get the bytes they get on a missing key straight to memcached (cas values
    aside, which differ between servers): ms in replace/append/prepend mode NS, ma NF
    (with the O, k and c0 memcached echoes), md NF (the empty item goes), ms in add mode
    stores over the empty item, ms set stores."""
    import re
    px = env.proxy("memcache", dict(META, ttl_ms=30000), backends=env.mcs[:1])
    ref = env.mcs[1]
    cases = [b"ms %s 1 MR\r\nx\r\n", b"ms %s 1 MR O5 k c\r\nx\r\n",
             b"ms %s 1 MA\r\nx\r\n", b"ms %s 1 c MP\r\nx\r\n", b"ma %s\r\n",
             b"ma %s O5 k\r\n", b"ma %s MD\r\n", b"md %s\r\n", b"md %s O5 k\r\n",
             b"ms %s 1 ME\r\nx\r\n", b"ms %s 1 ME c T0 F3 O9\r\nx\r\n",
             b"ms %s 1 MS\r\nx\r\n", b"ms %s 1\r\nx\r\n"]

    def norm(b):
        return re.sub(rb" c[1-9][0-9]*", b" c#", b)

    with px.client() as w, px.client() as c, env.mcs[0].client() as d, ref.client() as r:
        for req in cases:
            key = harness.unique("mw")
            eq(w.mc_get(b"get", key), [], "%r: the first miss wins" % req)
            c.send(req % key)
            r.send(req % key)
            eq(norm(c.read_line()), norm(r.read_line()), "%r on a leased key, as on a missing "
               "key" % req)
            d.send(b"mg %s v\r\n" % key)
            r.send(b"mg %s v\r\n" % key)
            got, want = d.read_meta(), r.read_meta()
            if want[0] == b"EN":        # missing after it: the empty item is all there is
                check(got in ((b"VA 0 Z", b""), (b"EN", None)), "%r: then %r" % (req, got))
            else:
                eq(got, want, "%r: then the stored value" % req)


@R.test(ringleader=True)
def meta_fleet(env):
    """Two proxies with leases: {meta: true} over one memcached: the first miss in the
    fleet wins (memcached's W), the other proxy's reader is held (Z) and gets the value
    stored through the first proxy, in its own shape: get, gets (with the stored item's
    cas), and a third reader straight to memcached with mg sees memcached's own lease."""
    conf = dict(META, ttl_ms=5000)
    be = env.mcs[:1]
    a, b = env.proxy("memcache", conf, backends=be), env.proxy("memcache", conf, backends=be)
    key = harness.unique("mfleet")
    value = b"stored-through-a"
    with a.client() as wa:
        eq(wa.mc_get(b"get", key), [], "the first miss in the fleet wins")
        rb = Raw(b.addr("p"), timeout=harness.patience(10))
        rb.send(b"get " + key + b"\r\n")
        rg = Raw(b.addr("p"), timeout=harness.patience(10))
        rg.send(b"gets " + key + b"\r\n")
        wait_stat(b, "lease_reads_held", 2, "the other proxy's readers are held")
        check(pending(rb, 0.1) and pending(rg, 0.1), "not answered")
        with be[0].client() as d:
            d.send(b"mg %s v N5\r\n" % key)
            hdr, data = d.read_meta()
            check(hdr.split()[-1] == b"Z" and data == b"",
                  "a meta client straight to memcached sees the lease: %r" % hdr)
        eq(wa.mc_store(b"set", key, value, flags=7), b"STORED\r\n")
    eq(rb.read_until(harness.mc_values_len), b"VALUE %s 7 %d\r\n%s\r\nEND\r\n"
       % (key, len(value), value), "released with the value stored through the other proxy")
    with be[0].client() as d:
        cas = d.mc_get(b"gets", key)[0][3]
    eq(rg.read_until(harness.mc_values_len), b"VALUE %s 7 %d %d\r\n%s\r\nEND\r\n"
       % (key, len(value), cas, value), "gets: the stored item's cas")
    rb.close()
    rg.close()
    eq(pstats(a)["leases_won"], 1, "one win")
    eq(pstats(b)["leases_won"], 0, "in the whole fleet")


@R.test(ringleader=True)
def meta_stampede(env):
    a = env.proxy("memcache", META)
    b = env.proxy("memcache", META)
    misses, waits = stampede(env, "memcache", [a, b])
    report("memcached, two proxies, meta leases", misses, waits, [a, b])
    eq(misses, [1] * CYCLES, "one recomputation per expiry in the fleet")
    eq(pstats(a)["leases_won"] + pstats(b)["leases_won"], CYCLES, "leases_won")


@R.test(ringleader=True)
def meta_winner_never_sets(env):
    """meta: the winner never stores: memcached's empty item expires (ttl_ms rounded up to
    a second) and exactly one held reader wins the next lease; it stores, the others get
    its value."""
    px = env.proxy("memcache", dict(META, ttl_ms=1000), backends=env.mcs[:1])
    key = harness.unique("mnw")
    with px.client() as w:
        eq(w.mc_get(b"get", key), [], "the first miss wins")
    rs = readers(px, key, 4)
    wait_stat(px, "lease_reads_held", 4, "held")
    got = []
    deadline = time.monotonic() + harness.patience(15)
    while not got and time.monotonic() < deadline:
        got = answered(rs, 0.2)
    eq(len(got), 1, "exactly one released reader got an answer (the new winner)")
    new = got[0]
    eq(new.read_until(harness.mc_values_len), b"END\r\n", "the new winner's miss")
    for c in rs:
        if c is not new:
            check(pending(c, 0.1), "the others are held again")
    eq(new.mc_store(b"add", key, b"second"), b"STORED\r\n", "its add stores")
    for c in rs:
        if c is not new:
            eq(c.read_until(harness.mc_values_len), mc_reply(key, b"second"))
        c.close()
    eq(pstats(px)["leases_won"], 2, "one new winner")


def clean_exit(px):
    """Stop px: its status and what the sanitizers said, if anything."""
    rc = px.stop()
    with open(px.proc.log_path, "rb") as f:
        out = f.read()
    bad = [ln for ln in out.splitlines() if b"Sanitizer" in ln or b"runtime error" in ln]
    return rc, bad[:5]


@R.test(ringleader=True)
def stop_while_held(env):
    px = env.proxy("memcache", {"ttl_ms": 1000}, backends=env.mcs[:1])
    key = harness.unique("stop")
    w = Raw(px.addr("p"))
    eq(w.mc_get(b"get", key), [], "the first miss wins")
    rs = readers(px, key, 3)
    wait_stat(px, "lease_reads_held", 3, "held")
    wait_stat(px, "lease_rereads", 1, "a re-read")
    rs[0].close()               # one reader gone, two still waiting when the stop comes
    eq(clean_exit(px), (0, []), "stopped while holding reads")
    for c in rs[1:] + [w]:
        c.close()
    for other in env.proxies:
        if other is not px:
            eq(clean_exit(other), (0, []), "every proxy of the file exits cleanly")


if __name__ == "__main__":
    R.main(Env)
