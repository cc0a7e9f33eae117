#!/usr/bin/python3
"""scripts/bench.py: side-by-side benchmark of direct backends, nutcracker and ringleader.

Started by scripts/bench (see it for usage). Everything runs on 127.0.0.1 on free
ports; every process it starts is stopped by PID when it exits, however it exits.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CLK_TCK = os.sysconf("SC_CLK_TCK")

# name, get:set ratio, pipeline depth
# The feature modes: option (as argparse names it) -> (module, function). One mode runs
# instead of the side-by-side scenarios.
MODES = {
    "stats_cost": ("modes", "stats_cost"), "bounded": ("modes", "bounded"),
    "warmup": ("modes", "warmup"), "reload": ("modes", "reload_latency"),
    "tls": ("modes", "tls_cost"), "blpop_queue": ("modes", "blpop_queue"),
    "stampede": ("safety", "stampede"), "rejoin_cost": ("safety", "rejoin_cost"),
    "shadow": ("safety", "shadow"), "callgrind": ("safety", "callgrind"),
    "pubsub": ("modes", "pubsub_fanout"), "cluster": ("modes", "cluster"),
    "binary": ("binary", "binary"),
    "lease_stampede": ("leases", "lease_stampede"),
    "request_log": ("introspect", "request_log"),
}

SCENARIOS = [
    ("set-p1", "0:1", 1),
    ("set-p16", "0:1", 16),
    ("get-p1", "1:0", 1),
    ("get-p16", "1:0", 16),
]


class Setup(Exception):
    """A failure that stops the benchmark (not one of ringleader's)."""


class Procs:
    """The processes this run started, stopped by PID in reverse order."""

    def __init__(self):
        self.procs = []

    def start(self, argv, log_path):
        log = open(log_path, "ab")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.procs.append(p)
        return p

    def stop(self, p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=3)
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in reversed(list(self.procs)):
            self.stop(p)


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held open together while chosen)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def wait_listening(port, proc, secs=5.0):
    """True once 127.0.0.1:port accepts a connection; False if proc died or time ran out."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def cpu_ticks(pid):
    """utime + stime of the whole process (all threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])     # fields 14 and 15 of proc(5)


def rss_kb(pid):
    """Resident set size of pid in kB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssPeak:
    """Samples a process's RSS every 20 ms on a thread while a run goes on."""

    def __init__(self, pid):
        import threading
        self.pid, self.peak = pid, rss_kb(pid)
        self.done = threading.Event()
        self.t = threading.Thread(target=self._watch, daemon=True)
        self.t.start()

    def _watch(self):
        while not self.done.wait(0.02):
            self.peak = max(self.peak, rss_kb(self.pid))

    def stop(self):
        self.done.set()
        self.t.join(2)
        return self.peak


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def find_exe(env, candidates):
    path = os.environ.get(env)
    if path:
        return os.path.abspath(path) if os.path.exists(path) else None
    for c in candidates:
        p = os.path.join(TOP, c)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt(x, digits=1):
    if x is None or x != x:
        return "n/a"
    return f"{x:,.{digits}f}"


