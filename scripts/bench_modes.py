#!/usr/bin/python3
"""scripts/bench_modes.py: the feature benchmarks of scripts/bench (stats cost, bounded loads,
warm-up after a reload, reload latency).

Each mode is a function of a bench.Bench (its processes, ports, rlbench and pinning); every
run is bounded in time, every process is stopped by PID by Bench.cleanup, and everything
listens on 127.0.0.1 only. See docs/performance.md for what each mode measures and why.
"""
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

# scripts/bench runs bench.py as __main__: take its classes from there, so that a Setup
# raised here is the one its main() catches.
_b = sys.modules.get("__main__")
if not hasattr(_b, "Bench"):
    import bench as _b
SCENARIOS, Setup, free_ports, fmt = _b.SCENARIOS, _b.Setup, _b.free_ports, _b.fmt
loadavg, median, wait_listening = _b.loadavg, _b.median, _b.wait_listening


# Workers publish their counters to the stats port once a second (in-flight gauges and
# epochs are read live): wait this long after a run before reading its totals.
STATS_PUBLISH_S = 1.2


def stats_doc(port, timeout=5.0):
    """The stats port's JSON document (it sends one and closes), parsed."""
    chunks = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            d = s.recv(1 << 20)
            if not d:
                break
            chunks.append(d)
    return json.loads(b"".join(chunks))


def pool_servers(pool):
    """The server objects of a pool in a stats document: {ident: fields}."""
    return {k: v for k, v in pool.items() if isinstance(v, dict)}


