#!/usr/bin/python3
"""scripts/bench_nearcache.py: near_cache off vs on, one redis-server, one proxy worker.

  one hot key (every GET for key:0) at pipeline 1 and 16:
      backend GETs per 1,000 client GETs (the server's own cmdstat_get), proxy CPU
      microseconds per request (/proc utime + stime over the run), ops/s;
  a write-heavy mix (1:1 GET:SET over 10,000 keys, uniform: the cache cannot help):
      the same figures, to show what the cache costs when it does not serve.

  --callgrind: instructions (callgrind Ir) per GET of the hot key at P1, one connection,
      off vs on (keys: all), from the difference of two runs (N and 3N requests), so
      the proxy's start, warm-up and stop cancel out: less noisy than CPU time on a busy box.

Usage: scripts/bench_nearcache.py [--requests N] [--connections N] [--keys-mode hot|all]
                                  [--callgrind [--callgrind-requests N]]
Binaries: $RINGLEADER or build/release/ringleader, $RLBENCH or build/release/tools/rlbench.
Every process it starts is stopped by its PID when it exits. docs/nearcache.md has figures.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, secs=10.0):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit("process exited before listening on %d" % port)
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("nothing listening on %d" % port)


def cpu_us(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e6 / CLK_TCK


def redis_cmd(port, *args):
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        req = b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))
        s.sendall(req)
        buf = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
            if buf.startswith(b"$"):
                n = int(buf[1:buf.index(b"\r\n")])
                if n < 0 or len(buf) >= buf.index(b"\r\n") + 2 + n + 2:
                    break
            elif buf.endswith(b"\r\n"):
                break
        return buf


def backend_gets(port):
    for line in redis_cmd(port, "INFO", "commandstats").split(b"\r\n"):
        if line.startswith(b"cmdstat_get:"):
            return int(line.split(b"calls=")[1].split(b",")[0])
    return 0


def callgrind_total(out):
    """The instruction count a callgrind output file ends with."""
    with open(out) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise SystemExit("no callgrind totals in " + out)


def callgrind_ir(rl, rlb, work, rport, on, n):
    """Ir of a proxy (under callgrind) serving n GETs of key:0, start and stop included."""
    port, sport = free_port(), free_port()
    tag = "%s-%d" % ("on" if on else "off", n)
    conf = os.path.join(work, "cg-%s.yml" % tag)
    with open(conf, "w") as f:
        f.write("bench:\n  listen: 127.0.0.1:%d\n  redis: true\n  timeout: 60000\n"
                "  servers: [\"127.0.0.1:%d:1\"]\n" % (port, rport))
        if on:
            f.write("  near_cache: {size: 64MiB, keys: all}\n")
    out = os.path.join(work, "cg-%s.out" % tag)
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, rl,
                          "-c", conf, "-s", str(sport), "-a", "127.0.0.1", "--workers", "1",
                          "-o", os.path.join(work, "cg-%s.log" % tag)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, p, 120)
        subprocess.run([rlb, "--proto", "redis", "--port", str(port), "-c", "1", "--keys", "1",
                        "-n", str(n), "--expect-hits"], check=True, capture_output=True,
                       timeout=900)
    finally:
        p.terminate()
        p.wait(300)
    return callgrind_total(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--connections", type=int, default=10)
    ap.add_argument("--keys-mode", default="hot", choices=["hot", "all"])
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--callgrind-requests", type=int, default=5000)
    a = ap.parse_args()
    rl = os.environ.get("RINGLEADER", os.path.join(TOP, "build/release/ringleader"))
    rlb = os.environ.get("RLBENCH", os.path.join(TOP, "build/release/tools/rlbench"))
    work = tempfile.mkdtemp(prefix="bench-nc-")
    procs = []
    try:
        rport = free_port()
        r = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", work],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(r)
        wait_listening(rport, r)
        if a.callgrind:
            subprocess.run([rlb, "--proto", "redis", "--port", str(rport), "--keys", "1",
                            "--prefill-only", "-c", "1"], check=True, capture_output=True)
            n = a.callgrind_requests
            print("| near_cache | Ir per GET of one hot key (P1, 1 connection) |")
            print("|---|---:|")
            for on in (False, True):
                lo = callgrind_ir(rl, rlb, work, rport, on, n)
                hi = callgrind_ir(rl, rlb, work, rport, on, 3 * n)
                print("| %s | %.0f |" % ("on" if on else "off", (hi - lo) / (2.0 * n)))
            return 0
        proxies = {}
        for name, on in (("off", False), ("on", True)):
            port, sport = free_port(), free_port()
            conf = os.path.join(work, name + ".yml")
            with open(conf, "w") as f:
                f.write("bench:\n  listen: 127.0.0.1:%d\n  redis: true\n  timeout: 5000\n"
                        "  servers: [\"127.0.0.1:%d:1\"]\n" % (port, rport))
                if on:
                    f.write("  near_cache: {size: 64MiB, keys: %s}\n" % a.keys_mode)
            p = subprocess.Popen([rl, "-c", conf, "-s", str(sport), "-a", "127.0.0.1",
                                  "--workers", "1", "-o", os.path.join(work, name + ".log")])
            procs.append(p)
            wait_listening(port, p)
            proxies[name] = (port, p)

        def run(name, extra):
            port, p = proxies[name]
            base = [rlb, "--proto", "redis", "--port", str(port), "--json",
                    "-c", str(a.connections)]
            # warm: the hot-key sketch names the key within its first second's window
            subprocess.run(base + extra + ["-d", "2.5"], check=True, capture_output=True)
            g0, c0 = backend_gets(rport), cpu_us(p.pid)
            out = subprocess.run(base + extra + ["-n", str(a.requests)], check=True,
                                 capture_output=True, text=True).stdout
            doc = json.loads(out.strip().splitlines()[-1])
            gets = backend_gets(rport) - g0
            cpu = cpu_us(p.pid) - c0
            return {"ops_s": doc["ops_per_sec"], "client_gets": doc["gets"],
                    "backend_gets_per_1000": 1000.0 * gets / max(doc["gets"], 1),
                    "proxy_cpu_us_per_req": cpu / max(doc["requests"], 1),
                    "errors": doc["errors"] + doc["mismatches"], "p50_us": doc["p50_us"]}

        subprocess.run([rlb, "--proto", "redis", "--port", str(proxies["off"][0]), "--keys",
                        "10000", "--prefill-only", "-c", "10"], check=True, capture_output=True)
        rows = []
        for label, extra in (("hot key P1", ["--keys", "1", "-P", "1", "--expect-hits"]),
                             ("hot key P16", ["--keys", "1", "-P", "16", "--expect-hits"]),
                             ("write-heavy 1:1 P1", ["--keys", "10000", "--ratio", "1:1",
                                                     "-P", "1"])):
            for name in ("off", "on"):
                rows.append((label, name, run(name, extra)))
        print("| workload | near_cache | ops/s | backend GETs per 1,000 client GETs "
              "| proxy CPU us/req | p50 us | errors |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for label, name, x in rows:
            print("| %s | %s | %.0f | %.1f | %.2f | %.0f | %d |" % (
                label, name, x["ops_s"], x["backend_gets_per_1000"], x["proxy_cpu_us_per_req"],
                x["p50_us"], x["errors"]))
        return 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


if __name__ == "__main__":
    sys.exit(main())
