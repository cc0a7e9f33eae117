"""test_migrate.py: a Redis pool grows 4 -> 5 and shrinks 5 -> 4 under load and loses nothing; a
migration cut by SIGKILL is finished by the next proxy (docs/reload.md).

Keys of five types (string, hash, list, set, zset), a third with a TTL, are written through the
proxy; while the pool's ring changes and the keys move, client threads read, write, delete and
expire them, each thread over keys of its own, every reply checked against a truth table. At
the end every server is scanned: each key is on its owner only, with its value and TTL.

A shrink's removed server stays reachable until drained (also after a restart from the state
file): its keys are moved first like a grow's, never answered -TRYAGAIN.

RL_MIGRATE_KEYS sets the number of keys (default 20000); RL_MIGRATE_FULL=1 runs the issue's
200,000 (minutes: not for CI).
"""

import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Proxy, Redis, Runner, check, eq, patience,  # noqa: E402
                     ring_owners, server_lines)
from harness.wire import Raw, RespError, http, resp_encode  # noqa: E402

FULL = os.environ.get("RL_MIGRATE_FULL") == "1"
NKEYS = 200000 if FULL else int(os.environ.get("RL_MIGRATE_KEYS", "20000"))
THREADS = 4
BATCH = 16          # operations a client thread pipelines (on distinct keys)
RATE = 50000 if FULL else 4000      # migrate_rate: the moves last a few seconds under load
TYPES = ("string", "hash", "list", "set", "zset")
TTL_S = 3000

R = Runner("test_migrate", per_test_timeout=120 if not FULL else 1800,
           total_timeout=300 if not FULL else 5400)


class Env(harness.Env):
    def __init__(self):
        self.backends = [Redis.start() for _ in range(5)]
        self.proxy = None
        self.truth = {}     # key -> [type, value, expire_at or None]; value None: deleted

    def pool(self, n):
        return {"redis": True, "hash": "fnv1a_64", "distribution": "ketama", "timeout": 5000,
                "server_connections": 2, "migrate": True, "migrate_rate": RATE,
                "servers": server_lines(self.backends[:n], NAMES[:n])}

    def close(self):
        if self.proxy is not None:
            self.proxy.stop()
        for b in self.backends:
            b.stop()


def key_type(k):
    return TYPES[int(k.split(b":")[1]) % 5]


# ------------------------------------------------------------------ the truth table

def initial_value(t, i):
    if t == "string":
        return b"s%d" % i
    if t == "hash":
        return {b"f1": b"a%d" % i, b"f2": b"b%d" % i}
    if t == "list":
        return [b"x%d" % i, b"y%d" % i]
    if t == "set":
        return {b"m%d" % i, b"n%d" % i}
    return {b"z%d" % i: 1.0, b"w%d" % i: 2.0}


def write_cmds(k, t, v):
    if t == "string":
        return [("SET", k, v)]
    if t == "hash":
        return [("HSET", k) + tuple(x for f in sorted(v) for x in (f, v[f]))]
    if t == "list":
        return [("RPUSH", k) + tuple(v)]
    if t == "set":
        return [("SADD", k) + tuple(sorted(v))]
    return [("ZADD", k) + tuple(x for m in sorted(v) for x in (repr(v[m]), m))]


def read_cmd(k, t):
    return {"string": ("GET", k), "hash": ("HGETALL", k), "list": ("LRANGE", k, 0, -1),
            "set": ("SMEMBERS", k), "zset": ("ZRANGE", k, 0, -1, "WITHSCORES")}[t]


def decode(t, r):
    """A read's reply as the truth table holds values; None for a missing key."""
    if t == "string":
        return r
    if t == "hash":
        return {r[i]: r[i + 1] for i in range(0, len(r), 2)} or None
    if t == "list":
        return list(r) or None
    if t == "set":
        return set(r) or None
    return {r[i]: float(r[i + 1]) for i in range(0, len(r), 2)} or None


def pipeline(c, cmds):
    c.send(b"".join(resp_encode(*x) for x in cmds))
    return [c.read_resp(timeout=30) for _ in cmds]


def load(env, keys):
    """Write every key through the proxy; a third get a TTL."""
    with env.proxy.client() as c:
        for start in range(0, len(keys), 500):
            cmds, batch, now = [], keys[start:start + 500], time.time()
            for k in batch:
                i = int(k.split(b":")[1])
                t = key_type(k)
                v = initial_value(t, i)
                cmds += write_cmds(k, t, v)
                exp = None
                if i % 3 == 0:
                    cmds.append(("EXPIRE", k, TTL_S))
                    exp = now + TTL_S
                env.truth[k] = [t, v, exp]
            for r in pipeline(c, cmds):
                check(not isinstance(r, RespError), "load: %r" % r)


