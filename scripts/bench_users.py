#!/usr/bin/python3
"""scripts/bench_users.py: GET/SET through pools without users, with users (auth + checks),
with a namespace; one proxy worker, one redis-server, one memcached.

Rows (Redis and memcached, pipeline 1 and 16, 9:1 GET:SET over 10,000 keys, 32-byte values):
  no users      a pool no user names: the request path tests one byte per request
  users         Redis: AUTH as a user with commands [read, write] and keys ["key:*"];
                memcached: the user matched by address, the same grants
  namespace     the same user with namespace "ns:" (every request rewritten, every
                reply's names taken off where it carries any)
Figures: ops/s, proxy CPU microseconds per request (/proc utime + stime over the run).

  --callgrind: instructions (callgrind Ir) per Redis GET at P1 on one connection, for each
      row, from the difference of two runs (N and 3N requests) so that start and stop
      cancel out; with --baseline BINARY also that binary's no-users row (main's build:
      what the no-users path cost before users existed).

Usage: scripts/bench_users.py [--requests N] [--connections N] [--callgrind
                               [--callgrind-requests N] [--baseline PATH]]
Binaries: $RINGLEADER or build/release/ringleader, $RLBENCH or build/release/tools/rlbench.
Every process it starts is stopped by its PID when it exits. docs/security.md has figures.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PASS = "bench-pass"


# the same helpers as the near cache's bench (this directory is on the path)
from bench_nearcache import callgrind_total, cpu_us, free_port, wait_listening  # noqa: E402


def conf_text(ports, rport, mport, users=True):
    sha = hashlib.sha256(PASS.encode()).hexdigest()
    pools = {
        "rd_plain": {"listen": "127.0.0.1:%d" % ports["rd_plain"], "redis": True,
                     "timeout": 60000, "servers": ["127.0.0.1:%d:1" % rport]},
        "rd_users": {"listen": "127.0.0.1:%d" % ports["rd_users"], "redis": True,
                     "timeout": 60000, "servers": ["127.0.0.1:%d:1" % rport]},
        "mc_plain": {"listen": "127.0.0.1:%d" % ports["mc_plain"], "timeout": 60000,
                     "servers": ["127.0.0.1:%d:1" % mport]},
        "mc_users": {"listen": "127.0.0.1:%d" % ports["mc_users"], "timeout": 60000,
                     "servers": ["127.0.0.1:%d:1" % mport]},
        "mc_ns": {"listen": "127.0.0.1:%d" % ports["mc_ns"], "timeout": 60000,
                  "servers": ["127.0.0.1:%d:1" % mport]},
    }
    doc = dict(pools)
    if users:
        doc["ringleader"] = {"users": [
            {"name": "app", "password_sha256": sha, "pools": ["rd_users", "mc_users"],
             "commands": ["read", "write"], "keys": ["key:*"], "clients": ["127.0.0.0/8"]},
            {"name": "appns", "password_sha256": sha, "pools": ["rd_users", "mc_ns"],
             "commands": ["read", "write"], "keys": ["ns:*"], "namespace": "ns:",
             "clients": ["127.0.0.0/8"]},
        ]}
    return json.dumps(doc)


def start_proxy(rl, work, tag, rport, mport, users=True, valgrind=None):
    ports = {k: free_port() for k in ("rd_plain", "rd_users", "mc_plain", "mc_users", "mc_ns")}
    conf = os.path.join(work, tag + ".yml")
    with open(conf, "w") as f:
        f.write(conf_text(ports, rport, mport, users))
    argv = [rl, "-c", conf, "-s", str(free_port()), "-a", "127.0.0.1", "--workers", "1",
            "-o", os.path.join(work, tag + ".log")]
    if valgrind:
        argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + valgrind] + argv
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for port in ports.values():
        wait_listening(port, p, 120 if valgrind else 10)
    return p, ports


def callgrind_ir(rl, rlb, work, rport, mport, row, n, users=True):
    tag = "cg-%s-%d-%s" % (row, n, "u" if users else "base")
    out = os.path.join(work, tag + ".out")
    p, ports = start_proxy(rl, work, tag, rport, mport, users, valgrind=out)
    try:
        pool = "rd_plain" if row == "no users" else "rd_users"
        extra = [] if row == "no users" else ["--auth",
                                              ("app" if row == "users" else "appns") + ":" + PASS]
        subprocess.run([rlb, "--proto", "redis", "--port", str(ports[pool]), "-c", "1",
                        "--keys", "1", "--ratio", "1:0", "-n", str(n)] + extra,
                       check=True, capture_output=True, timeout=900)
    except subprocess.CalledProcessError as e:
        raise SystemExit("rlbench failed: %s" % e.stderr.decode(errors="replace"))
    finally:
        p.terminate()
        p.wait(300)
    return callgrind_total(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--connections", type=int, default=10)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--callgrind-requests", type=int, default=5000)
    ap.add_argument("--baseline", default=None)
    a = ap.parse_args()
    rl = os.environ.get("RINGLEADER", os.path.join(TOP, "build/release/ringleader"))
    rlb = os.environ.get("RLBENCH", os.path.join(TOP, "build/release/tools/rlbench"))
    work = tempfile.mkdtemp(prefix="bench-users-")
    procs = []
    try:
        rport, mport = free_port(), free_port()
        r = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", work],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(r)
        m = subprocess.Popen(["memcached", "-u", "root", "-p", str(mport), "-U", "0", "-l",
                              "127.0.0.1", "-m", "256"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(m)
        wait_listening(rport, r)
        wait_listening(mport, m)
        if a.callgrind:
            n = a.callgrind_requests
            print("| Redis GET, P1, 1 connection | Ir per request |")
            print("|---|---:|")
            rows = [("no users: configuration without users:", rl, False),
                    ("no users: a pool no user names", rl, True),
                    ("users", rl, True), ("namespace", rl, True)]
            if a.baseline:
                rows.insert(0, ("no users: baseline binary", a.baseline, False))
            for row, binary, users in rows:
                kind = "no users" if row.startswith("no users") else row
                lo = callgrind_ir(binary, rlb, work, rport, mport, kind, n, users)
                hi = callgrind_ir(binary, rlb, work, rport, mport, kind, 3 * n, users)
                print("| %s | %.0f |" % (row, (hi - lo) / (2.0 * n)))
            return 0
        p, ports = start_proxy(rl, work, "run", rport, mport)
        procs.append(p)

        def run(proto, pool, pipeline, auth=None):
            base = [rlb, "--proto", proto, "--port", str(ports[pool]), "--json",
                    "-c", str(a.connections), "-P", str(pipeline), "--keys", "10000",
                    "--value-size", "32", "--ratio", "9:1"]
            if auth:
                base += ["--auth", auth]
            c0 = cpu_us(p.pid)
            out = subprocess.run(base + ["-n", str(a.requests)], check=True,
                                 capture_output=True, text=True).stdout
            doc = json.loads(out.strip().splitlines()[-1])
            cpu = cpu_us(p.pid) - c0
            return {"ops_s": doc["ops_per_sec"], "cpu": cpu / max(doc["requests"], 1),
                    "p50": doc["p50_us"], "errors": doc["errors"] + doc["mismatches"]}

        rows = []
        for pipeline in (1, 16):
            for label, pool, auth in (("no users", "rd_plain", None),
                                      ("users", "rd_users", "app:" + PASS),
                                      ("namespace", "rd_users", "appns:" + PASS)):
                rows.append(("redis", pipeline, label, run("redis", pool, pipeline, auth)))
            for label, pool in (("no users", "mc_plain"), ("users", "mc_users"),
                                ("namespace", "mc_ns")):
                rows.append(("memcache", pipeline, label, run("memcache", pool, pipeline)))
        print("| protocol | pipeline | users | ops/s | proxy CPU us/req | p50 us | errors |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for proto, pipeline, label, x in rows:
            print("| %s | %d | %s | %.0f | %.2f | %.0f | %d |" % (
                proto, pipeline, label, x["ops_s"], x["cpu"], x["p50"], x["errors"]))
        return 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    sys.exit(main())
