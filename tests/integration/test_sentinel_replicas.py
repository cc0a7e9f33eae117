"""test_sentinel_replicas.py: a sentinel pool with read_from: any-live (issue 26) in front
of a master, one replica and two redis-sentinel processes: the replica SENTINEL REPLICAS
lists serves reads through the proxy (its INFO commandstats counts them), no write of the
proxy reaches it (none refused with READONLY there, every write answered OK), and once it
is SIGKILLed reads succeed again (on the master) as soon as it is seen down; back, it is
read from again; the master SIGKILLed, the promoted replica is the pool's master."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Env, Proc, Proxy, Redis, Runner, StartError,  # noqa: E402
                     check, eq, free_port, patience, tmpdir, unique, ydump)

R = Runner("test_sentinel_replicas", per_test_timeout=60, total_timeout=120)
MASTER = "rmaster"
DOWN_AFTER_MS = 1000


def info(r, section):
    with r.client() as c:
        text = c.rd("INFO", section)
    out = {}
    for line in text.decode().splitlines():
        k, _, v = line.partition(":")
        if v:
            out[k] = v
    return out


def calls(r, cmd):
    """How many times Redis server r ran cmd (INFO commandstats), 0 if never."""
    v = info(r, "commandstats").get("cmdstat_" + cmd, "")
    for part in v.split(","):
        k, _, n = part.partition("=")
        if k == "calls":
            return int(n)
    return 0


def wait_for(what, fn, timeout):
    """fn() until it is true, at most timeout seconds (scaled by patience); its value."""
    deadline = time.monotonic() + patience(timeout)
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for %s" % what)


class Sentinel:
    """One redis-sentinel on a free port monitoring MASTER (quorum 1)."""

    def __init__(self, port, master_port):
        self.port = port
        self.addr = ("127.0.0.1", port)
        path = os.path.join(tmpdir(), "rsentinel-%d.conf" % port)
        with open(path, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile \"\"\n"
                    "sentinel monitor %s 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds %s %d\n" % (
                        port, tmpdir(), MASTER, master_port, MASTER, DOWN_AFTER_MS))
        self.proc = Proc("rsentinel-%d" % port, ["redis-sentinel", path])
        try:
            self.proc.wait_listening(port)
        except StartError:
            self.proc.stop()
            raise

    def hostport(self):
        return "127.0.0.1:%d" % self.port

    def client(self):
        from harness import Raw
        return Raw(self.addr)

    def stop(self):
        self.proc.stop()


def replica_entry(sentinel, port):
    """The sentinel's SENTINEL REPLICAS entry (a dict) of the replica on port, or None."""
    with sentinel.client() as c:
        for e in c.rd("SENTINEL", "REPLICAS", MASTER):
            d = {e[i].decode(): e[i + 1].decode() for i in range(0, len(e) - 1, 2)}
            if d.get("port") == str(port):
                return d
    return None


class ReplicaEnv(Env):
    LOG_LINES = 40

    def __init__(self):
        self.need_own_proxy("starts its own sentinels and proxy",
                            "a sentinel pool is ringleader's")
        self.master = Redis.start()
        self.replica = Redis.start(extra=["--replicaof", "127.0.0.1", str(self.master.port)])
        self.more_backends = [self.master, self.replica]
        self.sentinels = []
        for _ in range(2):
            s = self._start_sentinel()
            self.sentinels.append(s)
            self.more_backends.append(s)
        wait_for("the replica in sync", lambda: info(self.replica, "replication").get(
            "master_link_status") == "up", 20)

        def live():
            for s in self.sentinels:
                e = replica_entry(s, self.replica.port)
                if e is None or e.get("master-link-status") != "ok" or "down" in e["flags"]:
                    return False
            return True
        wait_for("the sentinels to see the replica live", live, 30)
        self.proxy = Proxy({
            "sess": {"redis": True, "timeout": 2000,
                     "sentinel": {"master": MASTER, "read_from": "any-live",
                                  "sentinels": [s.hostport() for s in self.sentinels]}},
        }, dump=ydump, admin=True)

    def _start_sentinel(self):
        last = None
        for _ in range(3):
            try:
                return Sentinel(free_port(), self.master.port)
            except StartError as e:
                last = e
        raise last


