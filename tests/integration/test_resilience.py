"""test_resilience.py: health under real failures: a killed backend, a flapping one, on_down miss/error, replicas across zones, bounded loads.

What each test proves, against real memcached / redis-server processes killed by PID:
  kill_memcache, kill_redis   one of four backends SIGKILLed under steady set-then-get
      traffic: at most server_failure_limit x workers client errors, all on the dead
      server's keys; its keys then live on their second choice (asked directly); after a
      restart on the same port and a probe they are back on their owner; the keys of
      the live servers never errored and never left their owner.
  flapping_server_damped      a backend killed and restarted every second: the other
      servers' keys never see an error or move; each down period lasts longer than the
      one before (flap damping, read from the proxy log).
  on_down_miss, on_down_error the exact replies, at once (well under the pool timeout).
  replicas_zones              R=2 over three zones of two servers: placement on both
      replicas in distinct zones, read_from local-zone proven with per-server request
      counters, every key readable after a whole zone is killed, set-then-get consistent.
  bounded_loads               half the traffic on one key, many pipelined clients: no
      server's in_flight_peak above the cap the code enforces; the peak without the
      bound; a write of the spilled key reaches its spill server too.

Backend ports are taken below 32768: a restarted server must get its port back, and a
port in the ephemeral range may meanwhile be the proxy's own source port (EADDRINUSE).
"""

import json
import math
import os
import random
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Memcached, Proxy, Raw, Redis, RespError, Runner,  # noqa: E402
                     Skip, StartError, binary, check, eq, port_is_free, server_lines)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_resilience", per_test_timeout=45, total_timeout=170)

WORKERS = 2
LIMIT = 2            # server_failure_limit
RETRY_MS = 1000      # server_retry_timeout
TIMEOUT_MS = 1000    # timeout: a live server must not miss it on a loaded box (300 ms could)


# ---------------------------------------------------------------- ports and backends

def low_port():
    """A free 127.0.0.1 port in 20000..32000 (below the ephemeral range), not handed
    out before in this process."""
    rnd = random.Random(os.getpid() ^ int(time.time() * 1000))
    for _ in range(500):
        p = rnd.randint(20000, 32000)
        if p not in harness._given_ports and port_is_free(p):
            harness._given_ports.add(p)
            return p
    raise StartError("no free low port")


def start_backend(kind, port=None):
    """A memcached or redis-server on a low port (retried on a start race), or on port."""
    cls = Redis if kind == "redis" else Memcached
    if port is not None:
        last = None
        for _ in range(20):      # the old process's socket may linger a moment
            try:
                return cls(port)
            except StartError as e:
                last = e
                time.sleep(0.1)
        raise last
    last = None
    for _ in range(3):
        try:
            return cls(low_port())
        except StartError as e:
            last = e
    raise last


def kill(be):
    """SIGKILL a backend by its PID (no clean shutdown: its sockets are reset)."""
    be.proc.kill()
    be.proc.stop()


def backend_values(be, keys):
    """{key: value} for the keys this backend holds, asked directly."""
    keys = list(keys)
    if isinstance(be, Memcached):
        return be.get_many(keys)
    out = {}
    with be.client() as c:
        for i in range(0, len(keys), 100):
            part = keys[i:i + 100]
            vals = c.rd("MGET", *part)
            for k, v in zip(part, vals):
                if v is not None:
                    out[k] = v
    return out


# ---------------------------------------------------------------- the proxy