def tally(w, what, want, got):
    """A read's outcome counted on client thread w: a false miss, a resurrected delete, a
    wrong value (the first five described in w.errors)."""
    if got == want:
        return
    if want is not None and got is None:
        w.false_misses += 1
    elif want is None:
        w.resurrected += 1
    else:
        w.wrong += 1
    if len(w.errors) < 5:
        w.errors.append("%s: want %r got %r" % (what, want, got))


class Worker(threading.Thread):
    """Reads, writes, deletes and expires its own keys through the proxy until told to stop;
    every reply is checked against the truth table (the thread is its keys' only writer)."""

    def __init__(self, env, keys, seed):
        super().__init__(daemon=True)
        self.env, self.keys, self.rng = env, keys, random.Random(seed)
        self.stop_at = None
        self.ops = self.false_misses = self.wrong = self.resurrected = self.tryagain = 0
        self.errors = []
        self.stopping = threading.Event()

    def plan(self, k):
        """One operation on k: (command, effect), effect(reply) checks the reply against the
        truth and applies the operation to it."""
        ent = self.env.truth[k]
        t, v, exp = ent
        op = self.rng.random()
        if op < 0.6:                        # read
            def read(r):
                tally(self, "%r %s" % (k, t), v, decode(t, r))
            return read_cmd(k, t), read
        if op < 0.85:                       # a partial write (the rest of the value stays)
            n = self.rng.randrange(1 << 30)
            if t == "string":
                cmd, nv = ("APPEND", k, b"+%d" % n), (v or b"") + b"+%d" % n
            elif t == "hash":
                cmd, nv = ("HSET", k, b"h%d" % n, b"%d" % n), dict(v or {})
                nv[b"h%d" % n] = b"%d" % n
            elif t == "list":
                cmd, nv = ("RPUSH", k, b"%d" % n), list(v or []) + [b"%d" % n]
            elif t == "set":
                cmd, nv = ("SADD", k, b"%d" % n), set(v or ()) | {b"%d" % n}
            else:
                cmd, nv = ("ZADD", k, n, b"%d" % n), dict(v or {})
                nv[b"%d" % n] = float(n)

            def write(r):
                check(not isinstance(r, RespError), "write %r: %r" % (k, r))
                ent[1], ent[2] = nv, (exp if v is not None else None)
            return cmd, write
        if op < 0.95:                       # delete
            def delete(r):
                eq(r, 1 if v is not None else 0, "DEL %r (exists: %s)" % (k, v is not None))
                ent[1], ent[2] = None, None
            return ("DEL", k), delete
        when = time.time() + TTL_S           # expire

        def expire(r):
            eq(r, 1 if v is not None else 0, "EXPIRE %r (exists: %s)" % (k, v is not None))
            if v is not None:
                ent[2] = when
        return ("EXPIRE", k, TTL_S), expire

    def batch(self, c):
        """A pipeline of operations on distinct keys (so their order does not matter); one
        answered -TRYAGAIN (a key whose move cannot go first) was not applied: planned again
        and sent again."""
        todo = self.rng.sample(self.keys, BATCH)
        for _ in range(2000):
            plans = [self.plan(k) for k in todo]
            c.send(b"".join(resp_encode(*p[0]) for p in plans))
            again = []
            for k, (cmd, effect) in zip(todo, plans):
                r = c.read_resp(timeout=30)
                if isinstance(r, RespError) and str(r).startswith("TRYAGAIN"):
                    self.tryagain += 1
                    again.append(k)
                    continue
                effect(r)
                self.ops += 1
            if not again:
                return
            todo = again
            time.sleep(0.005)
        raise AssertionError("TRYAGAIN for 10 s: %r" % todo[:3])

    def run(self):
        try:
            with self.env.proxy.client() as c:
                while not self.stopping.is_set():
                    self.batch(c)
        except Exception as e:      # noqa: BLE001 -- reported by the test
            self.errors.append("thread failed: %r" % e)
            self.failed = True

    failed = False