@R.test
def reads_reach_the_replica(env):
    """GETs through the proxy are served by the master and the replica in turn (the
    replica's commandstats counts GETs, which replication never sends it); SET, INCR, a
    transaction and a script go to the master only: every one answered OK and no
    READONLY refusal on the replica."""
    log = env.proxy.log_tail(2000)
    check("replicas of '%s' that serve reads: %s" % (MASTER, env.replica.hostport()) in log,
          "the proxy names the replica it reads from: %s" % log[-1500:])
    keys = ["k-%s-%d" % (unique().decode(), i) for i in range(20)]
    with env.proxy.client() as c:
        for k in keys:
            eq(c.rd("SET", k, k), "OK")
        eq(c.rd("INCR", "ctr-" + keys[0]), 1)
        eq(c.rd("MULTI"), "OK")
        eq(c.rd("GET", keys[0]), "QUEUED")
        eq(c.rd("SET", keys[1], "t"), "QUEUED")
        eq(c.rd("EXEC"), [keys[0].encode(), "OK"])
        eq(c.rd("EVAL", "return redis.call('SET', KEYS[1], 'e')", "1", keys[2]), "OK")
    with env.master.client() as c:
        eq(c.rd("WAIT", "1", "5000"), 1, "the replica has every write")
    g_replica, g_master = calls(env.replica, "get"), calls(env.master, "get")
    want = {k: k.encode() for k in keys}
    want[keys[1]], want[keys[2]] = b"t", b"e"
    with env.proxy.client() as c:
        for _ in range(5):
            for k in keys:
                eq(c.rd("GET", k), want[k])
    on_replica = calls(env.replica, "get") - g_replica
    on_master = calls(env.master, "get") - g_master
    print("  100 GETs: %d on the replica, %d on the master" % (on_replica, on_master))
    eq(on_replica + on_master, 100, "every GET reached one of them")
    check(on_replica >= 20 and on_master >= 20, "reads are spread over master and replica")
    errs = info(env.replica, "errorstats")
    check("errorstat_READONLY" not in errs, "no write reached the replica: %r" % errs)
    eq(info(env.replica, "commandstats").get("cmdstat_eval"), None, "no script ran there")


@R.test
def replica_killed(env):
    """SIGKILL of the replica: reads succeed again (on the master) once the proxy sees it
    down (its own failures, or the sentinels' +sdown), and the sentinels' news is
    published: reads go to the master alone, writes too."""
    k = "killed-" + unique().decode()
    with env.proxy.client() as c:
        eq(c.rd("SET", k, "v"), "OK")
    with env.master.client() as c:
        eq(c.rd("WAIT", "1", "5000"), 1)
    env.replica.proc.kill()
    failed, ok_run = 0, 0
    deadline = time.monotonic() + patience(15)
    while ok_run < 30 and time.monotonic() < deadline:
        try:
            with env.proxy.client() as c:   # a connection per read: one an error closes
                r = c.rd("GET", k)          # does not fail the next ones
        except (OSError, EOFError) as e:
            r = e
        if r == b"v":
            ok_run += 1
        else:
            failed += 1
            ok_run = 0
            time.sleep(0.02)
    print("  after the SIGKILL: %d read(s) answered with an error, then %d in a row served"
          % (failed, ok_run))
    eq(ok_run, 30, "reads succeed after the replica is killed")
    check(failed <= 10, "few reads failed (%d)" % failed)
    wait_for("the sentinels' news published", lambda: "replicas of '%s' that serve reads: none"
             % MASTER in env.proxy.log_tail(2000), 15)
    g_master = calls(env.master, "get")
    with env.proxy.client() as c:
        for i in range(10):
            eq(c.rd("GET", k), b"v")
        eq(c.rd("SET", k, "w"), "OK")
    eq(calls(env.master, "get") - g_master, 10, "every read on the master")


@R.test
def replica_back_then_master_killed(env):
    """The replica restarted: the sentinels' -sdown has it read from again. Then a SIGKILL
    of the master: the sentinels promote the replica, which becomes the pool's master (not
    a replica of itself: no replica is left to read from) and serves reads and writes."""
    old = env.master
    back = Redis.start(port=env.replica.port, extra=["--replicaof", "127.0.0.1", str(old.port)])
    env.more_backends.append(back)
    want = "replicas of '%s' that serve reads: %s" % (MASTER, back.hostport())
    published = env.proxy.log_tail(100000).count(want)
    t0 = time.monotonic()
    wait_for("the replica read from again", lambda: env.proxy.log_tail(100000).count(want) >
             published, 30)
    print("  the restarted replica read from again after %.2f s" % (time.monotonic() - t0))
    g = calls(back, "get")
    with env.proxy.client() as c:
        for _ in range(10):
            eq(c.rd("GET", "nothing-" + unique().decode()), None)
    check(calls(back, "get") - g >= 3, "the returned replica serves reads")
    nones = env.proxy.log_tail(100000).count("replicas of '%s' that serve reads: none" % MASTER)
    old.proc.kill()
    t0 = time.monotonic()

    def written():
        try:
            with env.proxy.client() as c:
                return c.rd("SET", "after-failover", "x") == "OK"
        except (OSError, EOFError):
            return False
    wait_for("a write through the promoted replica", written, 30)
    print("  writes succeed on the promoted replica %.2f s after the SIGKILL of the master"
          % (time.monotonic() - t0))
    st = env.proxy.stats()["sess"]
    eq(st["sentinel_master"], back.hostport(), "the promoted replica is the master")
    none = "replicas of '%s' that serve reads: none" % MASTER
    wait_for("no replica to read from", lambda: env.proxy.log_tail(100000).count(none) >
             nones, 15)
    with env.proxy.client() as c:
        for _ in range(5):
            eq(c.rd("GET", "after-failover"), b"x")
    with back.client() as c:
        eq(c.rd("GET", "after-failover"), b"x")


if __name__ == "__main__":
    sys.exit(R.run(ReplicaEnv))
