#!/usr/bin/python3
"""scripts/bench_binary.py: scripts/bench --binary, memcached's binary protocol beside the text one.

The side-by-side scenarios (set/get at P1 and P16) run with rlbench --proto memcache and
--proto memcache-binary, straight at 4 memcached and through ringleader (which translates
each binary frame to a meta request and the reply back: docs/protocol-memcache-binary.md).
nutcracker has no column: it closes a binary connection. Every process is stopped by
Bench.cleanup; everything listens on 127.0.0.1.
"""
import re
import sys

_b = sys.modules.get("__main__")
if not hasattr(_b, "Bench"):
    import bench as _b
import bench_modes  # noqa: E402

SCENARIOS, Setup, free_ports, fmt = _b.SCENARIOS, _b.Setup, _b.free_ports, _b.fmt
loadavg = _b.loadavg


def binary(b):
    a = b.a
    scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
    ports = bench_modes.start_memcached(b, 4)
    listen = free_ports(1)[0]
    rl = bench_modes.Ringleader(b, "ringleader", bench_modes.pool_yaml("bench", listen, ports),
                                listen, workers=a.workers)
    b.listen["ringleader"] = listen
    procs = {"ringleader": rl.p}
    print("  nutcracker: not run (it closes a binary protocol connection)")
    rows = []
    for proto in ("memcache", "memcache-binary"):
        a.proto = proto             # rlbench_argv passes it as --proto
        bench_modes.prefill_all(b, ("direct", "ringleader"))
        for name, ratio, pipeline in scenarios:
            sc = (f"{name}-{'binary' if proto.endswith('binary') else 'text'}", ratio, pipeline)
            s = bench_modes.run_scenario(b, sc, ["direct", "ringleader"], procs)
            rows.append((name, proto, s["direct"], s["ringleader"]))
    a.proto = "memcache"
    print(f"\nload average at end: {loadavg()}")
    print("\nMarkdown summary (medians; CPU = proxy utime+stime per request):\n")
    print("| scenario | protocol | direct ops/s | ringleader ops/s | ringleader/direct "
          "| ringleader p50 us | ringleader p99 us | proxy CPU us/req |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, proto, d, r in rows:
        rel = f"{r['ops'] / d['ops']:.2f}" if d["ops"] and r["ops"] else "n/a"
        print(f"| {name} | {'binary' if proto.endswith('binary') else 'text'} | "
              f"{fmt(d['ops'], 0)} | {fmt(r['ops'], 0)} | {rel} | {fmt(r['p50'])} | "
              f"{fmt(r['p99'])} | {fmt(r['cpu'], 2)} |")
    return 1 if b.errors else 0