class MultiWorker(threading.Thread):
    """MGET, MSET and DEL over several servers (requests split over servers) on string
    keys of its own, one at a time, every reply checked against the truth table; one
    answered -TRYAGAIN is sent again (counted)."""

    def __init__(self, env, keys, seed):
        super().__init__(daemon=True)
        self.env, self.keys, self.rng = env, keys, random.Random(seed)
        self.ops = self.false_misses = self.wrong = self.resurrected = self.tryagain = 0
        self.errors = []
        self.stopping = threading.Event()
        self.failed = False

    def send(self, c, cmd):
        for _ in range(2000):
            r = c.rd(*cmd, timeout=30)
            if isinstance(r, RespError) and str(r).startswith("TRYAGAIN"):
                self.tryagain += 1
                time.sleep(0.005)
                continue
            check(not isinstance(r, RespError), "%s: %r" % (cmd[0], r))
            return r
        raise AssertionError("TRYAGAIN for 10 s: %r" % (cmd[:3],))

    def step(self, c):
        truth = self.env.truth
        op = self.rng.random()
        ks = self.rng.sample(self.keys, 8)
        if op < 0.6:
            r = self.send(c, ("MGET",) + tuple(ks))
            for k, got in zip(ks, r):
                tally(self, "MGET %r" % k, truth[k][1], got)
        elif op < 0.85:
            vals = [(k, b"m%d" % self.rng.randrange(1 << 30)) for k in ks[:4]]
            eq(self.send(c, ("MSET",) + tuple(x for kv in vals for x in kv)), "OK")
            for k, v in vals:
                truth[k][1], truth[k][2] = v, None
        else:
            want = sum(1 for k in ks[:3] if truth[k][1] is not None)
            eq(self.send(c, ("DEL",) + tuple(ks[:3])), want, "DEL over servers")
            for k in ks[:3]:
                truth[k][1], truth[k][2] = None, None
        self.ops += 1

    def run(self):
        try:
            with self.env.proxy.client() as c:
                while not self.stopping.is_set():
                    self.step(c)
        except Exception as e:      # noqa: BLE001 -- reported by the test
            self.errors.append("thread failed: %r" % e)
            self.failed = True


def stop_multi(mw):
    mw.stopping.set()
    mw.join(patience(30))
    check(not mw.is_alive(), "the multi-key thread did not stop")
    print("  multi-key requests (MGET/MSET/DEL over servers): %d, %d -TRYAGAIN"
          % (mw.ops, mw.tryagain))
    check(not mw.failed, "multi-key thread failed: %s" % mw.errors[:5])
    eq((mw.false_misses, mw.wrong, mw.resurrected), (0, 0, 0),
       "multi-key false misses, wrong values, resurrected (%s)" % mw.errors[:5])
    check(mw.ops > 0, "the multi-key thread ran")
    return mw.tryagain


def start_workers(env, keys):
    parts = [keys[i::THREADS] for i in range(THREADS)]
    ws = [Worker(env, parts[i], 1000 + i) for i in range(THREADS)]
    for w in ws:
        w.start()
    return ws


def stop_workers(ws, t0):
    for w in ws:
        w.stopping.set()
    for w in ws:
        w.join(patience(30))
        check(not w.is_alive(), "a client thread did not stop")
    secs = time.monotonic() - t0
    ops = sum(w.ops for w in ws)
    res = {x: sum(getattr(w, x) for w in ws)
           for x in ("false_misses", "wrong", "resurrected", "tryagain")}
    print("  load: %d ops in %.1f s (%.0f ops/s), %s" % (ops, secs, ops / secs, res))
    errs = [e for w in ws for e in w.errors]
    check(not any(w.failed for w in ws), "client threads failed: %s" % errs[:5])
    eq(res["false_misses"], 0, "false misses (%s)" % errs[:5])
    eq(res["wrong"], 0, "reads that lost or undid a write (%s)" % errs[:5])
    eq(res["resurrected"], 0, "deleted keys that came back (%s)" % errs[:5])
    check(ops > 0, "the clients ran")
    return res


# ------------------------------------------------------------------ the proxy

def migration(env):
    """The pool's migration progress from the stats document, or None."""
    return env.proxy.stats().get("migrate", {}).get("rd")


def reload_to(env, n):
    before = env.proxy.stats()["rd"]["epoch"]
    env.proxy.rewrite({"rd": env.pool(n)})
    os.kill(env.proxy.proc.popen.pid, signal.SIGHUP)
    deadline = time.monotonic() + patience(10)
    while env.proxy.stats()["rd"]["epoch"] == before:
        check(time.monotonic() < deadline, "no reload within 10 s:\n" + env.proxy.log_tail())
        time.sleep(0.05)


