#!/usr/bin/python3
"""scripts/bench_safety.py: the membership-safety benchmarks of scripts/bench (issue 17):
--stampede (collapse_gets), --rejoin-cost (the rejoin bookkeeping on the GET/SET rows),
--shadow (the primary's latency with a shadow pool at fraction 1.0), --callgrind
(instructions per request, this build and --compare's).

Each mode is a function of a bench.Bench; every process is stopped by PID by
Bench.cleanup, everything listens on 127.0.0.1, every run is bounded. See
docs/performance.md, "Membership safety".
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

_b = sys.modules.get("__main__")
if not hasattr(_b, "Bench"):
    import bench as _b
import bench_modes as _m  # noqa: E402

SCENARIOS, Setup, free_ports, fmt = _b.SCENARIOS, _b.Setup, _b.free_ports, _b.fmt
loadavg, median, wait_listening = _b.loadavg, _b.median, _b.wait_listening
Ringleader, pool_yaml, rlbench_at = _m.Ringleader, _m.pool_yaml, _m.rlbench_at
prefill_all, run_scenario = _m.prefill_all, _m.run_scenario
start_memcached, stats_doc, STATS_PUBLISH_S = _m.start_memcached, _m.stats_doc, _m.STATS_PUBLISH_S


def mc_stat(port, name):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            d = s.recv(65536)
            if not d:
                break
            data += d
    for line in data.split(b"\r\n"):
        f = line.split()
        if len(f) == 3 and f[1] == name.encode():
            return int(f[2])
    return 0


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


# ------------------------------------------------------------------ --stampede

COLLAPSE = [("collapse-off", "false"), ("collapse-on", "true"), ("collapse-inflight", "inflight")]


def bursts(port, conns, n, key=b"key:0"):
    """n bursts: each of `conns` connections sends one get of key, one thread sending them
    back to back (a few ms for 200), then every reply is read. Per burst: seconds from the
    first send to the last reply; and whether every reply was a hit."""
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    req = b"get " + key + b"\r\n"
    times, bad = [], 0
    try:
        for _ in range(n):
            t0 = time.monotonic()
            for s in socks:
                s.sendall(req)
            for s in socks:
                buf = b""
                while not buf.endswith(b"END\r\n"):
                    d = s.recv(65536)
                    if not d:
                        raise Setup("a stampede connection closed")
                    buf += d
                bad += not buf.startswith(b"VALUE ")
            times.append(time.monotonic() - t0)
            time.sleep(0.01)
    finally:
        for s in socks:
            s.close()
    return times, bad


def stampede(b):
    """One memcached holding a hot key; 200 connections asking for it, as a steady load
    (rlbench, every GET on key:0) and as bursts (all 200 at once, 50 times), through
    ringleader with collapse_gets false, true and inflight."""
    a = b.a
    ports = start_memcached(b, 1)
    conns = a.stampede_connections
    print(f"\nstampede: 1 memcached, {conns} connections on one key, 1 worker, "
          f"server_connections 1; steady load {a.rounds} round(s) x {a.duration} s "
          f"(rlbench --hot-key-share 1, pipeline 1), then 50 bursts of {conns} gets")
    rls = {}
    for name, v in COLLAPSE:
        listen = free_ports(1)[0]
        rls[name] = Ringleader(b, name, pool_yaml("bench", listen, ports,
                                                  f"  collapse_gets: {v}\n"), listen,
                               workers=a.workers)
    pre = rlbench_at(b, rls["collapse-off"].listen, ["--prefill-only", "-P", "16"])
    b.note("prefill", pre)
    if b.run_rlbench(pre, 120)["rc"] != 0:
        raise Setup("prefill failed")
    steady = {n: [] for n, _ in COLLAPSE}
    for r in range(a.rounds):
        order = COLLAPSE[r % 3:] + COLLAPSE[:r % 3]
        for name, _ in order:
            rl = rls[name]
            argv = rlbench_at(b, rl.listen, ["-P", "1", "--ratio", "1:0", "--duration",
                                             str(a.duration), "--hot-key-share", "1",
                                             "--expect-hits", "--seed", str(r + 1)],
                              connections=conns)
            if r == 0:
                b.note(name, argv)
            g0, c0 = mc_stat(ports[0], "cmd_get"), b.cpu_of(rl.p)
            res = b.run_rlbench(argv, a.duration + 60)
            res["backend_gets"] = mc_stat(ports[0], "cmd_get") - g0
            res["cpu"] = b.cpu_of(rl.p) - c0
            if res["rc"] != 0:
                b.errors += 1
                print(f"    ! {name} round {r + 1}: rc {res['rc']} {res.get('stderr', '')[:200]}")
            steady[name].append(res)
            n = res.get("requests") or 1
            print(f"  round {r + 1} {name:<18} {fmt(res.get('ops_per_sec'), 0):>9} gets/s  "
                  f"p50 {fmt(res.get('p50_us'))} p99 {fmt(res.get('p99_us'))} us  backend gets "
                  f"per 1000 client gets {1000 * res['backend_gets'] / n:.1f}", flush=True)
    burst = {}
    for name, _ in COLLAPSE:
        rl = rls[name]
        g0 = mc_stat(ports[0], "cmd_get")
        times, bad = bursts(rl.listen, conns, 50)
        gets = mc_stat(ports[0], "cmd_get") - g0
        if bad:
            b.errors += 1
        burst[name] = (gets / 50.0, times, bad)
        print(f"  bursts {name:<18} backend gets per burst {gets / 50.0:.1f}; burst done in "
              f"p50 {pct(times, .5) * 1e3:.2f} ms, p99 {pct(times, .99) * 1e3:.2f} ms; "
              f"misses {bad}", flush=True)
    time.sleep(STATS_PUBLISH_S)
    print(f"\nload average at end: {loadavg()}")
    print("\nMarkdown summary (steady: medians over rounds):\n")
    print(f"| collapse_gets | steady gets/s | p50 us | p99 us | backend gets / 1000 client "
          f"gets | proxy CPU us/get | bursts of {conns}: backend gets / burst | burst p50 ms "
          f"| burst p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, v in COLLAPSE:
        runs = steady[name]
        ok = [x for x in runs if x.get("requests")]
        per = median([1000 * x["backend_gets"] / x["requests"] for x in ok])
        cpu = median([x["cpu"] * 1e6 / x["requests"] for x in ok])
        g, times, _ = burst[name]
        print(f"| {v} | {fmt(median([x['ops_per_sec'] for x in ok]), 0)} | "
              f"{fmt(median([x['p50_us'] for x in ok]))} | {fmt(median([x['p99_us'] for x in ok]))} "
              f"| {per:.1f} | {fmt(cpu, 2)} | {g:.1f} | {pct(times, .5) * 1e3:.2f} | "
              f"{pct(times, .99) * 1e3:.2f} |")
    return 1 if b.errors else 0


# ------------------------------------------------------------------ --rejoin-cost

def side_by_side(b, scenarios, targets, procs):
    """Prefill each target, then the side-by-side rounds of each scenario, alternating:
    [(scenario, medians of targets[0], medians of targets[1])]."""
    prefill_all(b, targets)
    rows = []
    for sc in scenarios:
        s = run_scenario(b, sc, targets, procs)
        rows.append((sc[0], s[targets[0]], s[targets[1]]))
    return rows


def rejoin_cost(b):
    """The side-by-side scenarios through two pools that mark servers down
    (auto_eject_hosts: true), one with rejoin: invalidate (the default) and one with
    rejoin: trust (no bookkeeping), alternating. With every server up nothing is logged:
    what is measured is what the request path pays for the mechanism being there."""
    a = b.a
    scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
    b.start_backends(4)             # memcached, or redis-server with --proto redis
    ports = b.backend_ports
    targets = ["invalidate", "trust"]
    procs = {}
    for t in targets:
        listen = free_ports(1)[0]
        yaml = pool_yaml("bench", listen, ports, f"  rejoin: {t}\n").replace(
            "auto_eject_hosts: false", "auto_eject_hosts: true")
        rl = Ringleader(b, t, yaml, listen, workers=a.workers)
        b.listen[t] = listen
        procs[t] = rl.p
    rows = side_by_side(b, scenarios, targets, procs)
    print(f"\nload average at end: {loadavg()}")
    print("\nMarkdown summary (medians):\n")
    print("| scenario | invalidate ops/s | trust ops/s | ratio | invalidate p99 us | trust p99 us "
          "| invalidate CPU us/req | trust CPU us/req |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, inv, tr in rows:
        ratio = inv["ops"] / tr["ops"] if tr["ops"] else float("nan")
        print(f"| {name} | {fmt(inv['ops'], 0)} | {fmt(tr['ops'], 0)} | {ratio:.3f} | "
              f"{fmt(inv['p99'])} | {fmt(tr['p99'])} | {fmt(inv['cpu'], 2)} | "
              f"{fmt(tr['cpu'], 2)} |")
    return 1 if b.errors else 0


# ------------------------------------------------------------------ --shadow

def shadow(b):
    """A pool of 2 memcached with and without `shadow: {pool: next, fraction: 1.0,
    compare: true}` into a pool of 2 other memcached, alternating: the primary's
    throughput and latency on the side-by-side scenarios, and the shadow's counters.

    Targets: shadow-off; shadow-floor, the same proxy while a second rlbench (pinned beside
    the proxy, where the copies would be made) sends the same requests at the same rate
    straight to the shadow pool's memcached: what the box pays for the shadow pool's traffic
    whoever sends it; shadow-on (batch_ms 1, the default); shadow-on-b0 (batch_ms 0: each
    copy written in the iteration of its request); shadow-on-far (batch_ms 1, the shadow
    pool's two memcached on the other core, beside rlbench: as on hosts of their own, where
    the proxy's host pays only for making the copies)."""
    a = b.a
    scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
    b.start_backends(4)             # memcached, or redis-server with --proto redis
    ports = b.backend_ports
    main, nxt = ports[:2], ports[2:]
    b.start_backends(2, cpu=0, add=True)       # the shadow pool on hosts of its own
    far = b.backend_ports[4:]
    confs = {"shadow-off": ("", nxt), "shadow-on": ("1", nxt), "shadow-on-b0": ("0", nxt),
             "shadow-on-far": ("1", far)}
    procs, rls = {}, {}
    for t, (batch, shadow_ports) in confs.items():
        listen, lnext = free_ports(2)
        extra = (f"  shadow:\n    pool: next\n    fraction: 1.0\n    compare: true\n"
                 f"    batch_ms: {batch}\n" if batch else "")
        yaml = pool_yaml("bench", listen, main, extra) + pool_yaml("next", lnext, shadow_ports)
        rl = Ringleader(b, t, yaml, listen, workers=a.workers)
        b.listen[t] = listen
        procs[t], rls[t] = rl.p, rl
    b.listen["shadow-floor"] = b.listen["shadow-off"]
    procs["shadow-floor"] = procs["shadow-off"]

    def floor_load(extra):
        argv = [b.rlbench, "--proto", "memcache", "-c", str(a.connections),
                "--keys", str(a.keys), "--value-size", str(a.value_size)]
        for p in nxt:
            argv += ["--server", f"127.0.0.1:{p}"]
        extra = [x for x in extra if x != "--expect-hits"]   # the shadow pool starts empty
        # beside the proxy, as its copies would be; sleeping, not spinning, between sends
        return b.pinned(1, argv + extra + (["--rate-sleep"] if a.rate else []))
    b.side_load["shadow-floor"] = floor_load
    targets = ["shadow-off", "shadow-floor", "shadow-on", "shadow-on-b0", "shadow-on-far"]
    b.backend_ports = main          # what prefill's and the runs' "direct" would use
    prefill_all(b, [t for t in targets if t != "shadow-floor"])   # the floor is shadow-off's
    rows = [(sc[0], run_scenario(b, sc, targets, procs)) for sc in scenarios]
    time.sleep(STATS_PUBLISH_S)
    for t in ("shadow-on", "shadow-on-b0", "shadow-on-far"):
        doc = rls[t].doc()["bench"]
        counters = {k: doc.get(k, 0) for k in ("shadow_sent", "shadow_dropped", "shadow_failed",
                                               "shadow_compared", "shadow_mismatches")}
        print(f"\n{t} counters over every run: {counters}")
    print(f"load average at end: {loadavg()}")
    print("\nMarkdown summary (medians; the primary's figures; floor: shadow off, the shadow "
          "pool's traffic sent by a second client):\n")
    print("| scenario | target | ops/s | p50 us | p99 us | p999 us | proxy CPU us/req "
          "| backends CPU us/req |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, s in rows:
        for t in targets:
            r = s[t]
            print(f"| {name} | {t} | {fmt(r['ops'], 0)} | {fmt(r['p50'])} | {fmt(r['p99'])} | "
                  f"{fmt(r['p999'])} | {fmt(r['cpu'], 2)} | {fmt(r['be'], 2)} |")
    return 1 if b.errors else 0


# ------------------------------------------------------------------ --callgrind

def callgrind_ir(b, exe, name, ports, scenario, n):
    """Instructions (callgrind Ir) of the ringleader process serving n requests of
    scenario (one connection), its start and stop included."""
    listen, stats = free_ports(2)
    conf = os.path.join(b.tmp, f"cg-{name}.yml")
    proto = b.a.proto
    with open(conf, "w") as f:
        # RL_CALLGRIND_GLOBAL: a `ringleader:` section for this build only (not --compare's,
        # which may not know its keys), e.g. "ringleader:\n  slowlog_threshold_us: 1000000\n":
        # under valgrind a request can take over 10 ms and turn into a SLOWLOG entry
        if name == "ringleader":
            f.write(os.environ.get("RL_CALLGRIND_GLOBAL", ""))
        f.write(pool_yaml("bench", listen, ports, "  redis: true\n" if proto == "redis" else ""))
    out = os.path.join(b.tmp, f"cg-{name}-{proto}-{scenario[0]}-{n}.out")
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe, "-c", conf,
            "-s", str(stats), "-a", "127.0.0.1", "-v", "3", "--workers", "1"]
    p = b.procs.start(argv, os.path.join(b.tmp, f"cg-{name}.log"))
    if not wait_listening(listen, p, 60):
        b.procs.stop(p)
        raise Setup(f"{name} under valgrind did not listen")
    _, ratio, pipeline = scenario
    load = [b.rlbench, "--proto", proto, "-c", "1", "--keys", "1000", "--value-size",
            str(b.a.value_size), "--host", "127.0.0.1", "--port", str(listen), "-P",
            str(pipeline), "--ratio", ratio, "-n", str(n)]
    runs = [subprocess.run(load + ["--prefill-only"], capture_output=True, timeout=600),
            subprocess.run(load, capture_output=True, timeout=600)]
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pass
    b.procs.stop(p)
    for r in runs:              # a proxy that stopped serving would count too little
        if r.returncode != 0:
            raise Setup(f"{name}: rlbench failed ({r.returncode}): "
                        f"{r.stderr.decode(errors='replace').strip()[-300:]}")
    total = None
    with open(out) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
    if total is None:
        raise Setup(f"no callgrind totals in {out}")
    return total, path_ir(out, exe)


# libuv's callbacks into the request path: reads (and their buffers), write completions,
# the flush after each round of I/O. Their inclusive cost is the requests' work alone.
PATH_CALLBACKS = ("conn_alloc_cb", "conn_read_cb", "conn_write_cb")


def path_ir(out, exe):
    """Instructions (inclusive) of exe's request-path callbacks: PATH_CALLBACKS and the
    check phase's flush (a function named *_flush_cb). Unlike the whole process this does
    not count the once-a-tick work (timeouts, hot-key snapshots, the main loop's rates),
    which grows with how long a run takes, so with the box's load."""
    # from / : where the sources can be found, callgrind_annotate splits some of a
    # function's cost onto a second line named by the absolute path
    r = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                       capture_output=True, text=True, timeout=300, cwd="/")
    tag = "[%s]" % os.path.realpath(exe)
    total = 0
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) < 4 or f[-1] != tag:
            continue
        fn = f[-2].rsplit(":", 1)[-1]
        if fn in PATH_CALLBACKS or fn.endswith("_flush_cb"):
            total += int(f[0].replace(",", ""))
    return total


