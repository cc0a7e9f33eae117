#!/usr/bin/python3
"""scripts/bench_leases.py: --lease-stampede of scripts/bench (issue 25): cache-aside clients
on one key that expires, through ringleader with leases off and on; then the side-by-side
GET/SET scenarios through leases off and on (no key missing: what the stage costs when it
holds nothing; RL_LEASE_BENCH_META=1 compares off with meta: true instead, where every
single-key get is read as an mg and translated).

Each run is bounded; every process is stopped by PID by Bench.cleanup; 127.0.0.1 only.
See docs/routing.md, "Leases", and docs/performance.md.
"""
import os
import re
import socket
import sys
import threading
import time

_b = sys.modules.get("__main__")
if not hasattr(_b, "Bench"):
    import bench as _b
import bench_modes as _m  # noqa: E402
import bench_safety as _s  # noqa: E402

SCENARIOS, Setup, free_ports, fmt = _b.SCENARIOS, _b.Setup, _b.free_ports, _b.fmt
loadavg, median = _b.loadavg, _b.median
Ringleader, pool_yaml, start_memcached = _m.Ringleader, _m.pool_yaml, _m.start_memcached
mc_stat, pct, side_by_side = _s.mc_stat, _s.pct, _s.side_by_side

COMPUTE_S = 0.020       # the database a winner asks
TARGETS = [("leases-off", ""), ("leases-on", "  leases:\n    ttl_ms: 2000\n"),
           ("leases-meta", "  leases:\n    ttl_ms: 2000\n    meta: true\n")]


def read_reply(s):
    buf = b""
    while not buf.endswith(b"END\r\n"):
        d = s.recv(65536)
        if not d:
            raise Setup("a stampede connection closed")
        buf += d
    return buf


def cache_aside(port, backend, conns, expiries, key=b"hot:lease"):
    """conns cache-aside clients (get; on a miss COMPUTE_S of database, then set) on one key
    that expires (deleted at the backend) `expiries` times, all asking at once each time.
    Returns (recomputations per expiry, get latencies in s, backend gets, backend sets)."""
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    barrier = threading.Barrier(conns + 1, timeout=60)
    misses = [0] * expiries
    lat, errors = [], []
    lock = threading.Lock()

    def client(i):
        s = socks[i]
        try:
            for e in range(expiries):
                barrier.wait()
                t0 = time.monotonic()
                s.sendall(b"get " + key + b"\r\n")
                r = read_reply(s)
                dt = time.monotonic() - t0
                with lock:
                    lat.append(dt)
                    if r == b"END\r\n":
                        misses[e] += 1
                if r == b"END\r\n":
                    time.sleep(COMPUTE_S)
                    v = b"value-%d-%d" % (e, i)
                    s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(v), v))
                    s.recv(100)
                elif not r.startswith(b"VALUE "):
                    errors.append(r[:80])
                barrier.wait()
        except Exception as e:      # noqa: BLE001 - counted, the run goes on
            errors.append(repr(e))
            barrier.abort()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(conns)]
    for t in threads:
        t.start()
    g0, s0 = mc_stat(backend, "cmd_get"), mc_stat(backend, "cmd_set")
    try:
        for _ in range(expiries):
            with socket.create_connection(("127.0.0.1", backend), timeout=5) as d:
                d.sendall(b"delete " + key + b"\r\n")
                d.recv(100)
            barrier.wait()
            barrier.wait()
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join(60)
    for s in socks:
        s.close()
    if errors:
        raise Setup(f"stampede clients failed: {errors[:3]}")
    return (misses, lat, mc_stat(backend, "cmd_get") - g0, mc_stat(backend, "cmd_set") - s0)


def lease_stampede(b):
    a = b.a
    ports = start_memcached(b, 1)
    conns, expiries = a.stampede_connections, a.lease_expiries
    print(f"\nlease stampede: 1 memcached, {conns} cache-aside connections on one key that "
          f"expires {expiries} times ({COMPUTE_S * 1000:.0f} ms of database per miss), 1 worker, "
          f"server_connections 1; then the side-by-side GET/SET scenarios")
    rls, procs = {}, {}
    for name, extra in TARGETS:
        listen = free_ports(1)[0]
        rls[name] = Ringleader(b, name, pool_yaml("bench", listen, ports, extra), listen,
                               workers=a.workers)
        b.listen[name] = listen
        procs[name] = rls[name].p
    results = {}
    for r in range(a.rounds):
        for name, _ in (TARGETS if r % 2 == 0 else TARGETS[::-1]):
            res = cache_aside(rls[name].listen, ports[0], conns, expiries)
            results.setdefault(name, []).append(res)
            misses, lat, gets, sets = res
            print(f"  round {r + 1} {name:<11} recomputations per expiry {misses}; get p50 "
                  f"{pct(lat, .5) * 1e3:.2f} ms p99 {pct(lat, .99) * 1e3:.2f} ms; backend gets "
                  f"{gets}, sets {sets}", flush=True)
    doc = rls["leases-on"].doc().get("bench", {})
    print("  leases-on counters: " + ", ".join(f"{k} {doc.get(k)}" for k in (
        "leases_won", "lease_reads_held", "lease_released_store", "lease_released_timeout",
        "lease_overflow", "lease_rereads", "lease_hold_le_10ms", "lease_hold_le_100ms",
        "lease_hold_le_1s", "lease_hold_over_1s")))
    scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
    # the plain rows compare leases off with on (RL_LEASE_BENCH_META=1: with meta: true)
    pair = [TARGETS[0], TARGETS[2] if os.environ.get("RL_LEASE_BENCH_META") else TARGETS[1]]
    rows = side_by_side(b, scenarios, [t for t, _ in pair], {k: procs[k] for k, _ in pair})
    print(f"\nload average at end: {loadavg()}")
    print("\nMarkdown summary (stampede: all rounds together):\n")
    print("| leases | recomputations per expiry (mean, max) | client get p50 ms | p99 ms | "
          "backend gets per expiry | backend sets per expiry |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, _ in TARGETS:
        runs = results[name]
        ms = [m for r in runs for m in r[0]]
        lat = [x for r in runs for x in r[1]]
        n = len(ms) or 1
        print(f"| {name} | {sum(ms) / n:.1f}, {max(ms)} | {pct(lat, .5) * 1e3:.2f} | "
              f"{pct(lat, .99) * 1e3:.2f} | {sum(r[2] for r in runs) / n:.1f} | "
              f"{sum(r[3] for r in runs) / n:.1f} |")
    print("\n| scenario | off ops/s | on ops/s | on/off | off p99 us | on p99 us | off CPU us/req "
          "| on CPU us/req |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, off, on in rows:
        ratio = on["ops"] / off["ops"] if off["ops"] else float("nan")
        print(f"| {name} | {fmt(off['ops'], 0)} | {fmt(on['ops'], 0)} | {ratio:.3f} | "
              f"{fmt(off['p99'])} | {fmt(on['p99'])} | {fmt(off['cpu'], 2)} | "
              f"{fmt(on['cpu'], 2)} |")
    return 1 if b.errors else 0