class RProxy(Proxy):
    """harness.Proxy with mapping-form servers and an optional `ringleader:` block."""

    def __init__(self, pools, glob=None, workers=WORKERS, verbosity=5):
        super().__init__(pools, workers=workers, verbosity=verbosity, glob=glob,
                         dump=lambda doc: harness.ydump(doc) + "\n")

    def log_text(self):
        try:
            with open(self.log_file, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def server_stats(self, pool, label):
        return self.stats()[pool][label]

    def wait_state(self, pool, label, state, timeout, poke=None):
        """Wait until the stats port shows server `label` in `state`; poke() is called
        between looks (traffic that lets the proxy notice). Returns seconds waited."""
        timeout = patience(timeout)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.server_stats(pool, label)["state"] == state:
                return time.monotonic() - t0
            if poke:
                poke()
            time.sleep(0.05)
        raise AssertionError("server %s of pool %s not %s after %.1fs; log:\n%s" % (
            label, pool, state, timeout, self.log_tail(20)))


def ring_prefs(conf, pool, keys, n):
    """{key: [labels of the first n servers of its preference list]} from ringleader-ring."""
    r = subprocess.run([binary("ringleader-ring"), "-c", conf, "-p", pool, "-n", str(n),
                        "--json"], input=b"\n".join(keys) + b"\n", capture_output=True,
                       timeout=30)
    eq(r.returncode, 0, "ringleader-ring exit (%s)" % r.stderr[-300:])
    doc = json.loads(r.stdout)
    return {e["key"].encode(): e["preference"] for e in doc["keys"]}


def log_times(text, pattern):
    """Monotonic-comparable times (seconds) of the log lines matching pattern."""
    out = []
    for line in text.splitlines():
        if re.search(pattern, line):
            m = re.match(r"\[(\d+)-(\d+)-(\d+) (\d+):(\d+):(\d+)\.(\d+)\]", line)
            if m:
                y, mo, d, h, mi, s, ms = (int(x) for x in m.groups())
                out.append(((d * 24 + h) * 60 + mi) * 60 + s + ms / 1000.0)
    return out


# ---------------------------------------------------------------- steady traffic

class Churn:
    """Client threads each doing set-then-get of their own keys through the proxy, every
    reply checked. A set's value is unique (key:sequence); a get must return exactly it.
    last[k] is the value of k's last acknowledged set; pause()/resume() park every thread
    between two round trips so the backends can be asked directly."""

    def __init__(self, addr, keys, nthreads=4, redis=False):
        self.addr = addr
        self.redis = redis
        self.groups = [keys[i::nthreads] for i in range(nthreads)]
        self.last = {}
        self.unsure = set()        # keys whose last set got an error: value unknown
        self.errors = []           # (time, key, what)
        self.ops = 0
        self.passes = [0] * nthreads    # times each thread went over all its keys
        self.go = threading.Event()
        self.go.set()
        self.stop_ = threading.Event()
        self.parked = [threading.Event() for _ in range(nthreads)]
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(nthreads)]
        self.seq = 0

    def start(self):
        for t in self.threads:
            t.start()

    def _err(self, k, what):
        with self.lock:
            self.errors.append((time.monotonic(), k, what))

    def _one(self, c, k, v):
        """One set-then-get; returns None when right, else what went wrong."""
        if self.redis:
            r = c.rd("SET", k, v)
            if r != "OK":
                return "set", r
            r = c.rd("GET", k)
        else:
            r = c.mc_store(b"set", k, v)
            if r != b"STORED\r\n":
                return "set", r
            c.send(b"get " + k + b"\r\n")
            raw = c.read_until(harness.mc_values_len)
            if not (raw.startswith(b"VALUE ") or raw == b"END\r\n"):
                return "get", raw
            vals = harness.mc_parse_values(raw)
            r = vals[0][2] if vals else None
        if r != v:
            return "get", r
        return None

    def run(self, i):
        c = None
        while not self.stop_.is_set():
            for k in self.groups[i]:
                if not self.go.is_set():
                    self.parked[i].set()
                    self.go.wait(10)
                    self.parked[i].clear()
                if self.stop_.is_set():
                    break
                with self.lock:
                    self.seq += 1
                    v = b"%s:%d" % (k, self.seq)
                try:
                    if c is None:
                        c = Raw(self.addr, timeout=3)
                    res = self._one(c, k, v)
                except (TimeoutError, EOFError, OSError, AssertionError) as e:
                    res = ("io", repr(e)[:200])
                    try:
                        c.close()
                    except Exception:
                        pass
                    c = None
                with self.lock:
                    self.ops += 1
                    if res is None:
                        self.last[k] = v
                        self.unsure.discard(k)
                    else:
                        if res[0] != "get":
                            self.unsure.add(k)
                        else:
                            self.last[k] = v    # the set was acknowledged
                        self.errors.append((time.monotonic(), k, res))
            self.passes[i] += 1
        if c is not None:
            c.close()

    def wait_passes(self, n=2, timeout=20):
        """Until every thread has gone n more times over its keys (bounded): then every
        key was set again since the call, however slow the machine; a fixed sleep is a
        guess at the rate."""
        start = list(self.passes)
        deadline = time.monotonic() + patience(timeout)
        while any(p < s + n for p, s in zip(self.passes, start)):
            check(time.monotonic() < deadline, "churn passes %r, from %r" % (self.passes, start))
            time.sleep(0.02)

    def pause(self):
        self.go.clear()
        deadline = time.monotonic() + patience(10)
        for p in self.parked:
            check(p.wait(max(0.1, deadline - time.monotonic())), "a churn thread did not park")

    def resume(self):
        self.go.set()

    def stop(self):
        self.stop_.set()
        self.go.set()
        for t in self.threads:
            t.join(10)

    def errors_on(self, keys, since=0.0):
        keys = set(keys)
        return [e for e in self.errors if e[1] in keys and e[0] >= since]