def reload_until_moving(env, n, rate):
    """Reload to n servers at `rate` keys/s and return the migration's progress once it has
    moved keys (so that a kill lands in the middle of it)."""
    before = env.proxy.stats()["rd"]["epoch"]
    env.proxy.rewrite({"rd": dict(env.pool(n), migrate_rate=rate)})
    os.kill(env.proxy.proc.popen.pid, signal.SIGHUP)
    deadline = time.monotonic() + patience(20)
    while True:
        m = migration(env)
        if env.proxy.stats()["rd"]["epoch"] != before and m and m["state"] == "running" and \
                m["moved"] > 0:
            return m
        check(time.monotonic() < deadline, "no migration under way: %r" % m)
        time.sleep(0.02)


def wait_migrated(env, timeout):
    """Until the migration to the pool's current ring (its epoch: not an earlier one's,
    still shown for a moment after a reload) is done."""
    deadline = time.monotonic() + patience(timeout)
    while True:
        epoch = env.proxy.stats()["rd"]["epoch"]
        m = migration(env)
        if m is not None and m["state"] == "done" and m.get("epoch") == epoch:
            return m
        check(time.monotonic() < deadline,
              "migration not done in %d s: %r\n%s" % (timeout, m, env.proxy.log_tail()))
        time.sleep(0.1)


def scan_all(be):
    keys, cursor = [], b"0"
    with be.client() as c:
        for _ in range(1000000):
            cursor, page = c.rd("SCAN", cursor, "COUNT", 1000, timeout=30)
            keys += page
            if cursor == b"0":
                return keys
    raise AssertionError("SCAN did not end")


def removed_server_released(env, be):
    """The proxy closes its connections to a removed server once the migration drained it:
    wait (bounded) until the server has no client but this one and other Redis servers'
    MIGRATE connections; the seconds it took."""
    t0 = time.monotonic()
    deadline = t0 + patience(10)
    while True:
        with be.client() as c:
            lines = c.rd("CLIENT", "LIST").decode().splitlines()
        # not this one, nor another Redis's MIGRATE (it caches its connection for 10 s)
        others = [x for x in lines if " cmd=client" not in x and " cmd=restore" not in x]
        if not others:
            return time.monotonic() - t0
        check(time.monotonic() < deadline,
              "the removed server still has %d connections: %s" % (len(others), others[:2]))
        time.sleep(0.1)


def verify(env, n):
    """Every key on its owner only (every server scanned), with its value and its TTL."""
    owners = ring_owners(env.proxy.conf_path, "rd", sorted(env.truth))
    label = {"127.0.0.1:%d" % b.port: NAMES[i] for i, b in enumerate(env.backends)}
    where = {}
    for b in env.backends:
        for k in scan_all(b):
            check(k not in where, "key %r on two servers" % k)
            where[k] = label[b.hostport()]
    live = {k for k, e in env.truth.items() if e[1] is not None}
    eq(sorted(set(where) - live)[:5], [], "keys that should not exist")
    eq(sorted(live - set(where))[:5], [], "keys lost")
    misplaced = [k for k in live if where[k] != owners[k]]
    eq(misplaced[:5], [], "keys not on their owner (of %d)" % len(misplaced))
    for b in env.backends[n:]:
        eq(scan_all(b), [], "keys left on a server out of the pool")
    # values and TTLs, straight from each owner
    byserver = {}
    for k in live:
        byserver.setdefault(where[k], []).append(k)
    bad, now = [], time.time()
    for b in env.backends[:n]:
        ks = byserver.get(label[b.hostport()], [])
        with b.client() as c:
            for start in range(0, len(ks), 500):
                batch = ks[start:start + 500]
                cmds = []
                for k in batch:
                    cmds.append(read_cmd(k, env.truth[k][0]))
                    cmds.append(("PTTL", k))
                rs = pipeline(c, cmds)
                for i, k in enumerate(batch):
                    t, v, exp = env.truth[k]
                    got, pttl = decode(t, rs[2 * i]), rs[2 * i + 1]
                    if got != v:
                        bad.append("%r: want %r got %r" % (k, v, got))
                    if exp is None and pttl != -1:
                        bad.append("%r: want no TTL, got %d ms" % (k, pttl))
                    if exp is not None and abs((exp - now) * 1000 - pttl) > 1000 + \
                            (time.time() - now) * 1000:
                        bad.append("%r: TTL %d ms, want %.0f" % (k, pttl, (exp - now) * 1000))
    eq(bad[:5], [], "values or TTLs that differ (%d)" % len(bad))
    return len(live)


