"""test_rejoin.py: no stale reads after a server rejoins (rejoin: invalidate | flush | trust), failover_ttl, the rejoin journal.

What each test proves, against real memcached / redis-server processes frozen with SIGSTOP:
  stale_reads_memcache, stale_reads_redis
      a backend frozen until the proxy marks it down; 100 of its keys updated and 100
      deleted through the proxy (they go to the failover server); SIGCONT; the server is
      probed back. Read afterwards through the proxy: with rejoin: trust (the behaviour
      before issue 17) all 200 are stale; with rejoin: invalidate (the default) none is,
      and the server's keys nobody wrote meanwhile still hold their values; with rejoin:
      flush none is, and the server is empty. The failover server's copies are deleted too.
  failover_ttl_memcache, failover_ttl_redis
      writes while their owner is down reach the failover server with at most
      failover_ttl seconds to live (`mg key t` there; TTL/PTTL on Redis); a shorter TTL
      stays.
  journal_survives_restart
      rejoin_log: PATH; the proxy is stopped while the server is still frozen, the server
      thawed, a new proxy started on the journal: the server starts down, is invalidated
      when probed, and 0 stale values are read.
  overflow_flushes
      rejoin_log_keys: 50 and 100 writes: the rejoin flushes instead (counted, logged).
  journal_refuses_what_is_not_one
      rejoin_log naming a file that is not a journal: ringleader -t, the start and a
      reload refuse it, naming the path, and its bytes are left as they were.
  journal_forgets_unconfigured_servers, journal_forgets_servers_a_reload_removes
      a journal holding records of servers no longer configured at the start, and a server
      removed by a reload while its log held keys: their records are forgotten and the
      journal is its header alone again.
  empty_key_redis, empty_key_journal_redis
      Redis's empty key, SET twice while its owner is down (and, in the second, journalled
      and read back by a restarted proxy): remembered once, the proxy does not die (the
      sanitizer build did), and the key is deleted on the returning owner and on the
      failover server.
  session_writes_redis
      writes inside transactions (MULTI/EXEC, and WATCH then MULTI/EXEC) while their owner
      is down run on a connection pinned to the failover server; after the rejoin none of
      them reads stale (with rejoin: trust every one does). A session pinned to the
      failover server (WATCH) when the owner comes back gets an error for its next write
      and EXECABORT, not a write beside the owner; the retried transaction runs on the
      owner.
"""

import base64
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Memcached, Proxy, Raw, Redis, Runner, check, eq,  # noqa: E402
                     ring_owners, wait_stopped, ydump)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_rejoin", per_test_timeout=60, total_timeout=300)

RETRY_MS = 400
# A live server must never look dead: one timeout marks a server down here
# (server_failure_limit 1), and at 250 ms a loaded box once made the failover server miss
# it (its writes failed with SERVER_ERROR timeout). A frozen server is still found in 1 s.
TIMEOUT_MS = 1000
NKEYS = 100          # updated, and as many deleted, while the owner is down