def mc_command(port, line, timeout=2.0):
    """Sends one memcached text command and returns the first reply line."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(line.encode() + b"\r\n")
        data = b""
        while b"\r\n" not in data:
            d = s.recv(4096)
            if not d:
                break
            data += d
    return data.split(b"\r\n", 1)[0].decode(errors="replace")


def pool_yaml(name, listen, ports, extra="", preconnect=True):
    """A memcached pool (ketama over fnv1a_64 as in the side-by-side runs)."""
    servers = "".join(f"    - 127.0.0.1:{p}:1\n" for p in ports)
    return (f"{name}:\n"
            f"  listen: 127.0.0.1:{listen}\n"
            f"  hash: fnv1a_64\n"
            f"  distribution: ketama\n"
            f"  preconnect: {'true' if preconnect else 'false'}\n"
            f"  auto_eject_hosts: false\n"
            f"  server_connections: 1\n"
            f"{extra}"
            f"  servers:\n{servers}")


class Ringleader:
    """One ringleader process on its own YAML; reload() rewrites the file and sends SIGHUP."""

    def __init__(self, bench, name, yaml_text, listen, workers=1, verbosity=4):
        self.b, self.name, self.listen = bench, name, listen
        self.conf = os.path.join(bench.tmp, f"{name}.yml")
        self.log = os.path.join(bench.tmp, f"{name}.log")
        self.stats = free_ports(1)[0]
        with open(self.conf, "w") as f:
            f.write(yaml_text)
        argv = [bench.ringleader, "-c", self.conf, "-s", str(self.stats), "-a", "127.0.0.1",
                "-o", self.log, "-v", str(verbosity), "--workers", str(workers)]
        argv = bench.pinned(1, argv)
        bench.note(f"ringleader '{name}'", argv)
        self.p = bench.procs.start(argv, os.path.join(bench.tmp, f"{name}.out"))
        if not wait_listening(listen, self.p) or not wait_listening(self.stats, self.p):
            rc = self.p.poll()
            bench.procs.stop(self.p)
            raise Setup(f"ringleader '{name}' did not serve (status {rc}); "
                        f"config {self.conf}, log {self.log}")

    @property
    def pid(self):
        return self.p.pid

    def doc(self):
        return stats_doc(self.stats)

    def reload(self, yaml_text):
        """Rewrites the config (atomically, by rename) and sends SIGHUP; returns the
        monotonic time of the signal."""
        tmp = self.conf + ".new"
        with open(tmp, "w") as f:
            f.write(yaml_text)
        os.replace(tmp, self.conf)
        t = time.monotonic()
        os.kill(self.p.pid, signal.SIGHUP)
        return t

    def stop(self):
        self.b.procs.stop(self.p)


def rlbench_at(b, port, extra, keys=None, connections=None):
    a = b.a
    argv = [b.rlbench, "--proto", "memcache",
            "-c", str(connections or a.connections),
            "--keys", str(keys or a.keys), "--value-size", str(a.value_size),
            "--host", "127.0.0.1", "--port", str(port)]
    return b.pinned(0, argv + extra)


def start_memcached(b, n):
    """n fresh memcached on free ports, pinned beside the proxy; returns their ports."""
    a = b.a
    if a.proto != "memcache":
        raise Setup("this mode measures a memcached pool; drop --proto redis")
    b.a.proto = "memcache"
    b.start_backends(n)
    return b.backend_ports


# ------------------------------------------------------------------ --stats-cost

# What the observers run on the request path: the hot-key sketch (src/stats/hotkeys.c, its static
# helpers included, as perf names them when they are not inlined) and the latency histogram.
OBSERVER_SYMBOLS = re.compile(r"^(hotkeys_|order_(increment|append|set)|index_(find|delete|set|slot_of)"
                              r"|bucket_(of|new)|key_copy|hk_rotate|histogram_record)")


def observer_share(b, sc, port, proc):
    """One more run of scenario sc against the stats-on proxy under `perf record`: the
    share of the proxy's CPU samples spent in the observers. A ratio of samples within one
    process and one run, so the box's noise, which swings the on/off throughput pairs by
    tens of percent, moves it little. None (and why) when perf cannot sample."""
    perf = shutil.which("perf")
    if not perf:
        return None, "perf not installed"
    data = os.path.join(b.tmp, f"perf-{sc[0]}.data")
    rec = b.procs.start([perf, "record", "-q", "-F", "1999", "-p", str(proc.pid), "-o", data],
                        os.path.join(b.tmp, f"perf-{sc[0]}.log"))
    time.sleep(0.5)
    name, ratio, pipeline = sc
    extra = ["-P", str(pipeline), "--ratio", ratio, "--duration", str(b.a.duration),
             "--seed", "99"]
    res = b.run_rlbench(rlbench_at(b, port, extra), b.a.duration + 60)
    rec.send_signal(signal.SIGINT)
    try:
        rec.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    b.procs.stop(rec)
    if res.get("rc") != 0:
        return None, f"rlbench failed: {res.get('stderr', '')[:200]}"
    rep = subprocess.run([perf, "report", "-i", data, "--stdio", "--no-children", "-g", "none",
                          "--sort", "sym", "--percent-limit", "0"],
                         capture_output=True, text=True, timeout=120)
    total = share = 0.0
    for line in rep.stdout.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+\[[.k]\]\s+(\S+)", line)
        if m:
            total += float(m.group(1))
            if OBSERVER_SYMBOLS.match(m.group(2)):
                share += float(m.group(1))
    if total < 50:
        return None, f"perf report gave no samples ({rep.stderr.strip()[:200]})"
    return share, ""


def prefill_all(b, targets):
    for t in targets:
        why = b.prefill(t)
        if why:
            raise Setup(f"{t}: {why}")


def run_scenario(b, sc, targets, procs):
    """The alternating rounds of one scenario over targets: their medians (printed)."""
    print(f"\n-- running {sc[0]}", flush=True)
    b.rounds(sc, targets, procs)
    return b.print_scenario(sc, targets, {})


def stats_cost(b):
    """ringleader with the latency histograms and hot-key sketch on (the default) against
    the same build with both off, alternating, on the side-by-side scenarios."""
    a = b.a
    scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
    ports = start_memcached(b, 4)
    lon, loff = free_ports(2)
    on = Ringleader(b, "stats-on", pool_yaml("bench", lon, ports), lon, workers=a.workers)
    off = Ringleader(b, "stats-off",
                     "ringleader:\n  latency_histograms: false\n  hot_keys: false\n" +
                     pool_yaml("bench", loff, ports), loff, workers=a.workers)
    print("  (stats-off YAML adds: ringleader: {latency_histograms: false, hot_keys: false})")
    b.listen.update({"stats-on": lon, "stats-off": loff})
    procs = {"stats-on": on.p, "stats-off": off.p}
    prefill_all(b, ("stats-on", "stats-off"))
    rows = []
    for sc in scenarios:
        s = run_scenario(b, sc, ["stats-on", "stats-off"], procs)
        son, soff = s["stats-on"], s["stats-off"]
        ops_ratio = son["ops"] / soff["ops"] if soff["ops"] else float("nan")
        cpu_ratio = son["cpu"] / soff["cpu"] if soff["cpu"] else float("nan")
        # Paired per round: the two runs of one round are back to back.
        per = []
        for ron, roff in zip(b.results[(sc[0], "stats-on")], b.results[(sc[0], "stats-off")]):
            if ron.get("ops_per_sec") and roff.get("ops_per_sec"):
                per.append(ron["ops_per_sec"] / roff["ops_per_sec"])
        print(f"  stats on/off: ops/s {ops_ratio:.3f} (per round "
              f"{', '.join(f'{x:.3f}' for x in per)}), CPU/req {cpu_ratio:.3f}; "
              f"stats cost {100 * (1 - ops_ratio):+.1f} % of throughput, "
              f"{100 * (cpu_ratio - 1):+.1f} % CPU/req")
        share, why = observer_share(b, sc, lon, on.p)
        if share is None:
            print(f"  observers' share of the proxy's CPU: not measured ({why})")
        else:
            # Proxy and backends share CPU 1, which the load saturates: a request costs the
            # core proxy + backend time, so removing the observers' share of the proxy's
            # time raises throughput by share x proxy / (proxy + backend).
            core = (share * son["cpu"] / (son["cpu"] + son["be"])
                    if son["cpu"] and son["be"] else None)
            print(f"  observers' share of the proxy's CPU (perf samples, one more stats-on run): "
                  f"{share:.1f} %; throughput cost on the shared core about "
                  f"{'n/a' if core is None else f'{core:.1f} %'}")
        rows.append((sc[0], son, soff, ops_ratio, cpu_ratio, per, share))
    print(f"\nload average at end: {loadavg()}")
    print("\nMarkdown summary (medians):\n")
    print("| scenario | stats on ops/s | stats off ops/s | on/off ops/s (per round) "
          "| on CPU us/req | off CPU us/req | on/off CPU/req | on p99 us | off p99 us "
          "| observers' share of proxy CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, son, soff, r, c, per, share in rows:
        print(f"| {name} | {fmt(son['ops'], 0)} | {fmt(soff['ops'], 0)} | {r:.3f} "
              f"({', '.join(f'{x:.2f}' for x in per)}) | {fmt(son['cpu'], 2)} | "
              f"{fmt(soff['cpu'], 2)} | {c:.3f} | {fmt(son['p99'])} | {fmt(soff['p99'])} | "
              f"{'n/a' if share is None else f'{share:.1f} %'} |")
    return 1 if b.errors else 0


# ------------------------------------------------------------------ --bounded

BOUNDED_VARIANTS = [
    # name, extra pool YAML, what it is
    ("unbounded", "", "no balance_factor (in-flight is not tracked: peak shows 0)"),
    ("track-only", "  balance_factor: 1000\n",
     "balance_factor 1000: the cap is never reached, so placement is the unbounded one, "
     "but the in-flight peak is tracked"),
    ("bf-1.25", "  balance_factor: 1.25\n", "bounded loads, cap ceil(1.25 x mean)"),
]


def bounded(b):
    """4 memcached, GETs with a share on one hot key, many pipelined connections: the
    in-flight peak, spills and requests per server with and without balance_factor."""
    a = b.a
    ports = start_memcached(b, 4)
    conns, pipe = a.bounded_connections, a.bounded_pipeline
    print(f"\nbounded loads: {conns} connections x pipeline {pipe}, GETs only, "
          f"{a.hot_share:.0%} of them on key:0, {a.rounds} round(s) x {a.duration} s; "
          "a fresh proxy for every run (so the peaks are that run's)")
    for name, extra, what in BOUNDED_VARIANTS:
        print(f"  {name:<11} {what}")
    results = {}
    for r in range(a.rounds):
        order = BOUNDED_VARIANTS[r % 3:] + BOUNDED_VARIANTS[:r % 3]
        for name, extra, _ in order:
            listen = free_ports(1)[0]
            rl = Ringleader(b, f"bounded-{name}-{r}", pool_yaml("bench", listen, ports, extra),
                            listen, workers=a.workers)
            if r == 0 and name == order[0][0]:
                pre = rlbench_at(b, listen, ["--prefill-only", "-P", "16"])
                b.note("prefill", pre)
                b.run_rlbench(pre, 120)
            d0 = rl.doc()["bench"]
            argv = rlbench_at(b, listen, ["-P", str(pipe), "--ratio", "1:0",
                                          "--duration", str(a.duration),
                                          "--hot-key-share", str(a.hot_share),
                                          "--seed", str(r + 1)], connections=conns)
            if r == 0:
                b.note(name, argv)
            t0 = b.cpu_of(rl.p)
            res = b.run_rlbench(argv, a.duration + 60)
            cpu = b.cpu_of(rl.p) - t0
            time.sleep(STATS_PUBLISH_S)
            d1 = rl.doc()["bench"]
            rl.stop()
            s0, s1 = pool_servers(d0), pool_servers(d1)
            per = {}
            for ident, f in s1.items():
                per[ident] = {"requests": f["requests"] - s0.get(ident, {}).get("requests", 0),
                              "spills": f.get("spills", 0),
                              "in_flight_peak": f.get("in_flight_peak", 0),
                              "hits": f.get("hits", 0) - s0.get(ident, {}).get("hits", 0),
                              "misses": f.get("misses", 0) - s0.get(ident, {}).get("misses", 0)}
            n = res.get("requests") or 0
            res["proxy_us_per_req"] = cpu * 1e6 / n if n else None
            res["servers"] = per
            if res["rc"] not in (0, 1) or not n:
                b.errors += 1
                print(f"    ! {name} round {r + 1}: rc {res['rc']} {res.get('stderr', '')[:300]}")
            results.setdefault(name, []).append(res)
            print(f"  round {r + 1} {name:<11} {fmt(res.get('ops_per_sec'), 0):>9} ops/s  "
                  f"p99 {fmt(res.get('p99_us'))} us  peaks "
                  f"{[v['in_flight_peak'] for v in per.values()]}  spills "
                  f"{[v['spills'] for v in per.values()]}", flush=True)
    mean_inflight = conns * pipe / 4
    cap = -(-int(1.25 * (conns * pipe + 1) * 1000) // 4000)
    print(f"\nload average at end: {loadavg()}")
    print(f"\nIn flight at full load: {conns * pipe} requests over 4 servers, mean "
          f"{mean_inflight:.0f}; the 1.25 cap at that load is {cap}.")
    print("\nMarkdown summary (per server: medians over rounds):\n")
    print("| variant | ops/s | p99 us | proxy CPU us/req | server | requests | share | "
          "in_flight_peak | peak / mean | spills | hits | misses |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, _, _ in BOUNDED_VARIANTS:
        runs = results.get(name, [])
        ops = median([x["ops_per_sec"] for x in runs if x.get("ops_per_sec")])
        p99 = median([x["p99_us"] for x in runs if x.get("p99_us")])
        cpu = median([x["proxy_us_per_req"] for x in runs if x.get("proxy_us_per_req")])
        idents = sorted(runs[0]["servers"]) if runs else []
        total = sum(median([x["servers"][i]["requests"] for x in runs]) for i in idents)
        for k, ident in enumerate(idents):
            col = lambda f: median([x["servers"][ident][f] for x in runs])
            req = col("requests")
            peak = col("in_flight_peak")
            head = (f"| {name} | {fmt(ops, 0)} | {fmt(p99)} | {fmt(cpu, 2)} "
                    if k == 0 else "| | | | ")
            print(f"{head}| {ident} | {req:,.0f} | {req / total:.1%} | {peak:,.0f} | "
                  f"{peak / mean_inflight:.2f} | {col('spills'):,.0f} | {col('hits'):,.0f} | "
                  f"{col('misses'):,.0f} |")
    return 1 if b.errors else 0


# ------------------------------------------------------------------ --warmup

def warmup(b):
    """A warm pool of 4 gets a 5th server by reload; hit ratio after it, with and
    without warmup: 60."""
    a = b.a
    ports = start_memcached(b, 5)
    keys, after = a.warm_keys, a.warm_after
    variants = [("no-warmup", ""), ("warmup-60", "  warmup: 60\n")]
    print(f"\nwarm-up: pool of 4 prefilled with {keys} keys, GET-only load ({a.connections} "
          f"connections, pipeline {a.warm_pipeline}), then a 5th (empty) server by SIGHUP; "
          f"hit ratio over the {after} s after the reload (rlbench in 1-s slices), "
          f"{a.rounds} round(s), variants alternating")
    results = {}
    for r in range(a.rounds):
        order = variants[r % 2:] + variants[:r % 2]
        for name, extra in order:
            for p in ports:
                if mc_command(p, "flush_all") != "OK":
                    raise Setup(f"flush_all on {p} failed")
            listen = free_ports(1)[0]
            rl = Ringleader(b, f"warm-{name}-{r}", pool_yaml("bench", listen, ports[:4], extra),
                            listen, workers=a.workers, verbosity=5)
            pre = rlbench_at(b, listen, ["--prefill-only", "-P", "16"], keys=keys)
            if r == 0:
                b.note("prefill", pre)
            res = b.run_rlbench(pre, 120)
            if res["rc"] != 0:
                raise Setup(f"prefill through {name} failed: {res.get('stderr', '')[:200]}")
            load = ["-P", str(a.warm_pipeline), "--ratio", "1:0", "--duration", "1"]
            before = b.run_rlbench(rlbench_at(b, listen, load + ["--seed", "99"], keys=keys), 60)
            time.sleep(STATS_PUBLISH_S)
            d0 = rl.doc()["bench"]
            t_hup = rl.reload(pool_yaml("bench", listen, ports, extra))
            slices = []
            for i in range(after):
                argv = rlbench_at(b, listen, load + ["--seed", str(100 + i)], keys=keys)
                if r == 0 and i == 0:
                    b.note(f"{name}: one 1-s slice after the reload", argv)
                x = b.run_rlbench(argv, 60)
                x["t"] = time.monotonic() - t_hup
                slices.append(x)
            time.sleep(STATS_PUBLISH_S)
            d1 = rl.doc()["bench"]
            rl.stop()
            with open(rl.log, errors="replace") as f:
                moved = [ln.split("servers, ", 1)[-1].strip() for ln in f if " moved " in ln]
            pool = {k: d1.get(k, 0) - d0.get(k, 0)
                    for k in ("hits", "misses", "warm_retries", "warm_hits")}
            pool["epoch"] = (d0.get("epoch"), d1.get("epoch"))
            hits = sum(x.get("hits", 0) for x in slices)
            misses = sum(x.get("misses", 0) for x in slices)
            bh = before.get("hits", 0) / max(1, before.get("hits", 0) + before.get("misses", 0))
            ratio = [x.get("hits", 0) / max(1, x.get("hits", 0) + x.get("misses", 0))
                     for x in slices]
            results.setdefault(name, []).append(
                {"before": bh, "slices": ratio, "hits": hits, "misses": misses, "pool": pool,
                 "errors": sum(x.get("errors", 0) for x in slices)})
            print(f"  round {r + 1} {name:<10} before {bh:.4f}  after: overall "
                  f"{hits / max(1, hits + misses):.4f}; per second "
                  f"{' '.join(f'{x:.3f}' for x in ratio)}", flush=True)
            print(f"      pool stats after the reload: {pool}; reload log: "
                  f"{moved[-1] if moved else '?'}", flush=True)
    print(f"\nload average at end: {loadavg()}")
    print("\nMarkdown summary (medians over rounds):\n")
    print(f"| variant | hit ratio before | first second | seconds 2-5 | "
          f"seconds 6-{after} | all {after} s | pool hits | pool misses | warm_retries | "
          f"warm_hits |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, _ in variants:
        runs = results[name]
        def m(f):
            return median([f(x) for x in runs])

        def mean(xs):
            return statistics.mean(xs) if xs else float("nan")
        print(f"| {name} | {m(lambda x: x['before']):.4f} | {m(lambda x: x['slices'][0]):.4f} | "
              f"{m(lambda x: mean(x['slices'][1:5])):.4f} | "
              f"{m(lambda x: mean(x['slices'][5:])):.4f} | "
              f"{m(lambda x: x['hits'] / max(1, x['hits'] + x['misses'])):.4f} | "
              f"{m(lambda x: x['pool']['hits']):,.0f} | {m(lambda x: x['pool']['misses']):,.0f} | "
              f"{m(lambda x: x['pool']['warm_retries']):,.0f} | "
              f"{m(lambda x: x['pool']['warm_hits']):,.0f} |")
    return 1 if b.errors else 0


# ------------------------------------------------------------------ --reload

def big_pool(listen, base, toggle):
    """1,000 servers on closed ports of 127.0.0.1 (nothing listens, nothing connects: no
    preconnect and no traffic); toggle moves the last one to another port so that every
    reload changes the ring."""
    ports = list(range(base, base + 999)) + [base + 999 + toggle]
    return pool_yaml("big", listen, ports, preconnect=False)


def reload_latency(b):
    """A 1,000-server ketama pool reloaded over and over beside a small real pool under a
    steady load: SIGHUP -> new epoch on the stats port, and the small pool's p99 during the
    reloads against the same proxy without them."""
    a = b.a
    ports = start_memcached(b, 4)
    lsmall, lbig, ladmin = free_ports(3)
    base = 21000
    # The admin endpoint's /ring answers with the current epoch of one pool: a cheap poll
    # (the stats document of 1,004 servers is ~400 KiB and takes tens of ms to render).
    small = f"ringleader:\n  admin: 127.0.0.1:{ladmin}\n" + pool_yaml("small", lsmall, ports)
    state = {"toggle": 0}
    rl = Ringleader(b, "reload", small + big_pool(lbig, base, 0), lsmall,
                    workers=a.workers, verbosity=5)
    b.listen["reload"] = lsmall
    pre = rlbench_at(b, lsmall, ["--prefill-only", "-P", "16"])
    b.note("prefill", pre)
    if b.run_rlbench(pre, 120)["rc"] != 0:
        raise Setup("prefill failed")
    t = time.monotonic()
    doc = rl.doc()
    fetch_ms = (time.monotonic() - t) * 1e3
    print(f"  one stats document ({len(json.dumps(doc)) // 1024} KiB, 1,004 servers) takes "
          f"{fetch_ms:.1f} ms to fetch, too slow to poll: /ring is polled instead")

    def epoch():
        url = f"http://127.0.0.1:{ladmin}/ring?pool=big&key=k"
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())["epoch"]

    t = time.monotonic()
    for _ in range(20):
        epoch()
    poll_ms = (time.monotonic() - t) * 1e3 / 20
    print(f"  one admin /ring?pool=big poll takes {poll_ms:.2f} ms: the resolution of the "
          f"SIGHUP -> epoch times below")

    def one_reload():
        """SIGHUP with the toggled pool; polls /ring until the big pool's epoch grows.
        Returns milliseconds, or None after 5 s."""
        e0 = epoch()
        state["toggle"] ^= 1
        t0 = rl.reload(small + big_pool(lbig, base, state["toggle"]))
        while time.monotonic() - t0 < 5:
            if epoch() > e0:
                return (time.monotonic() - t0) * 1e3
            time.sleep(0.001)
        return None

    variants = ["steady", "reloading"]
    print(f"\nreload: {a.rounds} round(s) x {a.duration} s of GETs on the small pool "
          f"({a.connections} connections, pipeline {a.reload_pipeline}); 'reloading' sends a "
          f"SIGHUP every {a.reload_every} s; 'steady' polls /ring as often instead")
    results = {v: [] for v in variants}
    times = []
    for r in range(a.rounds):
        for v in variants[r % 2:] + variants[:r % 2]:
            argv = rlbench_at(b, lsmall, ["-P", str(a.reload_pipeline), "--ratio", "1:0",
                                          "--expect-hits", "--duration", str(a.duration),
                                          "--seed", str(r + 1), "--json"])
            if r == 0:
                b.note(v, argv)
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            b.procs.procs.append(p)
            t_end = time.monotonic() + a.duration - 0.3
            time.sleep(0.3)
            while time.monotonic() < t_end and p.poll() is None:
                t_next = time.monotonic() + a.reload_every
                if v == "reloading":
                    ms = one_reload()
                    times.append(ms)
                else:
                    epoch()
                time.sleep(max(0.0, t_next - time.monotonic()))
            try:
                out, err = p.communicate(timeout=a.duration + 60)
            except subprocess.TimeoutExpired:
                b.procs.stop(p)
                out, err = "", "timeout"
            b.procs.procs.remove(p) if p in b.procs.procs else None
            try:
                res = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                res = {}
            res["rc"] = p.returncode
            if p.returncode != 0:
                b.errors += 1
                print(f"    ! {v} round {r + 1}: rc {p.returncode} {err.strip()[:300]}")
            results[v].append(res)
            print(f"  round {r + 1} {v:<10} {fmt(res.get('ops_per_sec'), 0):>9} ops/s  "
                  f"p50 {fmt(res.get('p50_us'))}  p99 {fmt(res.get('p99_us'))}  "
                  f"p999 {fmt(res.get('p999_us'))} us  errors {res.get('errors')}", flush=True)
    published = []
    with open(rl.log, errors="replace") as f:
        for line in f:
            if "new configuration published in" in line:
                try:
                    published.append(float(line.split("published in")[1].split()[0]))
                except (IndexError, ValueError):
                    pass
    ok = sorted(x for x in times if x is not None)
    print(f"\nload average at end: {loadavg()}")
    print(f"\nreloads: {len(times)} ({len(times) - len(ok)} not seen within 5 s)")
    if ok:
        q = lambda p: ok[min(len(ok) - 1, int(p * len(ok)))]
        print(f"SIGHUP -> new epoch at admin /ring: median {statistics.median(ok):.1f} ms, "
              f"p90 {q(0.9):.1f}, max {ok[-1]:.1f} ms (resolution {poll_ms:.2f} ms)")
    if published:
        published.sort()
        print(f"log 'new configuration published in': median "
              f"{statistics.median(published):.1f} ms, max {published[-1]:.1f} ms "
              f"over {len(published)} reloads")
    print("\n| variant | ops/s | p50 us | p99 us | p999 us | errors |")
    print("|---|---:|---:|---:|---:|---:|")
    med = {}
    for v in variants:
        runs = results[v]
        med[v] = {k: median([x[k] for x in runs if x.get(k) is not None])
                  for k in ("ops_per_sec", "p50_us", "p99_us", "p999_us")}
        print(f"| {v} | {fmt(med[v]['ops_per_sec'], 0)} | {fmt(med[v]['p50_us'])} | "
              f"{fmt(med[v]['p99_us'])} | {fmt(med[v]['p999_us'])} | "
              f"{sum(x.get('errors') or 0 for x in runs)} |")
    if med["steady"]["p99_us"]:
        print(f"p99 reloading/steady: {med['reloading']['p99_us'] / med['steady']['p99_us']:.2f}"
              f" (per round: " + ", ".join(
                  f"{x.get('p99_us', 0) / y['p99_us']:.2f}"
                  for x, y in zip(results["reloading"], results["steady"]) if y.get("p99_us"))
              + ")")
    return 1 if b.errors else 0


# ---------------------------------------------------------------- --cluster

def _rb_csv(out):
    """ops/s and p50/p99 latency (us) from redis-benchmark --csv output (one test)."""
    for line in out.splitlines():
        f = [x.strip('"') for x in line.split(",")]
        if len(f) >= 7 and f[0] in ("SET", "GET"):
            try:
                return {"ops_per_sec": float(f[1]), "p50_us": float(f[4]) * 1e3,
                        "p99_us": float(f[6]) * 1e3}
            except ValueError:
                return {}
    return {}


def cluster(b):
    """A 3-master Redis Cluster (no replicas) reached two ways by redis-benchmark: with
    --cluster (the client follows the slot map itself, one connection per node per client)
    and through a ringleader redis_cluster pool (a plain client). ops/s, latency, and the
    CPU per request of the proxy and of the nodes; GET/SET at P=1 and P=16."""
    a = b.a
    if not shutil.which("redis-benchmark") or not shutil.which("redis-cli"):
        raise Setup("--cluster needs redis-server, redis-cli and redis-benchmark")
    ports = free_ports(6)
    nodes, buses = ports[:3], ports[3:]
    b.backends = []
    print("cluster nodes:")
    for port, bus in zip(nodes, buses):
        d = os.path.join(b.tmp, f"node-{port}")
        os.makedirs(d, exist_ok=True)
        argv = b.pinned(1, ["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                            "--cluster-enabled", "yes", "--cluster-port", str(bus),
                            "--cluster-config-file", os.path.join(d, "nodes.conf"),
                            "--save", "", "--appendonly", "no", "--daemonize", "no",
                            "--dir", d])
        b.note("", argv)
        p = b.procs.start(argv, os.path.join(d, "log"))
        if not wait_listening(port, p):
            raise Setup(f"cluster node on port {port} did not start (log in {d})")
        b.backends.append(p)
    create = ["redis-cli", "--cluster", "create"] + [f"127.0.0.1:{p}" for p in nodes] + \
             ["--cluster-replicas", "0", "--cluster-yes"]
    b.note("", create)
    r = subprocess.run(create, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise Setup(f"redis-cli --cluster create failed: {r.stdout[-300:]} {r.stderr[-300:]}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        infos = [subprocess.run(["redis-cli", "-p", str(p), "cluster", "info"],
                                capture_output=True, text=True, timeout=5).stdout
                 for p in nodes]
        if all("cluster_state:ok" in i for i in infos):
            break
        time.sleep(0.2)
    else:
        raise Setup("the cluster did not reach cluster_state:ok in 30 s")
    listen = free_ports(1)[0]
    seeds = "".join(f"    - 127.0.0.1:{p}:1\n" for p in nodes[:2])
    yaml_text = (f"cl:\n  listen: 127.0.0.1:{listen}\n  redis_cluster: true\n"
                 f"  timeout: 2000\n  preconnect: true\n  server_connections: 1\n"
                 f"  servers:\n{seeds}")
    print("  pool YAML:\n" + "".join("    | " + l + "\n" for l in yaml_text.splitlines()))
    rl = Ringleader(b, "cluster", yaml_text, listen, workers=a.workers)
    b.listen["cluster"] = listen
    # redis-benchmark's keys: key:__rand_int__ over --keys; the P=1 runs are sized so that
    # one takes about --duration seconds on this box, P=16 runs take 8 times as many
    n_p1 = max(10000, int(a.duration * 15000))

    def rb(target, test, pipeline, n):
        argv = ["redis-benchmark", "-h", "127.0.0.1", "-c", str(a.connections), "-n", str(n),
                "-r", str(a.keys), "-d", str(a.value_size), "-P", str(pipeline), "-t", test,
                "--csv"]
        argv += ["-p", str(nodes[0]), "--cluster"] if target == "direct" else \
                ["-p", str(listen)]
        return b.pinned(0, argv)

    for target in ("direct", "ringleader"):    # every key once (GETs hit)
        argv = rb(target, "set", 16, a.keys * 2)
        b.note(f"prefill through {target}", argv)
        subprocess.run(argv, capture_output=True, timeout=120)
    results = {}
    for name, ratio, pipeline in SCENARIOS:
        if not re.search(a.scenario, name):
            continue
        test = "set" if ratio.startswith("0:") else "get"
        n = n_p1 * (8 if pipeline > 1 else 1)
        for r in range(a.rounds):
            order = ("direct", "ringleader") if r % 2 == 0 else ("ringleader", "direct")
            for target in order:
                argv = rb(target, test, pipeline, n)
                if r == 0:
                    b.note(f"{name} {target}", argv)
                t0 = b.cpu_of(rl.p)
                n0 = sum(b.cpu_of(x) for x in b.backends)
                try:
                    out = subprocess.run(argv, capture_output=True, text=True,
                                         timeout=a.duration * 20 + 60)
                except subprocess.TimeoutExpired:
                    b.errors += 1
                    print(f"    ! {name} {target}: redis-benchmark did not finish")
                    continue
                res = _rb_csv(out.stdout)
                if out.returncode != 0 or not res:
                    b.errors += 1
                    print(f"    ! {name} {target}: rc {out.returncode} {out.stderr[-300:]}")
                    continue
                res["proxy_us_per_req"] = ((b.cpu_of(rl.p) - t0) * 1e6 / n
                                           if target == "ringleader" else None)
                res["nodes_us_per_req"] = (sum(b.cpu_of(x) for x in b.backends) - n0) * 1e6 / n
                results.setdefault((name, target), []).append(res)
                print(f"  {name:<8} round {r + 1} {target:<10} {fmt(res['ops_per_sec'], 0):>9} "
                      f"ops/s  p50 {fmt(res['p50_us'])}  p99 {fmt(res['p99_us'])} us  "
                      f"nodes {fmt(res['nodes_us_per_req'], 2)} us/req" +
                      (f"  proxy {fmt(res['proxy_us_per_req'], 2)} us/req"
                       if res["proxy_us_per_req"] is not None else ""), flush=True)
    time.sleep(STATS_PUBLISH_S)
    st = rl.doc().get("cl", {})
    print(f"\nproxy counters after the runs: moved {st.get('cluster_moved')} "
          f"ask {st.get('cluster_ask')} refreshes {st.get('cluster_refreshes')} "
          f"forward errors {st.get('forward_error')} client errors {st.get('client_err')}")
    print(f"load average at end: {loadavg()}")
    print("\nMarkdown summary (medians; CPU = utime+stime per request):\n")
    print("| scenario | target | ops/s | p50 us | p99 us | proxy CPU us/req | nodes CPU us/req "
          "| proxy/direct ops |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, _, _ in SCENARIOS:
        d = None
        for target in ("direct", "ringleader"):
            runs = results.get((name, target))
            if not runs:
                continue
            m = {k: median([x[k] for x in runs if x.get(k) is not None])
                 for k in ("ops_per_sec", "p50_us", "p99_us", "proxy_us_per_req",
                           "nodes_us_per_req")}
            if target == "direct":
                d = m["ops_per_sec"]
            rel = f"{m['ops_per_sec'] / d:.2f}" if d and target != "direct" else ""
            label = "redis-benchmark --cluster" if target == "direct" else "ringleader"
            print(f"| {name} | {label} | {fmt(m['ops_per_sec'], 0)} | {fmt(m['p50_us'])} | "
                  f"{fmt(m['p99_us'])} | "
                  f"{fmt(m['proxy_us_per_req'], 2) if target != 'direct' else 'n/a'} | "
                  f"{fmt(m['nodes_us_per_req'], 2)} | {rel} |")
    return 1 if b.errors else 0


# ------------------------------------------------------------------ --tls

def make_certs(b):
    """A CA and a certificate for 127.0.0.1 it signs, made by the openssl CLI in the work
    dir: (ca, cert, key)."""
    d = os.path.join(b.tmp, "pki")
    os.makedirs(d, exist_ok=True)
    p = lambda n: os.path.join(d, n)
    run = lambda *a: subprocess.run(["openssl"] + list(a), check=True, capture_output=True,
                                    timeout=30)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", p("ca.key"), "-out", p("ca.crt"), "-days", "2", "-subj", "/CN=bench CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", p("cert.key"), "-out", p("cert.csr"), "-subj", "/CN=127.0.0.1")
    with open(p("ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", p("cert.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
        "-set_serial", "1", "-days", "2", "-extfile", p("ext"), "-out", p("cert.crt"))
    return p("ca.crt"), p("cert.crt"), p("cert.key")


def start_stunnel(b, name, accept, connect, cert, key):
    """stunnel4 terminating TLS on accept and forwarding plaintext to connect."""
    exe = shutil.which("stunnel4") or shutil.which("stunnel")
    if not exe:
        raise Setup("stunnel4 is not installed (scripts/deps installs it)")
    conf = os.path.join(b.tmp, f"{name}.conf")
    with open(conf, "w") as f:
        f.write(f"foreground = yes\npid =\ndebug = 3\noutput = {b.tmp}/{name}.log\n"
                f"[{name}]\naccept = 127.0.0.1:{accept}\nconnect = 127.0.0.1:{connect}\n"
                f"cert = {cert}\nkey = {key}\n"
                "socket = l:TCP_NODELAY=1\nsocket = r:TCP_NODELAY=1\n")
    argv = b.pinned(1, [exe, conf])
    b.note(f"stunnel '{name}'", argv)
    p = b.procs.start(argv, os.path.join(b.tmp, f"{name}.out"))
    if not wait_listening(accept, p):
        raise Setup(f"stunnel '{name}' did not listen (config {conf})")
    return p


def start_redis(b, n, tls=None):
    """n redis-servers pinned beside the proxy, plaintext or (tls = (ca, cert, key)) TLS
    only; returns their ports (the processes count as backends)."""
    ports = free_ports(n)
    for port in ports:
        argv = ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--daemonize", "no"]
        if tls is None:
            argv += ["--port", str(port)]
        else:
            argv += ["--port", "0", "--tls-port", str(port), "--tls-ca-cert-file", tls[0],
                     "--tls-cert-file", tls[1], "--tls-key-file", tls[2],
                     "--tls-auth-clients", "no"]
        argv = b.pinned(1, argv)
        b.note("", argv)
        p = b.procs.start(argv, os.path.join(b.tmp, f"redis-{port}.log"))
        if not wait_listening(port, p):
            raise Setup(f"redis-server on {port} did not start")
        b.backends.append(p)
    return ports


def tls_cost(b):
    """CPU per request of TLS: ringleader terminating the clients' TLS itself (and, for
    scale, ringleader with plaintext clients), against
    stunnel4 terminating it in front of ringleader's plaintext listener, and in front of
    nutcracker (memcached pools); then plaintext clients through ringleader to TLS backends
    against plaintext backends (Redis pools: memcached 1.6.18's TLS stalls on pipelined
    input, with or without a proxy in front, see docs/tls.md). Every target alternates
    with the others of its group, round by round."""
    a = b.a
    scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
    ports = start_memcached(b, 4)
    ca, crt, key = make_certs(b)
    print("Redis backends, plaintext and TLS:")
    rd_plain = start_redis(b, 4)
    rd_tls = start_redis(b, 4, (ca, crt, key))
    l_tls, l_plain, l_rdplain, l_rdtls, l_st_rl, l_st_nc = free_ports(6)
    text = (pool_yaml("tls", l_tls, ports, f"  tls:\n    cert: {crt}\n    key: {key}\n") +
            pool_yaml("plain", l_plain, ports) +
            pool_yaml("rdplain", l_rdplain, rd_plain, "  redis: true\n") +
            pool_yaml("rdtls", l_rdtls, rd_tls, f"  redis: true\n  server_tls:\n    ca: {ca}\n"))
    rl = Ringleader(b, "ringleader", text, l_tls, workers=a.workers)
    print("  ringleader pools: tls (TLS listener, plaintext memcached), plain (plaintext both "
          "sides), rdplain / rdtls (plaintext listener; plaintext / TLS Redis)")
    nut, why = b.start_proxy("nutcracker", b.nutcracker)
    if not nut:
        raise Setup(f"nutcracker did not start: {why}")
    st_rl = start_stunnel(b, "stunnel-rl", l_st_rl, l_plain, crt, key)
    st_nc = start_stunnel(b, "stunnel-nc", l_st_nc, b.listen["nutcracker"], crt, key)
    # target: (port, protocol, --tls, processes whose CPU is the target's)
    targets = {
        "ringleader-plain": (l_plain, "memcache", False, [rl.p]),
        "ringleader-tls": (l_tls, "memcache", True, [rl.p]),
        "stunnel+ringleader": (l_st_rl, "memcache", True, [st_rl, rl.p]),
        "stunnel+nutcracker": (l_st_nc, "memcache", True, [st_nc, nut]),
        "backends-plain": (l_rdplain, "redis", False, [rl.p]),
        "backends-tls": (l_rdtls, "redis", False, [rl.p]),
    }

    def argv_at(port, proto, extra):
        return b.pinned(0, [b.rlbench, "--proto", proto, "-c", str(a.connections),
                            "--keys", str(a.keys), "--value-size", str(a.value_size),
                            "--host", "127.0.0.1", "--port", str(port)] + extra)
    for port, proto in ((l_plain, "memcache"), (l_rdplain, "redis"), (l_rdtls, "redis")):
        pre = argv_at(port, proto, ["--prefill-only", "-P", "16"])
        b.note("prefill", pre)
        res = b.run_rlbench(pre, 120)
        if res["rc"] != 0:
            raise Setup(f"prefill through {port} failed: {res.get('stderr', '')[:300]}")
    groups = [["ringleader-plain", "ringleader-tls", "stunnel+ringleader", "stunnel+nutcracker"],
              ["backends-plain", "backends-tls"]]
    results = {}
    for sc in scenarios:
        name, ratio, pipeline = sc
        print(f"\n-- running {name}", flush=True)
        for group in groups:
            for r in range(a.rounds):
                for t in group[r % len(group):] + group[:r % len(group)]:
                    port, proto, tls, procs = targets[t]
                    extra = ["-P", str(pipeline), "--ratio", ratio, "--duration", str(a.duration),
                             "--seed", str(r + 1)] + (["--tls"] if tls else [])
                    if not ratio.startswith("0:"):
                        extra.append("--expect-hits")
                    argv = argv_at(port, proto, extra)
                    if r == 0:
                        b.note(f"{name} against {t}", argv)
                    c0 = sum(_b.cpu_ticks(p.pid) for p in procs)
                    res = b.run_rlbench(argv, a.duration + 60)
                    c1 = sum(_b.cpu_ticks(p.pid) for p in procs)
                    n = res.get("requests") or 0
                    res["cpu_us_per_req"] = (c1 - c0) / _b.CLK_TCK * 1e6 / n if n else None
                    if res["rc"] != 0:
                        b.errors += 1
                        print(f"    ! {name} {t} round {r + 1}: rc {res['rc']}, "
                              f"errors {res.get('errors')} {res.get('stderr', '')[:300]}")
                    results.setdefault((name, t), []).append(res)
                    print(f"  round {r + 1} {t:<20} {fmt(res.get('ops_per_sec'), 0):>9} ops/s  "
                          f"p99 {fmt(res.get('p99_us'))} us  CPU {fmt(res['cpu_us_per_req'], 2)} "
                          f"us/req", flush=True)

    def col(name, t, k):
        return median([x[k] for x in results.get((name, t), []) if x.get(k) is not None])

    def table(head, group, ref_t, ratio_head):
        print(f"\n| scenario | {head} | ops/s | p50 us | p99 us | CPU us/req | {ratio_head} |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for sc in scenarios:
            name = sc[0]
            ref = col(name, ref_t, "cpu_us_per_req")
            for t in group:
                cpu = col(name, t, "cpu_us_per_req")
                rel = f"{cpu / ref:.2f}" if ref and cpu == cpu else "n/a"
                print(f"| {name} | {t} | {fmt(col(name, t, 'ops_per_sec'), 0)} | "
                      f"{fmt(col(name, t, 'p50_us'))} | {fmt(col(name, t, 'p99_us'))} | "
                      f"{fmt(cpu, 2)} | {rel} |")
    print(f"\nload average at end: {loadavg()}")
    print("\nMarkdown summary (medians; CPU = utime+stime of the target's processes per "
          "request: stunnel's and the proxy's together for the stunnel targets)")
    table("clients' TLS terminated by", groups[0], "stunnel+ringleader", "vs stunnel+ringleader")
    table("Redis backends", groups[1], "backends-plain", "tls/plain")
    doc = rl.doc()
    print(f"\nringleader's TLS counters: pool tls: handshakes {doc['tls']['tls_handshakes']}, "
          f"failed {doc['tls']['tls_protocol_errors'] + doc['tls']['tls_verify_failures']}; "
          f"servers of rdtls: handshakes "
          f"{sum(v['tls_handshakes'] for v in pool_servers(doc['rdtls']).values())}")
    return 1 if b.errors else 0
# ---------------------------------------------------------------- --blpop-queue

def _resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += [b"$%d\r\n" % len(a), a, b"\r\n"]
    return b"".join(out)


class _Conn:
    """A blocking RESP connection: enough of a client for RPUSH and BLPOP replies."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")

    def call(self, *args):
        self.s.sendall(_resp(*args))
        return self._read()

    def _read(self):
        line = self.f.readline()
        if not line:
            raise EOFError("connection closed")
        t, rest = line[:1], line[1:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b":":
            return int(rest)
        if t == b"-":
            raise RuntimeError(rest.decode())
        return rest

    def close(self):
        self.f.close()
        self.s.close()


def queue_run(port, clients, duration):
    """`clients` producers RPUSH their send time for `duration` s, as many consumers pop
    with BLPOP 1 until the queue stays empty. Returns (jobs/s, p50 ms, p99 ms, lost)."""
    import threading
    key = "benchq:%d" % os.getpid()
    lat, lock, sent = [], threading.Lock(), [0]
    stop_at = time.monotonic() + duration

    def producer():
        c = _Conn(port)
        n = 0
        try:
            while time.monotonic() < stop_at:
                c.call("RPUSH", key, repr(time.perf_counter()))
                n += 1
        finally:
            c.close()
            with lock:
                sent[0] += n

    def consumer():
        c = _Conn(port)
        mine = []
        try:
            while True:
                got = c.call("BLPOP", key, "1")
                if got is None:
                    if time.monotonic() > stop_at:
                        break
                    continue
                mine.append(time.perf_counter() - float(got[1]))
        finally:
            c.close()
            with lock:
                lat.extend(mine)
    ts = [threading.Thread(target=consumer) for _ in range(clients)] + \
         [threading.Thread(target=producer) for _ in range(clients)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(duration + 30)
    took = time.monotonic() - t0
    lat.sort()
    if not lat:
        return 0.0, 0.0, 0.0, sent[0]
    return (len(lat) / took, lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000,
            sent[0] - len(lat))


def blpop_queue(b):
    """The queue straight at the server that holds its key, and through ringleader in front
    of 4 redis-servers (the key's server is one of them)."""
    a = b.a
    a.proto = "redis"
    b.start_backends()
    print("proxy:")
    rl, why = b.start_proxy("ringleader", b.ringleader, workers=a.workers)
    if not rl:
        raise Setup(f"ringleader did not start: {why}")
    key = "benchq:%d" % os.getpid()
    c = _Conn(b.listen["ringleader"])
    c.call("RPUSH", key, "probe")
    c.call("DEL", key)
    c.close()
    owner = None
    for port in b.backend_ports:
        d = _Conn(port)
        if d.call("EXISTS", key) == 0:
            d.call("RPUSH", key, "x")
            c = _Conn(b.listen["ringleader"])
            if c.call("EXISTS", key) == 1:
                owner = port
            c.close()
            d.call("DEL", key)
        d.close()
        if owner:
            break
    if owner is None:
        raise Setup("cannot tell which server holds the queue's key")
    print(f"\n-- blpop-queue: {a.queue_clients} producers, {a.queue_clients} consumers, "
          f"{a.duration} s runs, {a.rounds} round(s)")
    rows = {"direct": [], "ringleader": []}
    for r in range(a.rounds):
        for target, port in (("direct", owner), ("ringleader", b.listen["ringleader"])):
            rows[target].append(queue_run(port, a.queue_clients, a.duration))
            print(f"  round {r + 1} {target:10s} jobs/s {rows[target][-1][0]:9.0f}  "
                  f"p50 {rows[target][-1][1]:.3f} ms  p99 {rows[target][-1][2]:.3f} ms  "
                  f"lost {rows[target][-1][3]}", flush=True)
    print("\n| scenario | target | jobs/s | push-to-pop p50 ms | p99 ms | jobs lost |")
    print("|---|---|---|---|---|---|")
    for target, runs in rows.items():
        print(f"| blpop-queue | {target} | {median([x[0] for x in runs]):.0f} | "
              f"{median([x[1] for x in runs]):.3f} | {median([x[2] for x in runs]):.3f} | "
              f"{sum(x[3] for x in runs)} |")
    print(f"\nload average at end: {loadavg()}")
    return 0 if all(x[3] == 0 for runs in rows.values() for x in runs) else 1


# ------------------------------------------------------------------ --pubsub

# _resp: beside --blpop-queue above

def _fanout_round(port, subscribers, messages, size, timeout=120.0):
    """One fan-out: `subscribers` connections SUBSCRIBE to one channel at 127.0.0.1:port, one
    publisher PUBLISHes `messages` messages of `size` bytes (pipelined, 64 at a time, each
    batch's replies read before the next); returns (seconds from the first PUBLISH to the
    last delivery, deliveries, the receiver counts the publisher was told)."""
    import selectors
    chan = b"bench:fanout"
    payload = b"x" * size
    one = len(b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(chan), chan, size, payload))
    conf = len(b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(chan), chan))
    socks = []
    sel = selectors.DefaultSelector()
    try:
        for _ in range(subscribers):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(_resp(b"SUBSCRIBE", chan))
            socks.append(s)
        for s in socks:                         # every confirmation before the first message
            got = b""
            while len(got) < conf:              # bounded by the socket's 10 s timeout
                d = s.recv(conf - len(got))
                if not d:
                    raise Setup(f"a subscriber of {port} was closed before its confirmation")
                got += d
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        need = {s: one * messages for s in socks}
        pub = socket.create_connection(("127.0.0.1", port), timeout=10)
        socks.append(pub)
        receivers = 0
        t0 = time.monotonic()
        deadline = t0 + timeout
        done = 0
        sent = 0
        while sent < messages or done < subscribers:
            if time.monotonic() > deadline:
                raise Setup(f"fan-out on {port} not done in {timeout:.0f} s")
            if sent < messages:
                n = min(64, messages - sent)
                pub.sendall(_resp(b"PUBLISH", chan, payload) * n)
                want, got = n, b""
                while got.count(b"\r\n") < want:  # bounded by the socket's 10 s timeout
                    d = pub.recv(65536)
                    if not d:
                        raise Setup(f"the publisher of {port} was closed")
                    got += d
                receivers = max(receivers, max(int(x[1:]) for x in got.split(b"\r\n") if x))
                sent += n
            for key, _ in sel.select(timeout=0 if sent < messages else 0.5):
                s = key.fileobj
                try:
                    d = s.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not d:
                    raise Setup(f"a subscriber of {port} was closed")
                need[s] -= len(d)
                if need[s] <= 0:
                    sel.unregister(s)
                    done += 1
        return time.monotonic() - t0, subscribers * messages, receivers
    finally:
        sel.close()
        for s in socks:
            s.close()