def check_placement(backends, labels, keys, holder_of, last, unsure, what):
    """Every key in keys (not in unsure) is held with its last value by holder_of[key]
    (a label) and by no other backend in `backends` (label -> backend)."""
    held = {lab: backend_values(be, keys) for lab, be in backends.items()}
    bad = []
    for k in keys:
        if k in unsure or k not in last:
            continue
        want = holder_of[k]
        if held[want].get(k) != last[k]:
            bad.append((k, "owner %s has %r, last set %r" % (want, held[want].get(k), last[k])))
        for lab in backends:
            if lab != want and k in held[lab]:
                bad.append((k, "also on %s (%r)" % (lab, held[lab][k])))
    check(not bad, "%s: %d misplaced, e.g. %r", what, len(bad), bad[:5])
    return sum(1 for k in keys if k not in unsure and k in last)


# ---------------------------------------------------------------- 1. a killed backend

def kill_and_restart(kind):
    bes = [start_backend(kind) for _ in range(4)]
    labels = NAMES[:4]
    pool = {
        "auto_eject_hosts": True, "server_failure_limit": LIMIT,
        "server_retry_timeout": RETRY_MS, "timeout": TIMEOUT_MS,
        "servers": server_lines(bes, labels),
    }
    if kind == "redis":
        pool["redis"] = True
    px = RProxy({"p": pool})
    keys = [b"kill-%s-%d" % (kind.encode(), i) for i in range(240)]
    prefs = ring_prefs(px.conf_path, "p", keys, 2)
    vi = 1
    victim = labels[vi]
    vkeys = [k for k in keys if prefs[k][0] == victim]
    lkeys = [k for k in keys if prefs[k][0] != victim]
    check(len(vkeys) >= 20, "only %d keys on the victim", len(vkeys))
    by_label = dict(zip(labels, bes))
    # Three clients, one request out each. At the kill, each request in flight to the
    # victim fails (at most one per client) and its connection's close counts one
    # failure. Until server_failure_limit failures mark the server down, a client's next
    # request may wait on a reconnect that is refused: one connect failure fails every
    # request queued on it, and a second worker may be reconnecting at the same moment,
    # so that is again at most one per client. Never more than two errors per client,
    # and none once the server is down.
    churn = Churn(px.addr("p"), keys, nthreads=3, redis=(kind == "redis"))
    churn.start()
    try:
        churn.wait_passes(1)      # every key holds a value before the kill
        check(not churn.errors, "errors before any kill: %r", churn.errors[:3])
        t_kill = time.monotonic()
        kill(bes[vi])
        down_after = px.wait_state("p", victim, "down", 5)
        churn.wait_passes()       # every key set again while the victim is down
        churn.pause()
        # While down: the victim's keys are on their second choice; the others untouched.
        live = {lab: be for lab, be in by_label.items() if lab != victim}
        n2 = check_placement(live, labels, vkeys, {k: prefs[k][1] for k in vkeys},
                             churn.last, churn.unsure, "victim's keys while it is down")
        check(n2 >= len(vkeys) - 4, "only %d of %d victim keys checked", n2, len(vkeys))
        check_placement(live, labels, lkeys, {k: prefs[k][0] for k in lkeys},
                        churn.last, churn.unsure, "live servers' keys while one is down")
        st = px.stats()["p"]
        check(st["failovers"] > 0, "no failovers counted: %r", st["failovers"])
        check(st["server_ejects"] >= 1, "server_ejects %r", st["server_ejects"])
        churn.resume()

        # Restart on the same port: a probe brings it back, its keys go home.
        t_restart = time.monotonic()
        bes[vi] = start_backend(kind, bes[vi].port)
        by_label[victim] = bes[vi]
        up_after = px.wait_state("p", victim, "up", 10)
        t_up = time.monotonic()
        churn.wait_passes()       # every key set again since it came back
        churn.pause()
        check_placement({victim: bes[vi]}, labels, vkeys, {k: victim for k in vkeys},
                        churn.last, churn.unsure, "victim's keys after it came back")
        check_placement(by_label, labels, lkeys, {k: prefs[k][0] for k in lkeys},
                        churn.last, churn.unsure, "live servers' keys at the end")
        churn.resume()
        time.sleep(0.2)
    finally:
        churn.stop()
    text = px.log_text()
    check(re.search(r"server '%s' .* is down after" % victim, text), "no 'is down' log line")
    check(re.search(r"server '%s' .* is up again" % victim, text), "no 'up again' log line")
    live_errs = churn.errors_on(lkeys)
    check(not live_errs, "errors on live servers' keys: %r", live_errs[:5])
    verrs = churn.errors_on(vkeys)
    # A get that misses right after its acknowledged set is a transition, not an error:
    # at the kill the set reached the owner just before it died and the get went to the
    # second choice; at the return the set went to the second choice just before the
    # probe succeeded and the get to the (empty) owner. At most one per client thread
    # at each transition, and only there.
    cold = [e for e in verrs if e[2][0] == "get" and e[2][1] is None]
    errs = [e for e in verrs if e not in cold]
    bound = 2 * len(churn.threads)
    check(len(errs) <= bound, "%d errors on the victim's keys (> %d): %r",
          len(errs), bound, errs[:8])
    # "at the kill": within a second of it, or before the stats port showed the server
    # down if that took longer (a loaded machine); an error after that is one too many
    at_kill = t_kill + max(1.0, down_after)
    late = [e for e in errs if e[0] > at_kill]
    check(not late, "errors after the server was down: %r", late[:3])
    check(len(cold) <= 2 * len(churn.threads), "%d cold misses for %d clients", len(cold),
          len(churn.threads))
    stray = [(round(e[0] - t_kill, 3), e[1]) for e in cold
             if not (t_kill <= e[0] <= at_kill or t_restart <= e[0] <= t_up + 0.2)]
    check(not stray, "misses away from the transitions (s after the kill; restart at "
          "%.3f, up seen at %.3f): %r", t_restart - t_kill, t_up - t_kill, stray)
    print("  %s: %d round trips; %d error(s) at the kill (bound %d): %s; %d miss(es) "
          "right after a set, at the transitions; down %.2fs after the kill, up %.2fs after the restart" % (
              kind, churn.ops, len(errs), bound,
              sorted(set(str(e[2][1])[:40] for e in errs)), len(cold), down_after, up_after))
    px.stop()
    for be in bes:
        be.stop()