class Setup:
    """Three backends of one kind behind a proxy pool "p" that marks servers down."""

    def __init__(self, kind, glob=None, **pool):
        self.kind = kind
        cls = Redis if kind == "redis" else Memcached
        self.bes = [cls.start() for _ in range(3)]
        self.labels = NAMES[:3]
        p = {"hash": "fnv1a_64", "distribution": "ketama", "auto_eject_hosts": True,
             "server_failure_limit": 1, "server_retry_timeout": RETRY_MS,
             "timeout": TIMEOUT_MS,
             "servers": ["%s:1 %s" % (be.hostport(), self.labels[i])
                         for i, be in enumerate(self.bes)]}
        if kind == "redis":
            p["redis"] = True
        p.update(pool)
        self.pool = p
        self.glob = glob
        self.px = self.start_proxy()
        keys = [b"rj-%s-%d" % (kind.encode(), i) for i in range(1200)]
        owner = ring_owners(self.px.conf_path, "p", keys)
        self.victim = 1
        vlabel = self.labels[self.victim]
        mine = [k for k in keys if owner[k] == vlabel]
        check(len(mine) >= 2 * NKEYS + 50, "only %d keys on the victim", len(mine))
        self.updated, self.deleted = mine[:NKEYS], mine[NKEYS:2 * NKEYS]
        self.untouched = mine[2 * NKEYS:2 * NKEYS + 50]

    def start_proxy(self):
        return Proxy({"p": self.pool}, glob=self.glob, dump=lambda d: ydump(d) + "\n")

    def close(self):
        self.px.stop()
        for be in self.bes:
            try:
                os.kill(be.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            be.stop()

    # -- one client's operations through the proxy (or a backend) ------------------
    def set_many(self, c, keys, value_of):
        if self.kind == "redis":
            c.send(b"".join(harness.resp_encode("SET", k, value_of(k)) for k in keys))
            return [c.read_resp() for _ in keys]
        c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(value_of(k)), value_of(k))
                        for k in keys))
        return [c.read_line() for _ in keys]

    def del_many(self, c, keys):
        if self.kind == "redis":
            c.send(b"".join(harness.resp_encode("DEL", k) for k in keys))
            return [c.read_resp() for _ in keys]
        c.send(b"".join(b"delete %s\r\n" % k for k in keys))
        return [c.read_line() for _ in keys]

    def get(self, c, k):
        """The value, None for a miss, or an error string."""
        if self.kind == "redis":
            r = c.rd("GET", k)
            return r if not isinstance(r, harness.RespError) else "error: %s" % r
        c.send(b"get " + k + b"\r\n")
        raw = c.read_until(harness.mc_values_len)
        if not raw.startswith(b"VALUE ") and raw != b"END\r\n":
            return "error: %r" % raw
        vals = harness.mc_parse_values(raw)
        return vals[0][2] if vals else None

    # -- the outage ------------------------------------------------------------------
    def state(self):
        return self.px.stats()["p"][self.labels[self.victim]]["state"]

    def freeze(self):
        pid = self.bes[self.victim].proc.pid
        os.kill(pid, signal.SIGSTOP)
        wait_stopped(pid)
        self.wait("down", 10)

    def thaw(self, wait_up=True):
        os.kill(self.bes[self.victim].proc.pid, signal.SIGCONT)
        if wait_up:
            self.wait("up", 10)

    def wait(self, state, timeout):
        """Poke the victim's keys (its probe is due only when asked for) until its state."""
        timeout = patience(timeout)
        deadline = time.monotonic() + timeout
        k = self.untouched[0]
        while time.monotonic() < deadline:
            if self.state() == state:
                return
            try:
                with Raw(self.px.addr("p"), timeout=1) as c:
                    self.get(c, k)
            except (TimeoutError, EOFError, OSError):
                pass
            time.sleep(0.05)
        raise AssertionError("victim not %s after %.0f s (state %s); log:\n%s" % (
            state, timeout, self.state(), self.px.log_tail(15)))

    def outage_writes(self):
        """While the victim is down: update NKEYS of its keys and delete NKEYS."""
        with Raw(self.px.addr("p")) as c:
            r = self.set_many(c, self.updated, lambda k: b"new:" + k)
            ok = ("OK",) if self.kind == "redis" else (b"STORED\r\n",)
            eq([x for x in r if x not in ok], [], "updates while the owner is down")
            r = self.del_many(c, self.deleted)
            check(all(x in (0, 1, b"DELETED\r\n", b"NOT_FOUND\r\n") for x in r),
                  "deletes while the owner is down: %r", r[:3])

    def preload(self):
        with Raw(self.px.addr("p")) as c:
            keys = self.updated + self.deleted + self.untouched
            r = self.set_many(c, keys, lambda k: b"old:" + k)
            check(all(x in ("OK", b"STORED\r\n") for x in r), "preload: %r", r[:3])

    def read_back(self):
        """(stale, wrong, untouched kept) through the proxy once the victim is up."""
        stale, wrong, kept = [], [], 0
        with Raw(self.px.addr("p")) as c:
            for k in self.updated + self.deleted:
                v = self.get(c, k)
                if v == b"old:" + k:
                    stale.append(k)
                elif v is not None and v != b"new:" + k:
                    wrong.append((k, v))
            for k in self.untouched:
                kept += self.get(c, k) == b"old:" + k
        return stale, wrong, kept


