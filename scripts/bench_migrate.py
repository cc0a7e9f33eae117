#!/usr/bin/python3
"""scripts/bench_migrate.py: how fast a Redis pool's keys move when it grows 4 -> 5 (`migrate:
true`, docs/reload.md), and what the move costs the clients.

Four redis-servers are filled through ringleader with --keys string keys of --value-size
bytes; foreground client threads run GET/SET (3:1) through the proxy, each pipelining
nothing, and every latency is recorded. The file then gains a fifth server and the proxy
reloads: the migration engine moves a fifth of the keys at up to --rate keys/s. Reported:
the migration's keys/s and MB/s (values moved / the migration's wall time), the foreground
ops/s and p50/p99/p99.9 latency for the --before seconds before the reload and during the
migration.

Run from a build directory (it uses the test harness to start real processes on 127.0.0.1
free ports and stops each by its PID):

    top_srcdir=$PWD/../.. top_builddir=$PWD python3 ../../scripts/bench_migrate.py \\
        --keys 200000 --value-size 100 --rate 50000
"""

import argparse
import os
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
from harness import NAMES, Proxy, Redis, server_lines  # noqa: E402
from harness.wire import Raw, resp_encode  # noqa: E402


def pool(backends, n, rate):
    return {"redis": True, "hash": "fnv1a_64", "distribution": "ketama", "timeout": 5000,
            "migrate": True, "migrate_rate": rate,
            "servers": server_lines(backends[:n], NAMES[:n])}


def fill(proxy, n, size):
    val = b"v" * size
    with proxy.client() as c:
        for start in range(0, n, 1000):
            cmds = b"".join(resp_encode("SET", b"bm:%d" % i, val)
                            for i in range(start, min(n, start + 1000)))
            c.send(cmds)
            for _ in range(start, min(n, start + 1000)):
                r = c.read_resp(timeout=60)
                assert r == "OK", r


class Client(threading.Thread):
    def __init__(self, proxy, n, seed, size):
        super().__init__(daemon=True)
        self.proxy, self.n, self.seed, self.size = proxy, n, seed, size
        self.samples = []       # (monotonic time, latency seconds)
        self.stop = threading.Event()
        self.errors = 0

    def run(self):
        import random
        rng = random.Random(self.seed)
        val = b"w" * self.size
        with self.proxy.client() as c:
            while not self.stop.is_set():
                k = b"bm:%d" % rng.randrange(self.n)
                cmd = resp_encode("SET", k, val) if rng.random() < 0.25 else resp_encode("GET", k)
                t0 = time.monotonic()
                c.send(cmd)
                r = c.read_resp(timeout=30)
                t1 = time.monotonic()
                if isinstance(r, Exception):
                    self.errors += 1
                self.samples.append((t1, t1 - t0))


def pct(lat, p):
    if not lat:
        return float("nan")
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3


def window(clients, t_from, t_to):
    lat = [d for c in clients for (t, d) in c.samples if t_from <= t < t_to]
    secs = max(t_to - t_from, 1e-9)
    return len(lat) / secs, pct(lat, 0.50), pct(lat, 0.99), pct(lat, 0.999)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--rate", type=int, default=50000, help="migrate_rate (keys/s)")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--before", type=float, default=3.0)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()

    backends, proxy = [], None
    try:
        backends = [Redis.start() for _ in range(5)]
        proxy = Proxy({"rd": pool(backends, 4, a.rate)}, workers=a.workers)
        t = time.monotonic()
        fill(proxy, a.keys, a.value_size)
        print("filled %d keys of %d bytes in %.1f s" % (a.keys, a.value_size,
                                                       time.monotonic() - t))
        clients = [Client(proxy, a.keys, i, a.value_size) for i in range(a.clients)]
        for c in clients:
            c.start()
        time.sleep(0.5)
        t_before = time.monotonic()
        time.sleep(a.before)
        t_reload = time.monotonic()
        proxy.rewrite({"rd": pool(backends, 5, a.rate)})
        os.kill(proxy.proc.popen.pid, signal.SIGHUP)
        m = None
        for _ in range(36000):
            m = proxy.stats().get("migrate", {}).get("rd")
            if m and m["state"] == "done":
                break
            time.sleep(0.05)
        t_done = time.monotonic()
        for c in clients:
            c.stop.set()
        for c in clients:
            c.join(30)
        st = proxy.stats()["rd"]
        secs = m["seconds"]
        mb = m["moved"] * (a.value_size + len(b"bm:%d" % a.keys)) / 1e6
        print("migration: %d keys scanned, %d moved by the walk in %.2f s: %.0f keys/s, "
              "%.1f MB/s of values (rate limit %d keys/s); %d moved first by requests, "
              "%d errors" % (m["scanned"], m["moved"], secs, m["moved"] / secs, mb / secs,
                             a.rate, st.get("migrate_key_moves", 0), m["errors"]))
        b = window(clients, t_before, t_reload)
        d = window(clients, t_reload, t_done)
        print("foreground (%d clients, GET:SET 3:1, one request in flight each):" % a.clients)
        print("  before:  %8.0f ops/s  p50 %.3f ms  p99 %.3f ms  p99.9 %.3f ms" % b)
        print("  during:  %8.0f ops/s  p50 %.3f ms  p99 %.3f ms  p99.9 %.3f ms" % d)
        print("  client errors: %d; load average %s" % (sum(c.errors for c in clients),
                                                       os.getloadavg()))
    finally:
        if proxy is not None:
            proxy.stop()
        for be in backends:
            be.stop()


if __name__ == "__main__":
    main()