@R.test(ringleader=True)
def kill_memcache(env):
    kill_and_restart("memcache")


@R.test(ringleader=True)
def kill_redis(env):
    kill_and_restart("redis")


# ---------------------------------------------------------------- 2. flapping

@R.test(ringleader=True)
def flapping_server_damped(env):
    retry = 400
    bes = [start_backend("memcache") for _ in range(4)]
    labels = NAMES[:4]
    px = RProxy({"p": {
        "auto_eject_hosts": True, "server_failure_limit": LIMIT,
        "server_retry_timeout": retry, "timeout": TIMEOUT_MS,
        "servers": server_lines(bes, labels),
    }}, verbosity=6)
    keys = [b"flap-%d" % i for i in range(200)]
    prefs = ring_prefs(px.conf_path, "p", keys, 2)
    vi = 2
    victim = labels[vi]
    lkeys = [k for k in keys if prefs[k][0] != victim]
    churn = Churn(px.addr("p"), keys)
    churn.start()
    kills = 0
    flap_s = 14.0
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        while time.monotonic() - t0 < flap_s:
            kill(bes[vi])
            kills += 1
            time.sleep(0.3)
            bes[vi] = start_backend("memcache", bes[vi].port)
            time.sleep(0.7)
        churn.pause()
        live = {lab: be for lab, be in zip(labels, bes) if lab != victim}
        check_placement(live, labels, lkeys, {k: prefs[k][0] for k in lkeys},
                        churn.last, churn.unsure, "live servers' keys after the flapping")
    finally:
        churn.stop()
    live_errs = churn.errors_on(lkeys)
    check(not live_errs, "errors on live servers' keys: %r", live_errs[:5])
    text = px.log_text()
    downs = log_times(text, r"server '%s' .* is down after" % victim)
    ups = log_times(text, r"server '%s' .* is up again" % victim)
    probes = log_times(text, r"probing server '%s'" % victim)
    # Down periods: each "is down" to the next "up again".
    periods = []
    for d in downs:
        nxt = [u for u in ups if u >= d]
        if nxt:
            periods.append(round(nxt[0] - d, 2))
    # The wait before each probe: from the transition to down (or the previous failed
    # probe) to the probe. Each flap and each failed probe doubles it.
    marks = sorted([(t, "down") for t in downs] + [(t, "probe") for t in probes])
    waits = [round(b[0] - a[0], 2) for a, b in zip(marks, marks[1:]) if b[1] == "probe"]
    verrs = len(churn.errors) - len(live_errs)
    print("  %d kills in %.0fs: %d down transitions, %d probes, %d up again; waits before "
          "each probe %s s; complete down periods %s s; %d errors on the flapping server's "
          "keys" % (kills, flap_s, len(downs), len(probes), len(ups), waits, periods, verrs))
    check(len(downs) >= 1 and len(waits) >= 3, "too few downs/probes: downs %r probes %r",
          downs, probes)
    check(len(downs) < kills / 2, "not damped: %d down transitions for %d kills",
          len(downs), kills)
    shrink = [(a, b) for a, b in zip(waits, waits[1:]) if b + 0.15 < a]
    check(not shrink, "a wait shorter than the one before: %r", waits)
    check(waits[-1] >= 4 * waits[0] and waits[-1] >= 4 * retry / 1000.0,
          "waits do not grow: %r", waits)
    px.stop()
    for be in bes:
        be.stop()