def outage(kind, mode, **extra):
    s = Setup(kind, rejoin=mode, **extra)
    try:
        s.preload()
        s.freeze()
        s.outage_writes()
        t0 = time.monotonic()
        s.thaw()
        up_s = time.monotonic() - t0
        stale, wrong, kept = s.read_back()
        st = s.px.stats()["p"]
        return s, stale, wrong, kept, st, up_s
    except BaseException:
        print(s.px.log_tail(20))
        s.close()
        raise


def stale_reads(kind):
    results = {}
    for mode in ("trust", "invalidate", "flush"):
        s, stale, wrong, kept, st, up_s = outage(kind, mode)
        try:
            eq(wrong, [], "%s/%s: values that are neither old nor new" % (kind, mode))
            results[mode] = (len(stale), kept, st, up_s)
            if mode == "invalidate":
                # the failover servers' copies are gone too
                fo = [be for i, be in enumerate(s.bes) if i != s.victim]
                left = sum(len(harness.owners(fo, s.updated)[k]) for k in s.updated)
                eq(left, 0, "%s: copies of the updated keys left on the failover servers" % kind)
                check(st["rejoin_logged"] >= 2 * NKEYS, "rejoin_logged %r", st["rejoin_logged"])
                check(st["rejoin_invalidations"] >= 2 * NKEYS, "rejoin_invalidations %r",
                      st["rejoin_invalidations"])
                check("is up again" in open(s.px.log_file).read(), "no 'up again' line")
        finally:
            s.close()
    print("  %s: stale reads of the %d keys written while the owner was down: trust %d, "
          "invalidate %d, flush %d; keys nobody wrote kept: invalidate %d/50, flush %d/50; "
          "up again %.2f s / %.2f s / %.2f s after SIGCONT" % (
              kind, 2 * NKEYS, results["trust"][0], results["invalidate"][0],
              results["flush"][0], results["invalidate"][1], results["flush"][1],
              results["trust"][3], results["invalidate"][3], results["flush"][3]))
    eq(results["trust"][0], 2 * NKEYS, "%s: trust reads every written key stale" % kind)
    eq(results["invalidate"][0], 0, "%s: stale reads with rejoin: invalidate" % kind)
    eq(results["invalidate"][1], 50, "%s: invalidate keeps the keys nobody wrote" % kind)
    eq(results["flush"][0], 0, "%s: stale reads with rejoin: flush" % kind)
    eq(results["flush"][1], 0, "%s: flush empties the server" % kind)
    check(results["flush"][2]["rejoin_flushes"] == 1, "rejoin_flushes %r",
          results["flush"][2]["rejoin_flushes"])


@R.test(ringleader=True)
def stale_reads_memcache(env):
    stale_reads("memcache")


@R.test(ringleader=True)
def stale_reads_redis(env):
    stale_reads("redis")