class Bench:
    def __init__(self, args):
        self.a = args
        self.procs = Procs()
        self.tmp = tempfile.mkdtemp(prefix="rlbench.")
        self.commands = []          # (what, argv) in the order they were used
        self.results = {}           # (scenario, target) -> list of run dicts
        self.side_load = {}         # target -> f(extra): argv of a load run beside it
        self.errors = 0
        ncpu = os.cpu_count() or 1
        self.pin = ncpu >= 2 and shutil.which("taskset") is not None and not args.no_pin
        self.rlbench = find_exe("RLBENCH", ["build/release/tools/rlbench", "tools/rlbench"])
        if not self.rlbench:
            raise Setup("rlbench not found: build it (scripts/check --quick, or make tools/rlbench) "
                        "or point RLBENCH at it")
        self.ringleader = find_exe("RINGLEADER", ["build/release/ringleader", "ringleader"])
        self.nutcracker = shutil.which("nutcracker") or "/usr/sbin/nutcracker"

    # ---------------------------------------------------------------- helpers
    def pinned(self, cpu, argv):
        return (["taskset", "-c", str(cpu)] + argv) if self.pin and cpu is not None else argv

    def note(self, what, argv):
        self.commands.append((what, argv))
        print(f"  $ {shlex.join(argv)}" + (f"    # {what}" if what else ""), flush=True)

    def rlbench_argv(self, target, extra):
        a = self.a
        argv = [self.rlbench, "--proto", a.proto, "-c", str(a.connections),
                "--keys", str(a.keys), "--value-size", str(a.value_size)]
        if target == "direct":
            for p in self.backend_ports:
                argv += ["--server", f"127.0.0.1:{p}"]
        else:
            argv += ["--host", "127.0.0.1", "--port", str(self.listen[target])]
        return self.pinned(0, argv + extra)

    def run_rlbench(self, argv, timeout):
        """Runs rlbench with --json; returns its parsed line (rc added) or raises Setup."""
        try:
            out = subprocess.run(argv + ["--json"], capture_output=True, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"rc": -1, "stderr": "rlbench did not finish in time"}
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
        try:
            res = json.loads(line)
        except ValueError:
            res = {}
        res["rc"] = out.returncode
        res["stderr"] = out.stderr.strip()
        return res

    # ---------------------------------------------------------------- processes
    def cpu_of(self, proc):
        """CPU seconds (user + system, all threads) proc has used so far."""
        return cpu_ticks(proc.pid) / CLK_TCK

    def start_backends(self, n=4, cpu=1, add=False):
        """n backends pinned to cpu (beside the proxy, by default); add: to those started
        already."""
        a = self.a
        ports = free_ports(n)
        if not add:
            self.backend_ports, self.backends = [], []
            print("backends:")
        self.backend_ports += ports
        for port in ports:
            if a.proto == "memcache":
                argv = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1",
                        "-m", "256"]
                if a.value_size > 512 * 1024:       # memcached's default item limit is 1 MiB
                    argv += ["-I", f"{max(2, a.value_size * 2 >> 20)}m"]
                if os.geteuid() == 0:
                    argv += ["-u", "root"]      # memcached refuses root without -u
            else:
                argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                        "--save", "", "--appendonly", "no", "--daemonize", "no"]
            argv = self.pinned(cpu, argv)
            self.note("", argv)
            p = self.procs.start(argv, os.path.join(self.tmp, f"backend-{port}.log"))
            if not wait_listening(port, p):
                raise Setup(f"backend on port {port} did not start (log in {self.tmp})")
            self.backends.append(p)

    def write_yaml(self, port, name="ringleader"):
        redis = "true" if self.a.proto == "redis" else "false"
        servers = "".join(f"    - 127.0.0.1:{p}:1\n" for p in self.backend_ports)
        return (f"bench:\n"
                f"  listen: 127.0.0.1:{port}\n"
                f"  hash: fnv1a_64\n"
                f"  distribution: ketama\n"
                f"  redis: {redis}\n"
                f"  preconnect: true\n"
                f"  auto_eject_hosts: false\n"
                f"  server_connections: 1\n"
                + (f"  item_size_max: {max(2 << 20, self.a.value_size * 2)}\n"
                   if self.a.proto == "memcache" and self.a.value_size > 512 * 1024 and
                   not name.startswith("nutcracker") else "")
                + f"  servers:\n{servers}")

    def start_proxy(self, name, exe, workers=None, pin=True):
        """Starts nutcracker or ringleader on its own copy of the pool YAML.
        Returns (proc, None) or (None, reason)."""
        listen, stats = free_ports(2)
        conf = os.path.join(self.tmp, f"{name}.yml")
        with open(conf, "w") as f:
            f.write(self.write_yaml(listen, name))
        if not self.listen:
            print("  pool YAML (" + conf + "):\n" +
                  "".join("    | " + l + "\n" for l in self.write_yaml(listen).splitlines()))
        argv = [exe, "-c", conf, "-s", str(stats), "-a", "127.0.0.1",
                "-p", os.path.join(self.tmp, f"{name}.pid"),
                "-o", os.path.join(self.tmp, f"{name}.log"), "-v", "4"]
        if workers is not None:
            argv += ["--workers", str(workers)]
        argv = self.pinned(1, argv) if pin else argv
        self.note("", argv)
        p = self.procs.start(argv, os.path.join(self.tmp, f"{name}.out"))
        if not wait_listening(listen, p):
            rc = p.poll()
            self.procs.stop(p)
            return None, ("exited with status %d" % rc if rc is not None
                          else "not listening after 5 s")
        self.listen[name] = listen
        return p, None

    def prefill(self, target):
        argv = self.rlbench_argv(target, ["--prefill-only", "-P", "16"])
        self.note(f"prefill through {target}", argv)
        res = self.run_rlbench(argv, 120)
        if res["rc"] != 0:
            return f"prefill failed (rc {res['rc']}, errors {res.get('errors')}): " \
                   f"{res.get('stderr', '')[:200]}"
        return None

    # ---------------------------------------------------------------- runs
    def measure(self, scenario, target, proc, round_no):
        name, ratio, pipeline = scenario
        extra = ["-P", str(pipeline), "--ratio", ratio, "--duration", str(self.a.duration),
                 "--seed", str(round_no + 1)]
        if self.a.rate:
            extra += ["--rate", str(self.a.rate)]
        if not ratio.startswith("0:"):
            extra.append("--expect-hits")
        argv = self.rlbench_argv(target, extra)
        if round_no == 0:
            self.note(f"{name} against {target}", argv)
        t0 = cpu_ticks(proc.pid) if proc else None
        b0 = sum(cpu_ticks(b.pid) for b in self.backends)
        watch = RssPeak(proc.pid) if proc else None
        side = self.side_load.get(target)
        side = subprocess.Popen(side(extra), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) if side else None
        res = self.run_rlbench(argv, self.a.duration + 60)
        if side:
            try:
                _, err = side.communicate(timeout=self.a.duration + 60)
            except subprocess.TimeoutExpired:
                side.kill()
                _, err = side.communicate()
            if side.returncode != 0:
                self.errors += 1
                print(f"    ! {name} {target} round {round_no + 1}: the side load ended "
                      f"with {side.returncode}: {err[:300]}", flush=True)
        if watch:
            res["proxy_rss_peak_mb"] = watch.stop() / 1024.0
        b1 = sum(cpu_ticks(b.pid) for b in self.backends)
        n = res.get("requests") or 0
        if proc:
            res["proxy_us_per_req"] = ((cpu_ticks(proc.pid) - t0) / CLK_TCK * 1e6 / n
                                       if n else None)
        res["backend_us_per_req"] = (b1 - b0) / CLK_TCK * 1e6 / n if n else None
        if res["rc"] != 0:
            self.errors += 1
            print(f"    ! {name} {target} round {round_no + 1}: rc {res['rc']}, "
                  f"errors {res.get('errors')} {res.get('stderr', '')[:300]}", flush=True)
        self.results.setdefault((name, target), []).append(res)
        return res

    def summarize(self, name, target):
        runs = self.results.get((name, target), [])
        ok = [r for r in runs if "ops_per_sec" in r]
        def col(k):
            return median([r[k] for r in ok if r.get(k) is not None])
        return {
            "runs": len(runs),
            "ops": col("ops_per_sec"), "p50": col("p50_us"), "p99": col("p99_us"),
            "p999": col("p999_us"), "cpu": col("proxy_us_per_req"),
            "rss": max([r["proxy_rss_peak_mb"] for r in ok if r.get("proxy_rss_peak_mb")] or [None]),
            "be": col("backend_us_per_req"),
            "errors": sum((r.get("errors") or 0) + (1 if r["rc"] else 0) for r in runs),
        }

    def print_scenario(self, scenario, targets, unavailable):
        name, ratio, pipeline = scenario
        print(f"\n== {name}: {self.a.proto}, get:set {ratio}, pipeline {pipeline}, "
              f"{self.a.connections} connections, {self.a.value_size}-byte values, "
              f"{self.a.rounds} round(s) x {self.a.duration} s (medians)")
        print(f"  {'target':<18}{'ops/s':>12}{'p50 us':>10}{'p99 us':>10}{'p999 us':>10}"
              f"{'proxy us/req':>14}{'backend us/req':>16}{'errors':>8}{'proxy RSS MB':>14}")
        s = {}
        for t in targets:
            label = t
            if t in unavailable:
                print(f"  {label:<18}not available ({unavailable[t]})")
                continue
            s[t] = self.summarize(name, t)
            r = s[t]
            print(f"  {label:<18}{fmt(r['ops'], 0):>12}{fmt(r['p50']):>10}{fmt(r['p99']):>10}"
                  f"{fmt(r['p999']):>10}{fmt(r['cpu'], 2) if t != 'direct' else 'n/a':>14}"
                  f"{fmt(r['be'], 2):>16}{r['errors']:>8}"
                  f"{fmt(r['rss']) if t != 'direct' else 'n/a':>14}")
        ratios = []
        for t in targets:
            if t != "direct" and t in s and "direct" in s and s["direct"]["ops"]:
                ratios.append(f"{t}/direct ops/s {s[t]['ops'] / s['direct']['ops']:.2f}")
        rl = [t for t in targets if t.startswith("ringleader") and t in s]
        for t in rl:
            if "nutcracker" in s and s["nutcracker"]["ops"]:
                ratios.append(f"{t}/nutcracker ops/s {s[t]['ops'] / s['nutcracker']['ops']:.2f}")
                if s[t]["cpu"] and s["nutcracker"]["cpu"]:
                    ratios.append(f"{t}/nutcracker CPU/req "
                                  f"{s[t]['cpu'] / s['nutcracker']['cpu']:.2f}")
        if "ringleader" in s and "ringleader-before" in s and s["ringleader-before"]["ops"]:
            ratios.append(f"ringleader/ringleader-before ops/s "
                          f"{s['ringleader']['ops'] / s['ringleader-before']['ops']:.3f}")
            if s["ringleader"]["cpu"] and s["ringleader-before"]["cpu"]:
                ratios.append(f"ringleader/ringleader-before CPU/req "
                              f"{s['ringleader']['cpu'] / s['ringleader-before']['cpu']:.3f}")
        for t in targets:
            if t.startswith("ringleader") and t in unavailable:
                ratios.append(f"{t}/nutcracker: n/a")
        if ratios:
            print("  ratios: " + "; ".join(ratios))
        return s

    def rounds(self, scenario, targets, procs):
        """Alternates the targets: each round runs every target once, and the
        order rotates from round to round so no target always goes first."""
        for r in range(self.a.rounds):
            order = targets[r % len(targets):] + targets[:r % len(targets)]
            for t in order:
                self.measure(scenario, t, procs.get(t), r)

    # ---------------------------------------------------------------- main
    def run(self):
        a = self.a
        self.listen = {}
        mode = next((m for m in MODES if getattr(a, m)), None)
        if mode:
            import bench_binary
            import bench_introspect
            import bench_leases
            import bench_modes
            import bench_safety
            if not self.ringleader:
                raise Setup("this mode needs ringleader: build build/release or set RINGLEADER")
            print(f"scripts/bench --{mode.replace('_', '-')}: pinning "
                  f"{'on: rlbench on CPU 0, servers and proxy on CPU 1' if self.pin else 'off'}")
            print(f"rlbench: {self.rlbench}\nringleader: {self.ringleader}\nwork dir: {self.tmp}")
            print(f"load average at start: {loadavg()}")
            module, fn = MODES[mode]
            return getattr({"modes": bench_modes, "safety": bench_safety,
                            "binary": bench_binary, "leases": bench_leases,
                            "introspect": bench_introspect}[module], fn)(self)
        scenarios = [s for s in SCENARIOS if re.search(a.scenario, s[0])]
        if not scenarios:
            raise Setup(f"no scenario matches '{a.scenario}' "
                        f"(have {', '.join(s[0] for s in SCENARIOS)})")
        print(f"scripts/bench: {a.proto}, {a.rounds} round(s) of {a.duration} s, "
              f"pinning {'on: rlbench on CPU 0, servers and proxies on CPU 1' if self.pin else 'off'}")
        print(f"rlbench: {self.rlbench}\nwork dir: {self.tmp}")
        print(f"load average at start: {loadavg()} (other work on the box skews every column)")
        self.listen = {}
        self.start_backends()

        print("proxies (one pool YAML, a copy per proxy differing only in listen:):")
        procs = {}
        unavailable = {}
        nut, why = self.start_proxy("nutcracker", self.nutcracker)
        if not nut:
            raise Setup(f"nutcracker did not start: {why} (log in {self.tmp})")
        procs["nutcracker"] = nut
        if self.ringleader:
            rl, why = self.start_proxy("ringleader", self.ringleader, workers=a.workers)
            if rl:
                procs["ringleader"] = rl
            else:
                unavailable["ringleader"] = why
        else:
            unavailable["ringleader"] = "binary not found; set RINGLEADER"
            print("  (ringleader binary not found: build/release/ringleader, ./ringleader, "
                  "or env RINGLEADER)")

        if a.compare:
            rb, why = self.start_proxy("ringleader-before", a.compare, workers=a.workers)
            if not rb:
                raise Setup(f"--compare {a.compare} did not start: {why}")
            procs["ringleader-before"] = rb

        print("prefill (every key once through each target, also a smoke test):")
        for t in ["direct", "nutcracker", "ringleader"] + (["ringleader-before"] if a.compare else []):
            if t in unavailable:
                continue
            why = self.prefill(t)
            if why and t == "ringleader":
                unavailable[t] = why
                self.procs.stop(procs.pop(t))
            elif why:
                raise Setup(f"{t}: {why}")

        targets = ["direct", "nutcracker", "ringleader"] + (["ringleader-before"] if a.compare else [])
        live = [t for t in targets if t not in unavailable]
        summary = {}
        for sc in scenarios:
            print(f"\n-- running {sc[0]}", flush=True)
            self.rounds(sc, live, procs)
            summary[sc[0]] = self.print_scenario(sc, targets, unavailable)

        scaling = None
        if "ringleader" in procs and not a.no_scaling:
            self.procs.stop(procs.pop("ringleader"))
            print("\n-- scaling: ringleader with 2 workers, unpinned")
            rl2, why = self.start_proxy("ringleader-w2", self.ringleader, workers=2, pin=False)
            if rl2:
                procs["ringleader-w2"] = rl2
                scaling = {}
                for sc in scenarios:
                    self.rounds(sc, ["nutcracker", "ringleader-w2"], procs)
                    scaling[sc[0]] = self.print_scenario(sc, ["nutcracker", "ringleader-w2"], {})
            else:
                print(f"  ringleader-w2 not available ({why})")

        print(f"\nload average at end: {loadavg()}")
        self.print_markdown(scenarios, summary, unavailable)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"proto": a.proto, "rounds": a.rounds, "duration": a.duration,
                           "pinned": self.pin,
                           "commands": [shlex.join(c) for _, c in self.commands],
                           "runs": {f"{k[0]}/{k[1]}": v for k, v in self.results.items()},
                           "unavailable": unavailable}, f, indent=1)
            print(f"results written to {a.json}")
        return 1 if self.errors else 0

    def print_markdown(self, scenarios, summary, unavailable):
        print("\nMarkdown summary (medians; CPU = proxy utime+stime per request):\n")
        print("| scenario | target | ops/s | p50 us | p99 us | p999 us | proxy CPU us/req "
              "| proxy/direct ops | proxy peak RSS MB |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for sc in scenarios:
            s = summary[sc[0]]
            d = s.get("direct", {}).get("ops")
            for t in ["direct", "nutcracker", "ringleader"] + (
                    ["ringleader-before"] if "ringleader-before" in s else []):
                if t in unavailable:
                    print(f"| {sc[0]} | {t} | not available | | | | | | |")
                    continue
                r = s[t]
                rel = f"{r['ops'] / d:.2f}" if d and t != "direct" else ""
                cpu = fmt(r["cpu"], 2) if t != "direct" else "n/a"
                rss = fmt(r["rss"]) if t != "direct" else "n/a"
                print(f"| {sc[0]} | {t} | {fmt(r['ops'], 0)} | {fmt(r['p50'])} | "
                      f"{fmt(r['p99'])} | {fmt(r['p999'])} | {cpu} | {rel} | {rss} |")

    def cleanup(self):
        self.procs.stop_all()
        if not self.a.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            print(f"kept {self.tmp}")


def main():
    ap = argparse.ArgumentParser(prog="scripts/bench",
                                 description="direct vs nutcracker vs ringleader, alternating")
    ap.add_argument("--proto", choices=["memcache", "redis"], default="memcache")
    ap.add_argument("--quick", action="store_true", help="1 round of 2 s runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    ap.add_argument("--workers", type=int, default=1, help="ringleader workers (default 1)")
    ap.add_argument("--scenario", default=".", help="regex over set-p1 set-p16 get-p1 get-p16")
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--rate", type=float, default=0,
                    help="open loop: requests/s over every connection (rlbench --rate), each "
                    "timed from when it was due; default closed loop")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--no-scaling", action="store_true",
                    help="skip the 2-worker unpinned ringleader run")
    ap.add_argument("--no-pin", action="store_true", help="do not use taskset")
    ap.add_argument("--json", metavar="FILE", help="write every run's figures to FILE")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
    ap.add_argument("--compare", metavar="BINARY",
                    help="also run this ringleader binary (e.g. the build before a change) as "
                         "target ringleader-before, alternating with the others")
    m = ap.add_argument_group("feature modes (one at a time; memcached pools; see "
                              "docs/performance.md)")
    m.add_argument("--stats-cost", action="store_true",
                   help="ringleader with latency histograms and hot keys on vs off")
    m.add_argument("--bounded", action="store_true",
                   help="hot key over 4 servers, with and without balance_factor: 1.25")
    m.add_argument("--hot-share", type=float, default=0.5, help="--bounded: share of GETs "
                   "on the hot key (default 0.5)")
    m.add_argument("--bounded-connections", type=int, default=100, help="default 100")
    m.add_argument("--bounded-pipeline", type=int, default=8, help="default 8")
    m.add_argument("--warmup", action="store_true",
                   help="add a 5th server to a warm pool of 4 by SIGHUP, with and without "
                   "warmup: 60; hit ratio after the reload")
    m.add_argument("--warm-keys", type=int, default=50000, help="--warmup keyspace (50000)")
    m.add_argument("--warm-after", type=int, default=20,
                   help="--warmup: seconds observed after the reload (20)")
    m.add_argument("--warm-pipeline", type=int, default=4, help="default 4")
    m.add_argument("--reload", action="store_true",
                   help="1,000-server ketama pool reloaded repeatedly: SIGHUP -> new epoch, "
                   "p99 of a steady load on a small pool with and without reloads")
    m.add_argument("--reload-every", type=float, default=0.5, help="seconds between SIGHUPs")
    m.add_argument("--reload-pipeline", type=int, default=1, help="default 1")
    m.add_argument("--stampede", action="store_true",
                   help="one hot key asked by many connections at once, collapse_gets false, "
                   "true, inflight: backend gets per burst and latency")
    m.add_argument("--stampede-connections", type=int, default=200, help="default 200")
    m.add_argument("--lease-stampede", action="store_true",
                   help="cache-aside clients on one key that expires, leases off and on: "
                   "recomputations per expiry, latency, backend requests; then GET/SET rows")
    m.add_argument("--lease-expiries", type=int, default=10, help="default 10")
    m.add_argument("--rejoin-cost", action="store_true",
                   help="auto_eject_hosts pools with rejoin: invalidate vs trust on the "
                   "side-by-side scenarios")
    m.add_argument("--shadow", action="store_true",
                   help="the primary with and without a shadow pool at fraction 1.0, compare on")
    m.add_argument("--request-log", action="store_true",
                   help="the request log off and at sample 0.01 on the side-by-side "
                   "scenarios (scripts/bench_introspect.py)")
    m.add_argument("--callgrind", action="store_true",
                   help="instructions per request by callgrind (and --compare BINARY's)")
    m.add_argument("--callgrind-requests", type=int, default=20000, help="default 20000")
    m.add_argument("--tls", action="store_true",
                   help="CPU per request of TLS: ringleader terminating it vs stunnel4 in front "
                   "of ringleader and of nutcracker; TLS vs plaintext to the backends")
    m.add_argument("--blpop-queue", action="store_true",
                   help="a Redis job queue: producers RPUSH, consumers blocked in BLPOP, "
                   "straight at the queue's server and through ringleader (4 servers)")
    m.add_argument("--queue-clients", type=int, default=4,
                   help="--blpop-queue: producers and as many consumers (4)")
    m.add_argument("--pubsub", action="store_true",
                   help="Redis pub/sub fan-out: 1 publisher, --pubsub-subscribers subscribers "
                   "of one channel, straight at a redis-server and through ringleader")
    m.add_argument("--pubsub-subscribers", type=int, default=100, help="default 100")
    m.add_argument("--pubsub-messages", type=int, default=20000, help="default 20000")
    m.add_argument("--cluster", action="store_true",
                   help="a 3-master Redis Cluster: redis-benchmark --cluster directly against "
                        "redis-benchmark through a redis_cluster pool (GET/SET, P=1 and P=16)")
    m.add_argument("--binary", action="store_true",
                   help="memcached's binary protocol beside the text one (set/get, P1 and P16), "
                        "straight at 4 memcached and through ringleader (nutcracker cannot)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.duration = 1, 2.0
    if a.rounds < 1 or a.rounds > 20 or not 0 < a.duration <= 600:
        ap.error("--rounds 1..20, --duration 0..600")
    if sum(bool(getattr(a, m)) for m in MODES) > 1:
        ap.error("one of %s at a time" % ", ".join("--" + m.replace("_", "-") for m in MODES))
    if not 1 <= a.queue_clients <= 64:
        ap.error("--queue-clients 1..64")
    if not 1 <= a.pubsub_subscribers <= 5000 or not 1 <= a.pubsub_messages <= 10 ** 6:
        ap.error("--pubsub-subscribers 1..5000, --pubsub-messages 1..1000000")
    if not 0 <= a.hot_share <= 1 or not 1 <= a.warm_after <= 120 or a.reload_every < 0.05:
        ap.error("--hot-share 0..1, --warm-after 1..120, --reload-every >= 0.05")

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    try:
        b = Bench(a)
    except Setup as e:
        print(f"scripts/bench: {e}", file=sys.stderr)
        return 2
    try:
        return b.run()
    except Setup as e:
        print(f"scripts/bench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        b.cleanup()


if __name__ == "__main__":
    sys.exit(main())