def write_db(env, keys, db):
    """keys written by a client SELECTed into database db (through the proxy)."""
    with env.proxy.client() as c:
        eq(c.rd("SELECT", db), "OK")
        for r in pipeline(c, [("SET", k, b"v" + k) for k in keys]):
            eq(r, "OK", "SET in database %d" % db)


def verify_db(env, keys, n, db):
    """Each of keys on its owner only, in database db, untouched since written: the walk
    moved them in their database."""
    owners = ring_owners(env.proxy.conf_path, "rd", sorted(keys))
    label = {"127.0.0.1:%d" % b.port: NAMES[i] for i, b in enumerate(env.backends)}
    where = {}
    for b in env.backends:
        with b.client() as c:
            eq(c.rd("SELECT", db), "OK")
            cursor = b"0"
            for _ in range(100000):
                cursor, page = c.rd("SCAN", cursor, "COUNT", 1000, timeout=30)
                for k in page:
                    check(k not in where, "key %r on two servers (database %d)" % (k, db))
                    where[k] = label[b.hostport()]
                if cursor == b"0":
                    break
            for k in keys:
                if where.get(k) == label[b.hostport()]:
                    eq(c.rd("GET", k), b"v" + k, "value of %r in database %d" % (k, db))
    eq(sorted(set(keys) - set(where))[:5], [], "keys lost from database %d" % db)
    misplaced = [k for k in keys if where[k] != owners[k]]
    eq(misplaced[:5], [], "keys of database %d not on their owner (of %d)" % (db, len(misplaced)))
    for b in env.backends[n:]:
        with b.client() as c:
            eq(c.rd("SELECT", db), "OK")
            eq(c.rd("DBSIZE"), 0, "keys of database %d left on a server out of the pool" % db)


def live_diff(env, n_from, n_to):
    """`ringleader-ring --diff NEW --live` counts, on the servers, exactly the keys whose owner
    the change moves (no client runs meanwhile)."""
    import json
    import subprocess
    from harness import binary
    from harness.procs import tmpdir
    new = os.path.join(tmpdir(), "diff-new-%d.yml" % n_to)
    with open(new, "w") as f:
        f.write(harness.yaml_dump({"rd": dict(env.pool(n_to), listen="127.0.0.1:1")}))
    t0 = time.monotonic()
    r = subprocess.run([binary("ringleader-ring"), "-c", env.proxy.conf_path, "-p", "rd",
                        "--diff", new, "--live", "--json"], capture_output=True, timeout=120)
    eq(r.returncode, 0, "ringleader-ring --diff --live: %r" % r.stderr[-400:])
    live = json.loads(r.stdout)["pools"][0]["live"]
    keys = sorted(k for k, e in env.truth.items() if e[1] is not None)
    before = ring_owners(env.proxy.conf_path, "rd", keys)
    after = ring_owners(new, "rd", keys)
    moving = sum(1 for k in keys if before[k] != after[k])
    print("  ringleader-ring --diff --live: %d of %d keys would move, %d bytes (%.1f s)"
          % (live["moving_keys"], live["keys"], live["moving_bytes"], time.monotonic() - t0))
    eq((live["keys"], live["moving_keys"]), (len(keys), moving), "--live's counts")
    check(live["moving_bytes"] > moving, "--live's bytes")


def grow_or_shrink(env, keys, n_from, n_to, timeout, mkeys=()):
    ws = start_workers(env, keys)
    mw = MultiWorker(env, list(mkeys), 77) if mkeys else None
    if mw is not None:
        mw.start()
    t0 = time.monotonic()
    time.sleep(0.5)
    reload_to(env, n_to)
    tr = time.monotonic()
    m = wait_migrated(env, timeout)
    mig_s = time.monotonic() - tr
    time.sleep(0.3)
    res = stop_workers(ws, t0)
    if mw is not None:
        res["tryagain_multi"] = stop_multi(mw)
    print("  migration %d -> %d: %d scanned, %d moved, %d errors, %d conflicts in %.1f s "
          "(%.0f keys/s)" % (n_from, n_to, m["scanned"], m["moved"], m["errors"],
                             m["conflicts"], mig_s, m["moved"] / max(mig_s, 1e-3)))
    eq(m["conflicts"], 0, "conflicts")
    live = verify(env, n_to)
    print("  %d keys verified on their owners" % live)
    m["tryagain"] = res["tryagain"]
    m["tryagain_multi"] = res.get("tryagain_multi", 0)
    return m