def failover_ttl(kind):
    s = Setup(kind, failover_ttl=30)
    try:
        s.freeze()
        ks = s.updated[:4]
        big = s.updated[5]          # a value past stream_threshold: its bytes arrive late
        with Raw(s.px.addr("p")) as c:
            if kind == "redis":
                eq(c.rd("SET", big, "x" * (600 << 10)), "OK")
                eq(c.rd("SET", ks[0], "v"), "OK")
                eq(c.rd("SET", ks[1], "v", "EX", "1000"), "OK")
                eq(c.rd("SET", ks[2], "v", "PX", "5000"), "OK")
                eq(c.rd("SETEX", ks[3], "1000", "v"), "OK")
            else:
                eq(c.mc_store(b"set", ks[0], b"v", exptime=0), b"STORED\r\n")
                eq(c.mc_store(b"set", ks[1], b"v", exptime=1000), b"STORED\r\n")
                eq(c.mc_store(b"set", ks[2], b"v", exptime=5), b"STORED\r\n")
                eq(c.mc(b"ms " + ks[3] + b" 1 T0\r\nv"), b"HD\r\n")
        ttls = []
        for k in ks:
            # where the write went: the live server that holds it
            holders = [be for i, be in enumerate(s.bes) if i != s.victim and
                       k in (be.exists_many([k]) if kind == "redis" else be.get_many([k]))]
            eq(len(holders), 1, "the write reached one failover server")
            with holders[0].client() as c:
                if kind == "redis":
                    ttls.append(c.rd("PTTL", k) / 1000.0)
                else:
                    line, _ = c.mc(b"mg " + k + b" t"), None
                    ttls.append(int(line.split()[1][1:]))
        print("  %s: TTLs on the failover server with failover_ttl 30: no TTL -> %s, "
              "1000 s -> %s, short -> %s, %s -> %s" % (
                  kind, ttls[0], ttls[1], ttls[2], "SETEX 1000" if kind == "redis" else "ms T0",
                  ttls[3]))
        for i in (0, 1, 3):
            check(0 < ttls[i] <= 30, "TTL %r of write %d not capped at 30", ttls[i], i)
        check(0 < ttls[2] <= 5, "a shorter TTL stays: %r", ttls[2])
        if kind == "redis":
            holder = [be for i, be in enumerate(s.bes) if i != s.victim and
                      big in be.exists_many([big])][0]
            with holder.client() as c:
                t = c.rd("PTTL", big) / 1000.0
            check(0 < t <= 30, "a 600 KiB SET to the failover server: TTL %r, not capped", t)
        want = 4 if kind == "redis" else 3
        check(s.px.stats()["p"]["failover_ttl_capped"] == want, "failover_ttl_capped %r",
              s.px.stats()["p"]["failover_ttl_capped"])
        if kind == "memcache":
            # the forms the cap must leave alone, differential: the same bytes through the
            # proxy (to a failover server, the cap's path) and straight to that server
            # give the same replies; an ms at memcached's 19 tokens (a T added would make
            # 20, refused before its data block) and a T memcached's strtol refuses
            flags = b" ".join(b"O%d" % i for i in range(16))
            forms = [lambda k: b"ms " + k + b" 3 " + flags + b"\r\nabc\r\nmn\r\n",
                     lambda k: b"mg " + k + b" v T4294967296\r\nmn\r\n"]
            fo = [be for i, be in enumerate(s.bes) if i != s.victim][0]
            for j, form in enumerate(forms):
                got = []
                for addr, k in ((s.px.addr("p"), s.updated[10 + j]), (fo.addr, b"direct:%d" % j)):
                    with Raw(addr) as c:
                        c.send(form(k))
                        got.append(c.read_until(lambda b: (b.find(b"MN\r\n") + 4)
                                                if b.find(b"MN\r\n") >= 0 else None))
                eq(got[0], got[1], "form %d through the proxy and straight to memcached" % j)
        s.thaw()
    finally:
        s.close()


@R.test(ringleader=True)
def failover_ttl_memcache(env):
    failover_ttl("memcache")


@R.test(ringleader=True)
def failover_ttl_redis(env):
    failover_ttl("redis")


def session_outage(mode):
    """Transactions on the victim's keys while it is down: the number read stale after."""
    s = Setup("redis", rejoin=mode)
    try:
        s.preload()
        s.freeze()
        keys = s.updated[:40]
        with Raw(s.px.addr("p")) as c:
            for i, k in enumerate(keys):
                if i % 2:
                    eq(c.rd("WATCH", k), "OK")
                eq(c.rd("MULTI"), "OK")
                eq(c.rd("SET", k, b"new:" + k), "QUEUED")
                eq(c.rd("EXEC"), ["OK"], "EXEC of %r while its owner is down" % k)
        s.thaw()
        with Raw(s.px.addr("p")) as c:
            stale = [k for k in keys if s.get(c, k) == b"old:" + k]
        return len(stale), len(keys), s.px.stats()["p"]
    except BaseException:
        print(s.px.log_tail(20))
        raise
    finally:
        s.close()