# ---------------------------------------------------------------- 3. on_down miss / error

class OnDown:
    """Two memcache pools (miss, error) and two redis pools over three live servers and
    one port nothing listens on; the dead server is driven down first."""

    def __init__(self):
        self.mcs = [start_backend("memcache") for _ in range(3)]
        self.rds = [start_backend("redis") for _ in range(3)]
        dead_mc, dead_rd = low_port(), low_port()
        labels = NAMES[:4]
        self.dead = labels[3]
        mc_servers = server_lines(self.mcs, labels)
        mc_servers.append("127.0.0.1:%d:1 %s" % (dead_mc, self.dead))
        rd_servers = server_lines(self.rds, labels)
        rd_servers.append("127.0.0.1:%d:1 %s" % (dead_rd, self.dead))
        common = {"timeout": 2000, "server_failure_limit": LIMIT,
                  "server_retry_timeout": 30000}
        self.px = RProxy({
            "mmiss": dict(common, on_down="miss", servers=mc_servers),
            "merr": dict(common, on_down="error", servers=mc_servers),
            "rmiss": dict(common, on_down="miss", redis=True, servers=rd_servers),
            "rerr": dict(common, on_down="error", redis=True, servers=rd_servers),
        })
        keys = [b"od-%d" % i for i in range(200)]
        prefs = ring_prefs(self.px.conf_path, "mmiss", keys, 2)
        self.dkey = next(k for k in keys if prefs[k][0] == self.dead)
        self.dkey_second = labels.index(prefs[self.dkey][1])
        self.lkey = next(k for k in keys if prefs[k][0] != self.dead)
        self.lkey_owner = labels.index(prefs[self.lkey][0])

    def drive_down(self, pool, redis):
        """Requests for the dead server's key until the pool marks it down."""
        with self.px.client(pool, timeout=5) as c:
            for _ in range(20):
                if redis:
                    c.rd("GET", self.dkey)
                else:
                    c.mc(b"get " + self.dkey)
                    # an error line ends the reply; END alone means the miss policy
                if self.px.server_stats(pool, self.dead)["state"] == "down":
                    return
                time.sleep(0.05)
        raise AssertionError("%s: %s never marked down" % (pool, self.dead))


def timed(fn, *a, **kw):
    t0 = time.monotonic()
    r = fn(*a, **kw)
    return r, time.monotonic() - t0


FAST = 1.5     # "at once": under the pool timeout of 2 s, which a request that waited on the
               # dead server would take (loose for sanitizer builds under load)


@R.test(ringleader=True)
def on_down_miss(env):
    od = env.ondown()
    od.drive_down("mmiss", False)
    k = od.dkey
    with od.px.client("mmiss") as c:
        for line, want in ((b"get " + k, b"END\r\n"), (b"gets " + k, b"END\r\n"),
                           (b"mg " + k + b" v", b"EN\r\n"), (b"delete " + k, b"NOT_FOUND\r\n"),
                           (b"incr " + k + b" 1", b"NOT_FOUND\r\n"),
                           (b"touch " + k + b" 10", b"NOT_FOUND\r\n"),
                           (b"md " + k, b"NF\r\n")):
            r, dt = timed(c.mc, line)
            eq(r, want, line.decode())
            check(dt < FAST, "%r took %.3fs", line, dt)
        for cmd in (b"set", b"add", b"replace", b"append"):
            r, dt = timed(c.mc_store, cmd, k, b"v")
            eq(r, b"NOT_STORED\r\n", cmd.decode())
            check(dt < FAST, "%r took %.3fs", cmd, dt)
        c.send(b"ms " + k + b" 1\r\nv\r\n")
        eq(c.read_line(), b"NS\r\n", "ms")
        # A multi-get over a live and the dead server: the dead fragment is all misses.
        lv = b"live-value"
        eq(c.mc_store(b"set", od.lkey, lv), b"STORED\r\n", "set of a live key")
        vals, dt = timed(c.mc_get, b"get", od.lkey, k)
        eq(vals, [(od.lkey, 0, lv, None)], "get live+dead")
        check(dt < FAST, "multi-get took %.3fs", dt)
    # miss is not failover: nothing reached the dead key's second choice
    check(k not in od.mcs[od.dkey_second].get_many([k]), "the refused set was stored elsewhere")

    od.drive_down("rmiss", True)
    with od.px.client("rmiss") as c:
        for args, want in ((("GET", k), None), (("HGET", k, "f"), None),
                           (("SET", k, "v"), RespError("ERR server down (on_down: miss refuses writes)")),
                           (("DEL", k), RespError("ERR server down (on_down: miss refuses writes)")),
                           (("INCR", k), RespError("ERR server down (on_down: miss refuses writes)"))):
            r, dt = timed(c.rd, *args)
            eq(r, want, repr(args))
            check(dt < FAST, "%r took %.3fs", args, dt)
    check(not od.rds[od.dkey_second].exists_many([k]), "the refused SET was stored elsewhere")
    st = od.px.stats()
    eq(st["mmiss"]["failovers"], 0, "mmiss failovers")
    eq(st["rmiss"]["failovers"], 0, "rmiss failovers")