@R.test(ringleader=True, nutcracker_reason="ringleader's configuration")
def pools_that_cannot_migrate_are_refused(env):
    import subprocess
    from harness import binary
    from harness.procs import tmpdir
    cases = [
        ({"servers": ["127.0.0.1:11211:1"], "migrate": True}, "warmup: SECONDS"),
        ({"redis": True, "servers": ["127.0.0.1:6379:1"], "migrate": True, "replicas": 1,
          "warmup": 30}, "warmup"),
        ({"redis": True, "redis_cluster": True, "servers": ["127.0.0.1:6379:1"],
          "migrate": True}, "moves its keys with its slots"),
        ({"redis": True, "servers": ["127.0.0.1:6379:1"], "migrate": True,
          "migrate_rate": 0}, "migrate_rate"),
    ]
    for pool, want in cases:
        path = os.path.join(tmpdir(), "bad-%d.yml" % random.getrandbits(32))
        with open(path, "w") as f:
            f.write(harness.yaml_dump({"p": dict(pool, listen="127.0.0.1:1")}))
        r = subprocess.run([binary("ringleader"), "-t", "-c", path], capture_output=True,
                           timeout=30)
        out = (r.stdout + r.stderr).decode()
        check(r.returncode != 0, "%r accepted: %s" % (pool, out))
        check(want in out, "%r: the error names %r: %s" % (pool, want, out))
    ok = os.path.join(tmpdir(), "ok-%d.yml" % random.getrandbits(32))
    with open(ok, "w") as f:
        f.write(harness.yaml_dump({"p": {"redis": True, "listen": "127.0.0.1:1",
                                         "servers": ["127.0.0.1:6379:1"], "migrate": True,
                                         "migrate_rate": 500}}))
    r = subprocess.run([binary("ringleader"), "-t", "-c", ok], capture_output=True, timeout=30)
    eq(r.returncode, 0, "a Redis pool with migrate: %s" % (r.stdout + r.stderr).decode())