@R.test(ringleader=True)
def session_writes_redis(env):
    trust, n, _ = session_outage("trust")
    inv, _, st = session_outage("invalidate")
    print("  %d transactions on a down server's keys (half under WATCH): stale after the "
          "rejoin with trust %d, with invalidate %d (rejoin_logged %d)" % (
              n, trust, inv, st["rejoin_logged"]))
    eq(trust, n, "trust: every transaction's key read stale")
    eq(inv, 0, "invalidate: stale reads of keys written in transactions")
    check(st["rejoin_logged"] >= n, "rejoin_logged %r", st["rejoin_logged"])

    # a session on the failover server when the owner comes back
    s = Setup("redis")
    try:
        s.preload()
        k = s.updated[0]
        s.freeze()
        with Raw(s.px.addr("p")) as c:
            eq(c.rd("WATCH", k), "OK")          # pinned to the failover server
            s.thaw()                            # the owner is up again
            eq(c.rd("MULTI"), "OK")
            r = c.rd("SET", k, b"lost:" + k)
            check(isinstance(r, harness.RespError) and "came back" in str(r),
                  "a write beside the returned owner: %r", r)
            r = c.rd("EXEC")
            check(isinstance(r, harness.RespError) and str(r).startswith("EXECABORT"),
                  "EXEC after the refused write: %r", r)
            eq(c.rd("MULTI"), "OK")             # the retry: pinned to the owner
            eq(c.rd("SET", k, b"new:" + k), "QUEUED")
            eq(c.rd("EXEC"), ["OK"])
        eq(s.bes[s.victim].client().rd("GET", k), b"new:" + k, "the retry ran on the owner")
        with Raw(s.px.addr("p")) as c:
            eq(s.get(c, k), b"new:" + k)
        print("  a WATCH session on the failover server when the owner returned: its write "
              "refused, EXECABORT, the retry on the owner")
    finally:
        s.close()


@R.test(ringleader=True)
def journal_survives_restart(env):
    path = os.path.join(harness.tmpdir(), "rejoin-%d.journal" % os.getpid())
    s = Setup("memcache", glob={"rejoin_log": path, "drain_timeout": 300})
    try:
        s.preload()
        s.freeze()
        s.outage_writes()
        # the journal is synced every 100 ms: polled (bounded), not a fixed sleep
        deadline = time.monotonic() + patience(3)
        while (not os.path.exists(path) or os.path.getsize(path) <= 2 * NKEYS * 20) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        s.px.stop()
        size = os.path.getsize(path)
        check(size > 2 * NKEYS * 20, "journal holds the keys (%d bytes)", size)
        os.kill(s.bes[s.victim].proc.pid, signal.SIGCONT)
        s.px = s.start_proxy()
        eq(s.state(), "down", "the restarted proxy starts the server down")
        check(s.px.stats()["p"][s.labels[s.victim]]["rejoin_log_keys"] == 2 * NKEYS,
              "the log read back: %r", s.px.stats()["p"][s.labels[s.victim]]["rejoin_log_keys"])
        s.wait("up", 10)
        stale, wrong, kept = s.read_back()
        eq(wrong, [], "values that are neither old nor new")
        eq(len(stale), 0, "stale reads after a restart with the journal")
        eq(kept, 50, "keys nobody wrote kept")
        eq(wait_file(path, JOURNAL_HEADER, 3), JOURNAL_HEADER,
           "the journal is truncated to its header once nothing is pending")
        print("  journal of %d bytes read back by the restarted proxy; 0 stale, %d/50 kept; "
              "truncated after the rejoin" % (size, kept))
    finally:
        s.close()