@R.test(ringleader=True)
def on_down_error(env):
    od = env.ondown()
    od.drive_down("merr", False)
    k = od.dkey
    want = b"SERVER_ERROR server %s is down\r\n" % od.dead.encode()
    with od.px.client("merr") as c:
        for line in (b"get " + k, b"mg " + k + b" v", b"delete " + k, b"incr " + k + b" 1"):
            r, dt = timed(c.mc, line)
            eq(r, want, line.decode())
            check(dt < FAST, "%r took %.3fs", line, dt)
        r, dt = timed(c.mc_store, b"set", k, b"v")
        eq(r, want, "set")
        check(dt < FAST, "set took %.3fs", dt)
        # the connection is still usable and live keys are served
        eq(c.mc_store(b"set", od.lkey, b"x"), b"STORED\r\n", "set of a live key")
        # a multi-get over a live and the dead server reports the error, at once
        c.send(b"get " + od.lkey + b" " + k + b"\r\n")
        r, dt = timed(c.read_until, harness.mc_values_len)
        check(b"is down" in r and r.startswith(b"SERVER_ERROR"), "get live+dead: %r", r)
        check(dt < FAST, "multi-get took %.3fs", dt)
    od.drive_down("rerr", True)
    rwant = RespError("ERR no server available: server %s is down" % od.dead)
    with od.px.client("rerr") as c:
        for args in (("GET", k), ("SET", k, "v"), ("DEL", k), ("INCR", k)):
            r, dt = timed(c.rd, *args)
            eq(r, rwant, repr(args))
            check(dt < FAST, "%r took %.3fs", args, dt)
        eq(c.rd("SET", od.lkey, "x"), "OK", "SET of a live key")


# ---------------------------------------------------------------- 4. replicas across zones

