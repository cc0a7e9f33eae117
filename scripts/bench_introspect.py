#!/usr/bin/python3
"""scripts/bench_introspect.py: --request-log of scripts/bench (issue 28): the side-by-side
GET/SET scenarios through ringleader with the request log off and at `sample: 0.01`
(errors: all), alternating rounds, on memcached pools; the lines written and dropped.

Each run is bounded; every process is stopped by PID by Bench.cleanup; 127.0.0.1 only.
See docs/introspection.md.
"""
import os
import re
import sys

_b = sys.modules.get("__main__")
if not hasattr(_b, "Bench"):
    import bench as _b
import bench_modes as _m  # noqa: E402

SCENARIOS, free_ports = _b.SCENARIOS, _b.free_ports
Ringleader, pool_yaml, start_memcached = _m.Ringleader, _m.pool_yaml, _m.start_memcached
prefill_all, run_scenario = _m.prefill_all, _m.run_scenario


def request_log(b):
    """ringleader with no request log (the default) against the same build logging 1% of
    requests to a file, alternating, on the side-by-side scenarios."""
    a = b.a
    scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
    ports = start_memcached(b, 4)
    loff, lon = free_ports(2)
    path = os.path.join(b.tmp, "requests.log")
    off = Ringleader(b, "reqlog-off", pool_yaml("bench", loff, ports), loff, workers=a.workers)
    on = Ringleader(b, "reqlog-1pct",
                    "ringleader:\n  request_log: {path: %s, sample: 0.01}\n" % path +
                    pool_yaml("bench", lon, ports), lon, workers=a.workers)
    print("  (reqlog-1pct YAML adds: ringleader: {request_log: {path: ..., sample: 0.01}})")
    b.listen.update({"reqlog-off": loff, "reqlog-1pct": lon})
    procs = {"reqlog-off": off.p, "reqlog-1pct": on.p}
    prefill_all(b, ("reqlog-off", "reqlog-1pct"))
    rows = []
    for sc in scenarios:
        s = run_scenario(b, sc, ["reqlog-off", "reqlog-1pct"], procs)
        soff, son = s["reqlog-off"], s["reqlog-1pct"]
        ratio = son["ops"] / soff["ops"] if soff["ops"] else float("nan")
        cpu = son["cpu"] / soff["cpu"] if soff["cpu"] else float("nan")
        rows.append((sc[0], soff["ops"], son["ops"], ratio, cpu))
    doc = on.doc()
    print("\n  request log: %d lines written, %d dropped, %d bytes" % (
        doc.get("request_log_written", 0), doc.get("request_log_dropped", 0),
        doc.get("request_log_bytes", 0)))
    print("\nMarkdown summary (ops/s medians; CPU per request of the proxy, on/off):\n")
    print("| scenario | request log off | sample: 0.01 | ops ratio | CPU/req ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, o, n, r, c in rows:
        print(f"| {name} | {o:,.0f} | {n:,.0f} | {r:.3f} | {c:.3f} |")
    return 0