def empty_key_setup(glob=None):
    """A Redis Setup whose victim is the owner of the empty key, which holds b"old" there."""
    s = Setup("redis", glob=glob)
    try:
        with Raw(s.px.addr("p")) as c:
            eq(c.rd("SET", b"", b"old"), "OK")
        holders = [i for i, be in enumerate(s.bes) if be.exists_many([b""])]
        eq(len(holders), 1, "the empty key is on one server")
        s.victim = holders[0]
        s.untouched = [b""]         # what wait() reads to bring the victim's probe on
        return s
    except BaseException:
        s.close()
        raise


def empty_key_outage_writes(s):
    """SET "" twice while its owner is down: the second merges into the first's entry."""
    try:
        with Raw(s.px.addr("p")) as c:
            eq(c.rd("SET", b"", b"new1"), "OK", "SET '' while its owner is down")
            eq(c.rd("SET", b"", b"new2"), "OK", "SET '' again while its owner is down")
    except (EOFError, OSError) as e:
        raise AssertionError("the proxy died remembering the empty key (%s):\n%s" % (
            e, s.px.proc.log_tail(20)))
    eq(s.px.stats()["p"][s.labels[s.victim]]["rejoin_log_keys"], 1,
       "the empty key is remembered once")


def empty_key_after_rejoin(s):
    """The empty key written while its owner was away is deleted on it (and on the
    failover server that took the write): a miss through the proxy, not b"old"."""
    owner = s.bes[s.victim]
    eq(owner.exists_many([b""]), set(), "the returning owner still holds the empty key")
    copies = [i for i, be in enumerate(s.bes) if be.exists_many([b""])]
    eq(copies, [], "servers still holding the empty key")
    with Raw(s.px.addr("p")) as c:
        eq(c.rd("GET", b""), None, "GET '' through the proxy after the rejoin")
    check(s.px.proc.alive(), "the proxy died invalidating the empty key:\n%s",
          s.px.proc.log_tail(20))


@R.test(ringleader=True)
def empty_key_redis(env):
    """Issue 22 item 3: an empty key remembered twice (UBSan: memcpy to NULL)."""
    s = empty_key_setup()
    try:
        s.freeze()
        empty_key_outage_writes(s)
        s.thaw()
        empty_key_after_rejoin(s)
        eq(s.px.stats()["p"]["rejoin_invalidations"] >= 1, True, "an invalidation was sent")
        print("  SET '' twice while its owner was down: remembered once, deleted on the owner "
              "and the failover server when it returned")
    finally:
        s.close()


@R.test(ringleader=True)
def empty_key_journal_redis(env):
    """Issue 22 item 3: a journal with an empty key read back at start (UBSan: memcpy to
    NULL in the replay); the restarted proxy invalidates it like any other key."""
    path = os.path.join(harness.tmpdir(), "rejoin-empty-%d.journal" % os.getpid())
    s = empty_key_setup(glob={"rejoin_log": path, "drain_timeout": 300})
    try:
        s.freeze()
        empty_key_outage_writes(s)
        time.sleep(0.3)             # the journal is synced every 100 ms
        s.px.stop()
        os.kill(s.bes[s.victim].proc.pid, signal.SIGCONT)
        s.px = s.start_proxy()
        check(s.px.proc.alive(), "the proxy died reading the journal back")
        eq(s.state(), "down", "the restarted proxy starts the empty key's owner down")
        eq(s.px.stats()["p"][s.labels[s.victim]]["rejoin_log_keys"], 1,
           "the empty key read back from the journal")
        s.wait("up", 10)
        empty_key_after_rejoin(s)
        print("  the empty key journalled, read back at start and deleted on its owner")
    finally:
        s.close()


JOURNAL_HEADER = b"ringleader-rejoin-journal\t1\n"

# What a mistyped rejoin_log might name: a configuration file (and bytes that are no text).
NOT_A_JOURNAL = (b"# the configuration rejoin_log was not meant to name\n"
                 b"p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n" +
                 bytes(range(256)) + b"\nlast line without a newline")