@R.test(ringleader=True)
def replicas_zones(env):
    zones = ["z1", "z1", "z2", "z2", "z3", "z3"]
    labels = ["z1a", "z1b", "z2a", "z2b", "z3a", "z3b"]
    bes = [start_backend("memcache") for _ in range(6)]
    by_label = dict(zip(labels, bes))
    zone_of = dict(zip(labels, zones))
    px = RProxy({"p": {
        "auto_eject_hosts": True, "server_failure_limit": LIMIT,
        "server_retry_timeout": 30000, "timeout": TIMEOUT_MS,
        "hash": "md5", "replicas": 2, "read_from": "local-zone",
        "servers": [{"address": be.hostport(), "name": labels[i], "zone": zones[i]}
                    for i, be in enumerate(bes)],
    }}, glob={"zone": "z2"})
    keys = [b"rep-%d-%d" % (i, i * 7919 % 1009) for i in range(300)]
    prefs = ring_prefs(px.conf_path, "p", keys, 2)
    no_local = [k for k in keys if "z2" not in (zone_of[prefs[k][0]], zone_of[prefs[k][1]])]
    check(30 <= len(no_local) <= 270, "%d of 300 keys without a z2 replica", len(no_local))
    same_zone = [k for k in keys if zone_of[prefs[k][0]] == zone_of[prefs[k][1]]]
    check(not same_zone, "%d keys with both replicas in one zone, e.g. %r",
          len(same_zone), [(k, prefs[k]) for k in same_zone[:3]])

    # Writes reach both replicas and nothing else.
    with px.client("p") as c:
        for k in keys:
            eq(c.mc_store(b"set", k, b"v0:" + k), b"STORED\r\n", "set %r" % k)
    held = {lab: be.get_many(keys) for lab, be in by_label.items()}
    bad = [k for k in keys
           if sorted(lab for lab in labels if k in held[lab]) != sorted(prefs[k])]
    check(not bad, "%d keys not on exactly their two replicas, e.g. %r", len(bad),
          [(k, prefs[k], [lab for lab in labels if k in held[lab]]) for k in bad[:3]])

    # read_from local-zone: the z2 replica when there is one, else the primary.
    before = {lab: s["requests"] for lab, s in px.stats()["p"].items()
              if isinstance(s, dict) and lab in by_label}
    want = {lab: 0 for lab in labels}
    with px.client("p") as c:
        for k in keys:
            eq(c.mc_get(b"get", k), [(k, 0, b"v0:" + k, None)], "get %r" % k)
            local = [lab for lab in prefs[k] if zone_of[lab] == "z2"]
            want[local[0] if local else prefs[k][0]] += 1
    after = {lab: px.stats()["p"][lab]["requests"] for lab in labels}
    got = {lab: after[lab] - before[lab] for lab in labels}
    eq(got, want, "reads per server with read_from local-zone in z2")
    check(got["z2a"] > 0 and got["z2b"] > 0, "a z2 server served no read: %r", got)
    print("  reads per server (local-zone z2): %s" % got)

    # Kill zone z1 whole. Until both are marked down, requests that reach them fail;
    # writes (to every live replica) still succeed through the other copy.
    kill(by_label["z1a"])
    kill(by_label["z1b"])
    transition_errors = 0
    t0 = time.monotonic()
    with px.client("p", timeout=5) as c:
        while time.monotonic() - t0 < patience(10):
            st = px.stats()["p"]
            if st["z1a"]["state"] == "down" and st["z1b"]["state"] == "down":
                break
            for k in keys:
                if "z1a" in prefs[k] or "z1b" in prefs[k]:
                    r = c.mc_store(b"set", k, b"v0:" + k)     # the same value again
                    transition_errors += r != b"STORED\r\n"
                    vals = c.mc_get(b"get", k)
                    transition_errors += vals != [(k, 0, b"v0:" + k, None)]
        else:
            raise AssertionError("zone z1 not marked down after 10 s")
    print("  zone z1 down after %.2fs, %d failed request(s) meanwhile" % (
        time.monotonic() - t0, transition_errors))
    check(transition_errors <= 2 * LIMIT * WORKERS, "%d errors while zone z1 went down",
          transition_errors)
    # Every key is still readable, with the value set before the kill.
    with px.client("p") as c:
        unread = [k for k in keys if c.mc_get(b"get", k) != [(k, 0, b"v0:" + k, None)]]
    check(not unread, "%d keys unreadable after zone z1 died, e.g. %r", len(unread),
          [(k, prefs[k]) for k in unread[:3]])
    # Set then get: consistent, and every live replica holds the new value.
    with px.client("p") as c:
        for k in keys:
            eq(c.mc_store(b"set", k, b"v1:" + k), b"STORED\r\n", "set %r" % k)
            eq(c.mc_get(b"get", k), [(k, 0, b"v1:" + k, None)], "get %r" % k)
    live = [lab for lab in labels if zone_of[lab] != "z1"]
    held = {lab: by_label[lab].get_many(keys) for lab in live}
    stale = [(k, lab) for k in keys for lab in prefs[k]
             if lab in held and held[lab].get(k) != b"v1:" + k]
    check(not stale, "%d live replicas without the new value, e.g. %r", len(stale), stale[:3])
    st = px.stats()["p"]
    eq(st["fail_open"], 0, "fail_open with 2 of 6 down")
    px.stop()
    for lab in live:
        by_label[lab].stop()


# ---------------------------------------------------------------- 5. bounded loads

CLIENTS = 8
DEPTH = 32


def hot_load(addr, hot, cold, seconds, hot_value):
    """CLIENTS threads, each pipelining DEPTH gets (half on `hot`) and reading every
    reply. Returns (batches, hot hits, hot misses, wrong values)."""
    stop = time.monotonic() + seconds
    res = {"batches": 0, "hits": 0, "misses": 0, "cold_misses": 0, "wrong": []}
    lock = threading.Lock()

    def run(seed):
        rnd = random.Random(seed)
        with Raw(addr, timeout=5) as c:
            while time.monotonic() < stop:
                ks = [hot if i % 2 == 0 else rnd.choice(cold) for i in range(DEPTH)]
                c.send(b"".join(b"get " + k + b"\r\n" for k in ks))
                hits = misses = cmiss = 0
                wrong = []
                for k in ks:
                    vals = c.read_values()
                    if k == hot:
                        if not vals:
                            misses += 1
                        elif vals[0][2] != hot_value:
                            wrong.append(vals)
                        else:
                            hits += 1
                    elif not vals:
                        cmiss += 1          # spilled to a server that never had it
                    elif vals != [(k, 0, b"c:" + k, None)]:
                        wrong.append((k, vals))
                with lock:
                    res["batches"] += 1
                    res["hits"] += hits
                    res["misses"] += misses
                    res["cold_misses"] += cmiss
                    res["wrong"] += wrong

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 20)
    return res