def callgrind(b):
    """Instructions per request of this ringleader (and --compare's) by callgrind: the
    difference between runs of 2N and N requests, over N, so start-up, prefill and
    shutdown cancel. One connection: one request per loop iteration at P=1, the worst
    case for per-iteration costs. A count, not a time: the box's load does not move it."""
    a = b.a
    if not shutil.which("valgrind"):
        raise Setup("valgrind not installed")
    scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
    b.start_backends(4)             # memcached, or redis-server with --proto redis
    ports = b.backend_ports
    exes = [("ringleader", b.ringleader)] + ([("ringleader-before", a.compare)] if a.compare else [])
    n = a.callgrind_requests
    rows = []
    for sc in scenarios:
        per, req = {}, {}
        for name, exe in exes:
            one, t1 = callgrind_ir(b, exe, name, ports, sc, n)
            two, t2 = callgrind_ir(b, exe, name, ports, sc, 2 * n)
            per[name] = (two - one) / n     # start, prefill (1,000 sets) and stop cancel
            req[name] = (t2 - t1) / n       # the request path's callbacks alone
            print(f"  {sc[0]:<8} {name:<18} {per[name]:,.0f} instructions per request, "
                  f"{req[name]:,.0f} in the request path's callbacks", flush=True)
        rows.append((sc[0], per, req))
    print("\nMarkdown summary (callgrind Ir per request: the whole process; the request "
          "path's callbacks, without the once-a-tick work whose count follows the run's "
          "duration):\n")
    head = " | ".join(name for name, _ in exes)
    print(f"| scenario | {head} | request path: {head} |" + (" change |" if a.compare else ""))
    print("|---|" + "---:|" * (2 * len(exes)) + ("---:|" if a.compare else ""))
    for name, per, req in rows:
        cells = " | ".join(f"{per[e]:,.0f}" for e, _ in exes)
        rcells = " | ".join(f"{req[e]:,.0f}" for e, _ in exes)
        change = ""
        if a.compare:
            change = (f" {100 * (per['ringleader'] / per['ringleader-before'] - 1):+.2f} % / "
                      f"{100 * (req['ringleader'] / req['ringleader-before'] - 1):+.2f} % |")
        print(f"| {name} | {cells} | {rcells} |{change}")
    return 0