def wait_file(path, want, timeout):
    """Until the file at path holds exactly want (bytes), for at most patience(timeout)
    seconds; returns what it holds."""
    deadline = time.monotonic() + patience(timeout)
    while True:
        with open(path, "rb") as f:
            got = f.read()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


@R.test(ringleader=True)
def journal_refuses_what_is_not_one(env):
    """Issue 22 item 7: rejoin_log naming a file that is not a journal truncated it to 0
    bytes 100 ms after the start. Now ringleader -t and the start refuse it, naming the
    path, and a reload naming it is refused; the file is left byte for byte."""
    d = harness.tmpdir()
    path = os.path.join(d, "not-a-journal-%d.yml" % os.getpid())
    with open(path, "wb") as f:
        f.write(NOT_A_JOURNAL)
    be = Memcached.start()
    proc = None
    try:
        port = harness.free_port()
        pool = {"listen": "127.0.0.1:%d" % port, "servers": ["%s:1 alpha" % be.hostport()]}
        conf = os.path.join(d, "refuse-%d.yml" % os.getpid())
        with open(conf, "w") as f:
            f.write(ydump({"p": pool, "ringleader": {"rejoin_log": path}}) + "\n")
        # the start: refused (on the version before, it served and truncated the file)
        proc = harness.Proc("ringleader", [
            harness.binary("ringleader"), "-c", conf, "-s", str(harness.free_port()),
            "-a", "127.0.0.1", "--workers", "1", "-v", "5"])
        deadline = time.monotonic() + 30
        served = False
        while proc.alive() and time.monotonic() < deadline and not served:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                served = True
            except OSError:
                time.sleep(0.05)
        if served:
            time.sleep(0.5)         # the journal's 100 ms sync has run a few times
        still = proc.alive()
        rc = proc.stop()
        out = proc.log_tail(10)
        eq(wait_file(path, NOT_A_JOURNAL, 0), NOT_A_JOURNAL,
           "the file rejoin_log names, byte for byte, after the start")
        check(not served and not still and rc not in (0, None),
              "the proxy started on a file that is not a journal (exit %r):\n%s", rc, out)
        check(path in out and "not a rejoin journal" in out, "the refusal names the path:\n%s",
              out)
        # ringleader -t says so too
        r = subprocess.run([harness.binary("ringleader"), "-t", "-c", conf], capture_output=True,
                           timeout=60)
        check(r.returncode != 0 and path.encode() in r.stderr and
              b"not a rejoin journal" in r.stderr,
              "ringleader -t on a rejoin_log that is not a journal: exit %d, %r",
              r.returncode, r.stderr[-400:])

        # a reload naming it: refused, the running configuration keeps serving
        journal = os.path.join(d, "journal-%d" % os.getpid())
        px = Proxy({"p": {"servers": ["%s:1 alpha" % be.hostport()]}},
                   glob={"rejoin_log": journal}, dump=lambda doc: ydump(doc) + "\n")
        try:
            eq(wait_file(journal, JOURNAL_HEADER, 5), JOURNAL_HEADER,
               "a new journal holds its header")
            doc = {"p": px.pools["p"], "ringleader": {"rejoin_log": path}}
            with open(px.conf_path, "w") as f:
                f.write(ydump(doc) + "\n")
            os.kill(px.proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and "reload (SIGHUP)" not in open(
                    px.log_file, errors="replace").read():
                time.sleep(0.05)
            log = open(px.log_file, errors="replace").read()
            check("reload (SIGHUP) refused" in log and path in log,
                  "a reload naming a file that is not a journal:\n%s", px.log_tail(5))
            with Raw(px.addr("p")) as c:
                eq(c.mc_store(b"set", b"k", b"v"), b"STORED\r\n", "still serving")
            check(px.proc.alive(), "the proxy is up")
        finally:
            px.stop()
        eq(wait_file(path, NOT_A_JOURNAL, 0), NOT_A_JOURNAL,
           "the file rejoin_log names, byte for byte, after the reload")
        print("  rejoin_log naming a %d-byte file that is not a journal: ringleader -t, the "
              "start and a reload refuse it, naming it; left byte for byte" % len(NOT_A_JOURNAL))
    finally:
        if proc is not None:
            proc.stop()
        be.stop()


@R.test(ringleader=True)
def journal_forgets_unconfigured_servers(env):
    """Issue 22 item 7: records of servers no longer configured kept the journal from
    ever being emptied. Read back at a start without them, they are forgotten (logged),
    and the file is its header again."""
    d = harness.tmpdir()
    path = os.path.join(d, "journal-removed-%d" % os.getpid())
    recs = b"".join(b"K\tp\tgone\t127.0.0.1:1\t1\t-\t-\t%s\n" % base64.b64encode(b"k%d" % i)
                    for i in range(50))
    with open(path, "wb") as f:
        f.write(JOURNAL_HEADER + recs + b"O\told-pool\tx\t127.0.0.1:2\n")
    s = Setup("memcache", glob={"rejoin_log": path, "drain_timeout": 300})
    try:
        got = wait_file(path, JOURNAL_HEADER, 10)
        eq(got, JOURNAL_HEADER, "the journal once the records of unconfigured servers are "
           "forgotten (%d bytes)" % len(got))
        log = open(s.px.log_file, errors="replace").read()
        check("'gone'" in log and "no longer configured" in log, "the forgetting is logged:\n%s",
              s.px.log_tail(10))
        print("  the records of servers not configured at the start forgotten: the journal is "
              "its header again")
    finally:
        s.close()


@R.test(ringleader=True)
def journal_forgets_servers_a_reload_removes(env):
    """Issue 22 item 7: a server removed by a reload while its log holds keys: its records
    are forgotten once every worker runs the new configuration, and the journal is its
    header again (they used to stay until the server came back)."""
    path = os.path.join(harness.tmpdir(), "journal-reload-%d" % os.getpid())
    s = Setup("memcache", glob={"rejoin_log": path, "drain_timeout": 300})
    try:
        s.preload()
        s.freeze()
        s.outage_writes()
        deadline = time.monotonic() + 5
        while os.path.getsize(path) < 2 * NKEYS * 20 and time.monotonic() < deadline:
            time.sleep(0.05)        # the journal is synced every 100 ms
        check(os.path.getsize(path) >= 2 * NKEYS * 20, "the outage's keys journalled")
        s.pool["servers"] = [x for i, x in enumerate(s.pool["servers"]) if i != s.victim]
        with open(s.px.conf_path, "w") as f:
            f.write(ydump({"p": s.pool, "ringleader": s.glob}) + "\n")
        os.kill(s.px.proc.pid, signal.SIGHUP)
        got = wait_file(path, JOURNAL_HEADER, 10)
        eq(got, JOURNAL_HEADER, "the journal after a reload removed the server its records "
           "were for (%d bytes)" % len(got))
        check("no longer configured" in open(s.px.log_file, errors="replace").read(),
              "the forgetting is logged")
        print("  the records of a server a reload removed forgotten: the journal is its header "
              "again")
    finally:
        s.close()


@R.test(ringleader=True)
def overflow_flushes(env):
    s, stale, wrong, kept, st, up_s = outage("memcache", "invalidate", rejoin_log_keys=50)
    try:
        eq(wrong, [], "values that are neither old nor new")
        eq(len(stale), 0, "stale reads after an overflowed log")
        eq(kept, 0, "the fallback flushed the server")
        eq((st["rejoin_fallbacks"], st["rejoin_flushes"]), (1, 1), "fallback, flush")
        check("rejoin_log_keys" in open(s.px.log_file).read(), "the fallback is logged")
    finally:
        s.close()


if __name__ == "__main__":
    R.main(harness.Env)   # nothing shared to start: each test starts its own
