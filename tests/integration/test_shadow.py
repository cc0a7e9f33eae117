"""test_shadow.py: shadow pools — every write reaches the shadow, different values are counted as mismatches, a frozen shadow costs the primary's clients nothing.

What each test proves, against real memcached and redis-server:
  writes_reach_the_shadow
      400 sets and 100 deletes through the primary pool: every key is on its owner in the
      shadow pool (placed by the shadow pool's own ring) with the primary's value, the
      deleted ones are gone there too; the clients' replies are the primary's.
  mismatches_counted
      50 keys given other values directly on the shadow servers, 150 the same: reading
      all 200 through the proxy counts 50 shadow_mismatches in 200 comparisons (gets'
      cas uniques differ between pools without counting), the clients get the primary's
      values, and the log names one of the keys, at most once a second.
  frozen_shadow_costs_nothing
      one shadow server SIGSTOPped: set+get round trips through the primary stay as fast
      as before (p99 within a few ms, far under the shadow pool's timeout), none fails;
      the copies for the frozen server are dropped past queue_limit and time out.
  fraction_samples_keys
      fraction 0.5: about half the keys are shadowed, and always the same half.
  batched_copies_arrive
      batch_ms 100 (copies wait up to 100 ms to go out together): 200 sets one at a time,
      each answered at once; every copy is on its shadow owner after the batch; 50 more
      sets, then SIGTERM while their copies wait: exit status 0 (no leak, in the sanitizer
      build) and those copies were sent before the end.
  redis_shadow
      the same for a Redis pool: writes reach it, different values count as mismatches.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Memcached, Proxy, Raw, Redis, Runner, check, eq, ring_owners,  # noqa: E402
                     wait_stopped, ydump)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_shadow", per_test_timeout=60, total_timeout=180)

SHADOW_TIMEOUT_MS = 200


class Pair:
    """A primary pool "main" (2 servers) shadowed into "next" (2 other servers)."""

    def __init__(self, kind="memcache", shadow_timeout=2000, **shadow):
        """shadow_timeout: the shadow pool's `timeout:`; 2 s unless the test is about it
        (a copy answered later than that on a loaded machine counts as failed)."""
        cls = Redis if kind == "redis" else Memcached
        self.kind = kind
        self.main = [cls.start() for _ in range(2)]
        self.next = [cls.start() for _ in range(2)]
        common = {"hash": "fnv1a_64", "distribution": "ketama"}
        if kind == "redis":
            common["redis"] = True
        sh = {"pool": "next", "fraction": 1.0, "compare": True}
        sh.update(shadow)
        self.px = Proxy({
            "main": dict(common, timeout=2000, shadow=sh,
                         servers=["%s:1 m%d" % (b.hostport(), i) for i, b in enumerate(self.main)]),
            "next": dict(common, timeout=shadow_timeout,
                         servers=["%s:1 n%d" % (b.hostport(), i) for i, b in enumerate(self.next)]),
        }, dump=lambda d: ydump(d) + "\n")

    def shadow_owner(self, keys):
        own = ring_owners(self.px.conf_path, "next", keys)
        return {k: self.next[int(own[k][1:])] for k in keys}

    def stats(self):
        return self.px.stats()["main"]

    def settle(self, timeout=5.0):
        """Until no shadow copy is in flight (their replies are in)."""
        deadline = time.monotonic() + patience(timeout)
        while time.monotonic() < deadline:
            st = self.px.stats()["next"]
            if all(v["in_flight"] == 0 for v in st.values() if isinstance(v, dict)):
                return
            time.sleep(0.02)

    def close(self):
        self.px.stop()
        for b in self.main + self.next:
            try:
                os.kill(b.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            b.stop()


def mc_values(be, keys):
    return be.get_many(list(keys))


@R.test(ringleader=True)
def writes_reach_the_shadow(env):
    p = Pair()
    try:
        keys = [b"sh-%d" % i for i in range(400)]
        with p.px.client("main") as c:
            c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(k) + 2, b"v:" + k) for k in keys))
            replies = [c.read_line() for _ in keys]
            eq(set(replies), {b"STORED\r\n"}, "the clients get the primary's replies")
            c.send(b"".join(b"delete %s\r\n" % k for k in keys[:100]))
            eq({c.read_line() for _ in range(100)}, {b"DELETED\r\n"})
        p.settle()
        owner = p.shadow_owner(keys)
        missing, wrong, undeleted = [], [], []
        held = {b.port: mc_values(b, keys) for b in p.next}
        for k in keys:
            v = held[owner[k].port].get(k)
            if k in keys[:100]:
                if v is not None:
                    undeleted.append(k)
            elif v is None:
                missing.append(k)
            elif v != b"v:" + k:
                wrong.append(k)
        eq((missing, wrong, undeleted), ([], [], []), "the shadow pool got every write")
        st = p.stats()
        eq(st["shadow_sent"], 500, "shadow_sent")
        eq((st["shadow_dropped"], st["shadow_failed"], st["shadow_mismatches"]), (0, 0, 0),
           "nothing dropped, failed or different")
        eq(st["shadow_compared"], 500, "every write compared (STORED = STORED)")
        print("  500 writes through the primary: 300 values on their shadow owners, 100 "
              "deletes there too; shadow_sent %d, compared %d, mismatches 0" % (
                  st["shadow_sent"], st["shadow_compared"]))
    finally:
        p.close()


@R.test(ringleader=True)
def mismatches_counted(env):
    p = Pair()
    try:
        keys = [b"mm-%d" % i for i in range(200)]
        with p.px.client("main") as c:
            for k in keys:
                eq(c.mc_store(b"set", k, b"same:" + k), b"STORED\r\n")
        p.settle()
        owner = p.shadow_owner(keys)
        for k in keys[:50]:
            with owner[k].client() as c:
                eq(c.mc_store(b"set", k, b"other:" + k), b"STORED\r\n")
        before = p.stats()
        with p.px.client("main") as c:
            for i, k in enumerate(keys):
                vals = c.mc_get(b"gets" if i % 2 else b"get", k)
                eq(vals[0][2], b"same:" + k, "the client gets the primary's value")
        p.settle()
        st = p.stats()
        compared = st["shadow_compared"] - before["shadow_compared"]
        mism = st["shadow_mismatches"] - before["shadow_mismatches"]
        eq((compared, mism), (200, 50), "(compared, mismatches)")
        text = open(p.px.log_file).read()
        lines = [l for l in text.splitlines() if "answered differently" in l]
        check(lines, "no mismatch in the log")
        check(any(k.decode() in lines[0] for k in keys[:50]), "the log names a different key: %s",
              lines[0])
        check(len(lines) <= 3, "the log is rate-limited: %d lines", len(lines))
        print("  200 reads, 50 keys different on the shadow: compared %d, mismatches %d, "
              "%d log line(s): ...%s" % (compared, mism, len(lines), lines[0][-110:]))
    finally:
        p.close()


def round_trips(px, n, prefix):
    """n set+get round trips through pool main; their latencies (s) and any errors."""
    lat, errors = [], []
    with Raw(px.addr("main"), timeout=5) as c:
        for i in range(n):
            k = b"%s-%d" % (prefix, i % 50)
            v = b"%d" % i
            t0 = time.monotonic()
            r = c.mc_store(b"set", k, v)
            vals = c.mc_get(b"get", k)
            lat.append(time.monotonic() - t0)
            if r != b"STORED\r\n" or not vals or vals[0][2] != v:
                errors.append((k, r, vals))
    lat.sort()
    return lat, errors


@R.test(ringleader=True)
def frozen_shadow_costs_nothing(env):
    p = Pair(queue_limit=20, shadow_timeout=SHADOW_TIMEOUT_MS)
    try:
        base, errors = round_trips(p.px, 400, b"fz")
        eq(errors, [], "errors before the freeze")
        frozen = p.next[0]
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        wait_stopped(frozen.proc.pid)
        try:
            lat, errors = round_trips(p.px, 400, b"fz")
            deadline = time.monotonic() + patience(3)
            while p.stats()["shadow_failed"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)    # the copies queued to the frozen server time out
        finally:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        eq(errors, [], "errors on the primary while the shadow is frozen")
        st = p.stats()
        p99b, p99f = base[int(len(base) * 0.99)], lat[int(len(lat) * 0.99)]
        print("  800 copies, one shadow server frozen for 400 set+get round trips: primary "
              "p50 %.2f -> %.2f ms, p99 %.2f -> %.2f ms, max %.1f ms; shadow_dropped %d, "
              "shadow_failed %d" % (base[len(base) // 2] * 1e3, lat[len(lat) // 2] * 1e3,
                                    p99b * 1e3, p99f * 1e3, lat[-1] * 1e3,
                                    st["shadow_dropped"], st["shadow_failed"]))
        # Not a latency target (a loaded sanitizer run is slow and noisy): a primary that
        # waited for the frozen shadow would spend the shadow's timeout on every round
        # trip; here only the ones a loaded machine delays do (a p99 of 200 ms was seen
        # under load 30 with the sanitizer build), far fewer than half.
        waited = sum(1 for x in lat if x >= SHADOW_TIMEOUT_MS / 1000.0)
        check(waited < len(lat) // 2, "%d of %d round trips took the shadow's timeout "
              "(p99 %.2f -> %.2f ms)", waited, len(lat), p99b * 1e3, p99f * 1e3)
        check(st["shadow_dropped"] > 0, "copies past queue_limit dropped")
        check(st["shadow_failed"] > 0, "copies to the frozen server timed out: %r",
              {k: (v["requests"], v["responses"], v["server_timedout"], v["state"])
               for k, v in p.px.stats()["next"].items() if isinstance(v, dict)})
    finally:
        p.close()


@R.test(ringleader=True)
def batched_copies_arrive(env):
    p = Pair(batch_ms=100)
    try:
        keys = [b"bt-%d" % i for i in range(250)]
        with p.px.client("main") as c:
            for k in keys[:200]:
                eq(c.mc_store(b"set", k, b"v:" + k), b"STORED\r\n")
        p.settle()
        owner = p.shadow_owner(keys)

        def missing(ks):
            held = {b.port: mc_values(b, ks) for b in p.next}
            return [k for k in ks if held[owner[k].port].get(k) != b"v:" + k]
        eq(missing(keys[:200]), [], "copies on their shadow owners")
        eq(p.stats()["shadow_sent"], 200)
        with p.px.client("main") as c:
            for k in keys[200:]:
                eq(c.mc_store(b"set", k, b"v:" + k), b"STORED\r\n")
            eq(p.px.stop(), 0, "exit status with copies waiting; log:\n%s" % p.px.log_tail(20))
        eq(missing(keys[200:]), [], "the waiting copies went out at the stop")
        print("  batch_ms 100: 200 copies on their owners; 50 copies waiting at SIGTERM sent, "
              "exit 0")
    finally:
        p.close()


@R.test(ringleader=True)
def fraction_samples_keys(env):
    p = Pair(fraction=0.5, compare=False)
    try:
        keys = [b"fr-%d" % i for i in range(400)]
        shadowed = []
        for rnd in range(2):
            with p.px.client("main") as c:
                for k in keys:
                    eq(c.mc_store(b"set", k, b"r%d" % rnd), b"STORED\r\n")
            p.settle()
            held = {}
            for b in p.next:
                held.update(mc_values(b, keys))
            shadowed.append({k for k in keys if held.get(k) == b"r%d" % rnd})
            for b in p.next:
                with b.client() as c:
                    c.send(b"flush_all\r\n")
                    c.read_line()
        n = len(shadowed[0])
        print("  fraction 0.5: %d of %d keys shadowed, the same %d in a second round" % (
            n, len(keys), len(shadowed[0] & shadowed[1])))
        check(140 <= n <= 260, "about half shadowed: %d", n)
        eq(shadowed[0], shadowed[1], "always the same keys")
        eq(p.stats()["shadow_compared"], 0, "compare: false compares nothing")
    finally:
        p.close()


@R.test(ringleader=True)
def redis_shadow(env):
    p = Pair("redis")
    try:
        keys = [b"rs-%d" % i for i in range(100)]
        with p.px.client("main") as c:
            for k in keys:
                eq(c.rd("SET", k, b"v:" + k), "OK")
        p.settle()
        owner = p.shadow_owner(keys)
        for k in keys:
            with owner[k].client() as c:
                eq(c.rd("GET", k), b"v:" + k, "the write reached the shadow")
        for k in keys[:10]:
            with owner[k].client() as c:
                c.rd("SET", k, "different")
        before = p.stats()
        with p.px.client("main") as c:
            for k in keys:
                eq(c.rd("GET", k), b"v:" + k)
        p.settle()
        st = p.stats()
        eq((st["shadow_compared"] - before["shadow_compared"],
            st["shadow_mismatches"] - before["shadow_mismatches"]), (100, 10))
    finally:
        p.close()


if __name__ == "__main__":
    R.main(harness.Env)   # nothing shared to start: each test starts its own