def pubsub_fanout(b):
    """Pub/sub fan-out: 1 publisher, 100 subscribers of one channel, straight at a
    redis-server and through ringleader in front of 4 (the channel's owner holds all 100
    subscriptions, on 100 pinned connections, whose messages ringleader copies to its 100
    clients). Deliveries per second and CPU per delivery of the server (direct) or of
    ringleader plus the channel's server; targets alternate round by round."""
    a = b.a
    subs, msgs, size = a.pubsub_subscribers, a.pubsub_messages, a.value_size
    if not hasattr(b, "backends"):
        b.backends = []
    print("Redis backends:")
    ports = start_redis(b, 4)
    fleet = b.backends[-4:]
    listen = free_ports(1)[0]
    servers = "".join(f"    - 127.0.0.1:{p}:1\n" for p in ports)
    text = (f"rd:\n  listen: 127.0.0.1:{listen}\n  redis: true\n  hash: fnv1a_64\n"
            f"  distribution: ketama\n  auto_eject_hosts: false\n  max_pinned: 10000\n"
            f"  servers:\n{servers}")
    rl = Ringleader(b, "ringleader", text, listen, workers=a.workers)
    print("the direct redis-server:")
    direct = start_redis(b, 1)[0]
    targets = {"redis-server": (direct, [b.backends[-1]]),
               "ringleader": (listen, [rl.p] + fleet)}
    order = list(targets)
    results = {}
    print(f"\n-- fan-out: 1 publisher, {subs} subscribers, {msgs} messages of {size} bytes")
    for r in range(a.rounds):
        for t in order[r % 2:] + order[:r % 2]:
            port, ps = targets[t]
            c0 = [_b.cpu_ticks(p.pid) for p in ps]
            secs, n, receivers = _fanout_round(port, subs, msgs, size)
            c1 = [_b.cpu_ticks(p.pid) for p in ps]
            us = [(y - x) / _b.CLK_TCK * 1e6 / n for x, y in zip(c0, c1)]
            # ringleader's own share: the first process of its target
            own = us[0] if t == "ringleader" else None
            results.setdefault(t, []).append((n / secs, sum(us), own, receivers))
            print(f"  round {r + 1} {t:<14} {n / secs:>11,.0f} deliveries/s  "
                  f"CPU {sum(us):.2f} us/delivery"
                  + (f" (ringleader {own:.2f})" if own is not None else "")
                  + f"  (PUBLISH said {receivers} receivers)", flush=True)
    print("\n| target | deliveries/s | CPU us/delivery | of which ringleader | receivers |")
    print("|---|---:|---:|---:|---:|")
    for t in order:
        rate = median([x[0] for x in results[t]])
        cpu = median([x[1] for x in results[t]])
        own = f"{median([x[2] for x in results[t]]):.2f}" if t == "ringleader" else "-"
        print(f"| {t} | {rate:,.0f} | {cpu:.2f} | {own} | {results[t][0][3]} |")
    print(f"\nload average at end: {loadavg()}")
    return 0