@R.test(ringleader=True)
def bounded_loads(env):
    bes = [start_backend("memcache") for _ in range(4)]
    labels = NAMES[:4]
    servers = server_lines(bes, labels)
    factor = 1.25
    px = RProxy({
        "bounded": {"balance_factor": factor, "servers": servers},
        # the same ring with a bound nobody reaches: in_flight_peak is kept only for
        # pools with balance_factor, so this is the peak without bounded loads
        "unbounded": {"balance_factor": 1000, "servers": servers},
    })
    hot = b"the-hot-key"
    cold = [b"cold-%d" % i for i in range(200)]
    prefs = ring_prefs(px.conf_path, "bounded", [hot] + cold, 4)
    owner = prefs[hot][0]
    hv = b"hot-value"
    with px.client("unbounded") as c:
        eq(c.mc_store(b"set", hot, hv), b"STORED\r\n", "set hot")
        for k in cold:
            eq(c.mc_store(b"set", k, b"c:" + k), b"STORED\r\n", "set cold")

    ub = hot_load(px.addr("unbounded"), hot, cold, 2.0, hv)
    st = px.stats()
    ub_peak = {lab: st["unbounded"][lab]["in_flight_peak"] for lab in labels}
    b = hot_load(px.addr("bounded"), hot, cold, 2.0, hv)
    st = px.stats()
    b_peak = {lab: st["bounded"][lab]["in_flight_peak"] for lab in labels}
    spills = {lab: st["bounded"][lab]["spills"] for lab in labels}
    eq(ub["wrong"], [], "wrong values (unbounded)")
    eq(ub["misses"] + ub["cold_misses"], 0, "misses without spills")
    eq(b["wrong"], [], "wrong values (bounded)")

    # What the code enforces (src/dist/bounded.c): a read goes to a server whose load L_s
    # is below cap = ceil(c x (L + 1) / n), L the total in flight before it, so the
    # server has at most cap after. The clients never have more than CLIENTS x DEPTH
    # requests out, so L + 1 <= CLIENTS x DEPTH at any placement. The loads are read from
    # shared atomics by each worker without a lock: two workers may both see a server
    # at cap - 1 and both place there, so each other worker can add one.
    cap = math.ceil(factor * CLIENTS * DEPTH / len(bes))
    bound = cap + (WORKERS - 1)
    print("  in_flight_peak with balance_factor %.2f: %s (cap %d, +%d for racing workers); "
          "spills %s; hot hits/misses %d/%d, cold misses %d, %d batches" % (
              factor, b_peak, cap, WORKERS - 1, spills, b["hits"], b["misses"],
              b["cold_misses"], b["batches"]))
    print("  in_flight_peak without the bound: %s (owner %s)" % (ub_peak, owner))
    over = {lab: p for lab, p in b_peak.items() if p > bound}
    check(not over, "in_flight_peak above %d: %r", bound, over)
    check(sum(spills.values()) > 0, "no spills at all")
    check(ub_peak[owner] > cap, "without the bound the hot owner's peak %d is not above the "
          "cap %d (the load does not exercise the bound)", ub_peak[owner], cap)
    check(ub_peak[owner] == max(ub_peak.values()), "unbounded: owner not the busiest %r", ub_peak)

    # The spill-write rule: within 10 s of a spilled read, a write of the key goes to its
    # owner and to the spill server both.
    nv = b"hot-value-2"
    with px.client("bounded") as c:
        eq(c.mc_store(b"set", hot, nv), b"STORED\r\n", "set hot after spills")
    holders = [lab for lab, be in zip(labels, bes) if be.get_many([hot]).get(hot) == nv]
    check(owner in holders and len(holders) == 2, "hot key written to %r (owner %s)",
          holders, owner)
    check(spills[[h for h in holders if h != owner][0]] > 0, "written to a server with no spill")
    # A key never read: its write goes to the owner only.
    fresh = b"never-read"
    fowner = ring_prefs(px.conf_path, "bounded", [fresh], 1)[fresh][0]
    with px.client("bounded") as c:
        eq(c.mc_store(b"set", fresh, b"f"), b"STORED\r\n", "set fresh")
    holders = [lab for lab, be in zip(labels, bes) if fresh in be.get_many([fresh])]
    eq(holders, [fowner], "holders of a key never read")
    px.stop()
    for be in bes:
        be.stop()


# ---------------------------------------------------------------- runner

class Env(harness.Env):
    """Shared fixtures, started on first use (the base's close() stops what they started,
    by PID); each test above starts and stops its own backends and proxy."""

    def __init__(self):
        self.need_own_proxy("needs its own backends to kill",
                            "health, replicas and bounded loads are ringleader's")
        binary("ringleader")
        binary("ringleader-ring")
        for prog in ("memcached", "redis-server"):
            if not any(os.access(os.path.join(d, prog), os.X_OK)
                       for d in os.environ.get("PATH", "").split(os.pathsep)):
                raise Skip("%s not installed" % prog)
        self.proxies = []
        self.backends = []
        self._ondown = None

    def ondown(self):
        if self._ondown is None:
            self._ondown = OnDown()
            self.proxies.append(self._ondown.px)
            self.backends += self._ondown.mcs + self._ondown.rds
        return self._ondown


if __name__ == "__main__":
    R.main(Env)