@R.test(ringleader=True, nutcracker_reason="moving keys is ringleader's", timeout=300)
def grow_then_shrink_under_load(env):
    keys = [b"mk:%d:%x" % (i, random.getrandbits(32)) for i in range(NKEYS)]
    # strings (key_type: i % 5 == 0) for the requests split over servers
    mkeys = [b"mm:%d:%x" % (5 * i, random.getrandbits(32)) for i in range(400)]
    env.proxy = Proxy({"rd": env.pool(4)}, admin=True)
    load(env, keys + mkeys)
    # keys of a client SELECTed into database 3, never touched again: the walk moves them
    dkeys = [b"db3:%d:%x" % (i, random.getrandbits(32)) for i in range(300)]
    write_db(env, dkeys, 3)
    verify(env, 4)
    live_diff(env, 4, 5)
    m = grow_or_shrink(env, keys, 4, 5, 120 if not FULL else 1200, mkeys)
    verify_db(env, dkeys, 5, 3)
    check(m["moved"] > 0, "the grow moved keys")
    status, text = http(env.proxy.admin_port, "GET", "/metrics")
    eq(status, 200, "/metrics")
    check('ringleader_migrate_running{pool="rd"} 0' in text, "/metrics: the migration is done")
    check('ringleader_migrate_keys{pool="rd",what="moved"} %d' % m["moved"] in text,
          "/metrics: the keys moved")
    check('ringleader_migrate_server_keys{pool="rd",server="epsilon",what="scanned"}' in text,
          "/metrics: per server")
    if os.path.exists("/usr/bin/promtool"):
        import subprocess
        r = subprocess.run(["/usr/bin/promtool", "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=60)
        eq(r.returncode, 0, "promtool check metrics: %r" % (r.stdout + r.stderr)[-800:])
    status, text = http(env.proxy.admin_port, "GET", "/health")
    eq((status, text.strip()), (200, "ok"), "/health once the migration is done")
    before = env.proxy.stats()["rd"]
    m = grow_or_shrink(env, keys, 5, 4, 120 if not FULL else 1200, mkeys)
    check(m["moved"] > 0, "the shrink moved keys")
    verify_db(env, dkeys, 4, 3)
    st = env.proxy.stats()["rd"]
    print("  migrate_key_moves %d, migrate_refused %d (shrink: %d moved first, %d refused)"
          % (st["migrate_key_moves"], st["migrate_refused"],
             st["migrate_key_moves"] - before["migrate_key_moves"],
             st["migrate_refused"] - before["migrate_refused"]))
    check(st["migrate_key_moves"] > before["migrate_key_moves"],
          "the shrink's requests moved their keys first (from the removed server too)")
    # a removed server stays reachable (retiring) until drained: its keys are moved first
    # like a grow's, never answered -TRYAGAIN (single-key requests only here)
    eq(st["migrate_refused"] - before["migrate_refused"], 0, "shrink: requests refused")
    eq(m["tryagain"], 0, "shrink: -TRYAGAIN answers the clients saw")
    print("  the proxy had closed its connections to the removed server by the end of the "
          "check (+%.1f s)"
          % removed_server_released(env, env.backends[4]))


@R.test(ringleader=True, nutcracker_reason="moving keys is ringleader's", timeout=300)
def killed_mid_migration_is_finished_by_the_next_proxy(env):
    if env.proxy is None:
        env.proxy = Proxy({"rd": env.pool(4)})
        load(env, [b"mk:%d:%x" % (i, random.getrandbits(32)) for i in range(NKEYS)])
    # slow the moves so the kill lands in the middle
    env.proxy.rewrite({"rd": dict(env.pool(4), migrate_rate=max(NKEYS // 20, 100))})
    os.kill(env.proxy.proc.popen.pid, signal.SIGHUP)
    time.sleep(0.5)
    m = reload_until_moving(env, 5, max(NKEYS // 20, 100))
    state = env.proxy.conf_path + ".migrate"
    check(os.path.exists(state), "the state file %s exists while keys move" % state)
    moved_before = m["moved"]
    env.proxy.proc.kill()
    check(os.path.exists(state), "the state file outlives the killed proxy")
    # the next proxy, with the same pool (5 servers), finishes the move; it is told where
    # the killed one kept its state (its own file is another path)
    old = env.proxy
    env.proxy = Proxy({"rd": dict(env.pool(5), listen=old.pools["rd"]["listen"],
                                  migrate_rate=max(NKEYS // 20, 100))},
                      glob={"migrate_state": state}, admin=True)
    status, text = http(env.proxy.admin_port, "GET", "/health")
    m = migration(env)
    if m["state"] == "running":
        check("pool 'rd': migrating:" in text, "/health says the pool migrates: %r" % text)
    # a transaction runs on a pinned connection, where no key is moved first: one that
    # touches a key that moved is refused while the pool migrates (EXEC: EXECABORT)
    refused = committed = 0
    with env.proxy.client() as c:
        for i in range(40):
            # well-mixed names: fnv1a_64 puts short counters close together on the ring
            k = b"tx:%d:%x" % (i, random.getrandbits(48))
            eq(c.rd("MULTI"), "OK")
            r = c.rd("SET", k, b"v")
            e = c.rd("EXEC")
            if isinstance(r, RespError):
                check(str(r).startswith("TRYAGAIN"), "refused with TRYAGAIN: %r" % r)
                check(isinstance(e, RespError) and str(e).startswith("EXECABORT"),
                      "EXEC after a refused command: %r" % e)
                refused += 1
            else:
                eq((r, e), ("QUEUED", ["OK"]), "a transaction on a key at home")
                committed += 1
                env.truth[k] = ["string", b"v", None]
    still = migration(env)["state"] == "running"
    print("  transactions while migrating: %d refused, %d committed (still migrating: %s)"
          % (refused, committed, still))
    if still:
        check(refused > 0, "a transaction on a moved key is refused while keys move")
    # it rebuilt the ring the killed one moved from: requests move their keys first again,
    # so clients see every key while the rest moves
    keys = sorted(env.truth)
    ws = start_workers(env, keys)
    t0 = time.monotonic()
    m = wait_migrated(env, 120)
    time.sleep(0.3)
    stop_workers(ws, t0)
    print("  killed after %d keys moved; the restarted proxy moved %d more" %
          (moved_before, m["moved"]))
    check(not os.path.exists(state), "the state file is gone once the move is done")
    old.stop()
    live = verify(env, 5)
    print("  %d keys verified on their owners" % live)
    rc = env.proxy.stop()
    env.proxy = None
    eq(rc, 0, "the proxy's exit status (a sanitizer's report fails it)")


@R.test(ringleader=True, nutcracker_reason="moving keys is ringleader's", timeout=300)
def shrink_killed_mid_migration_keeps_the_removed_server_reachable(env):
    """5 -> 4 cut by SIGKILL: the next proxy, configured with the 4 servers only, rebuilds
    the previous ring from the state file with the removed server's address, and keeps
    reaching that server (retiring) while the rest moves: clients see every key and get no
    -TRYAGAIN."""
    rate = max(NKEYS // 20, 100)
    if env.proxy is None:
        env.proxy = Proxy({"rd": dict(env.pool(5), migrate_rate=rate)})
        if not env.truth:
            load(env, [b"mk:%d:%x" % (i, random.getrandbits(32)) for i in range(NKEYS)])
    else:
        env.proxy.rewrite({"rd": dict(env.pool(5), migrate_rate=rate)})
        os.kill(env.proxy.proc.popen.pid, signal.SIGHUP)
        time.sleep(0.5)
    if migration(env) is not None:      # whatever ran before is done
        wait_migrated(env, 120)
    m = reload_until_moving(env, 4, rate)
    state = env.proxy.conf_path + ".migrate"
    moved_before = m["moved"]
    env.proxy.proc.kill()
    check(os.path.exists(state), "the state file outlives the killed proxy")
    old = env.proxy
    env.proxy = Proxy({"rd": dict(env.pool(4), listen=old.pools["rd"]["listen"],
                                  migrate_rate=rate)},
                      glob={"migrate_state": state})
    keys = sorted(env.truth)
    ws = start_workers(env, keys)
    t0 = time.monotonic()
    m = wait_migrated(env, 120)
    time.sleep(0.3)
    res = stop_workers(ws, t0)
    st = env.proxy.stats()["rd"]
    print("  killed after %d keys moved; the restarted proxy moved %d more (%d by requests "
          "first, %d refused)" % (moved_before, m["moved"], st["migrate_key_moves"],
                                  st["migrate_refused"]))
    check(m["moved"] > 0, "the restarted proxy moved keys")
    eq(st["migrate_refused"], 0, "requests refused after the restart")
    eq(res["tryagain"], 0, "-TRYAGAIN answers the clients saw after the restart")
    old.stop()
    print("  the proxy had closed its connections to the removed server by the end of the "
          "check (+%.1f s)"
          % removed_server_released(env, env.backends[4]))
    check(not os.path.exists(state), "the state file is gone once the move is done")
    live = verify(env, 4)
    print("  %d keys verified on their owners" % live)
    rc = env.proxy.stop()
    env.proxy = None
    eq(rc, 0, "the proxy's exit status (a sanitizer's report fails it)")


@R.test(ringleader=True, nutcracker_reason="runs nutcracker itself, beside ringleader")
def nutcracker_on_the_same_grow(env):
    """The same grow through nutcracker (twemproxy 0.5.0, restarted on the new file: it has no
    reload): the share of reads that miss afterwards, printed beside ringleader's 0."""
    import shutil
    if shutil.which("nutcracker") is None:
        print("  nutcracker not installed: no comparison")
        return
    n = max(NKEYS // 4, 1000)
    keys = [b"nc:%d:%x" % (i, random.getrandbits(32)) for i in range(n)]
    pool = {"redis": True, "hash": "fnv1a_64", "distribution": "ketama", "timeout": 5000,
            "servers": server_lines(env.backends[:4], NAMES[:4])}
    nc = Proxy({"nc": dict(pool)}, kind="nutcracker")
    try:
        with nc.client() as c:
            for r in pipeline(c, [("SET", k, b"v") for k in keys]):
                eq(r, "OK", "SET through nutcracker")
    finally:
        nc.stop()
    nc = Proxy({"nc": dict(pool, servers=server_lines(env.backends[:5], NAMES[:5]))},
               kind="nutcracker")
    try:
        with nc.client() as c:
            got = pipeline(c, [("GET", k) for k in keys])
    finally:
        nc.stop()
    misses = sum(1 for r in got if r is None)
    print("  nutcracker 4 -> 5: %d of %d reads miss (%.1f%%); ringleader with migrate: 0"
          % (misses, n, 100.0 * misses / n))
    for b in env.backends:
        with b.client() as c:
            pipeline(c, [("DEL", k) for k in keys])


def setup():
    return Env()


if __name__ == "__main__":
    R.main(setup)
