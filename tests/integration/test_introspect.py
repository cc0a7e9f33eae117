"""test_introspect.py: a record of who did what — SLOWLOG, INFO commandstats and
errorstats, memcached `stats` commandstats, and the sampled JSON-lines request log.

What each test proves, against real redis-server and memcached processes:
  slowlog_frozen_server
      redis-server stopped for 80 ms (SIGSTOP, SIGCONT by its PID) while 4 GETs wait in
      the proxy: SLOWLOG GET (threshold 20 ms) holds those 4 requests, each with
      its arguments, client address and the server it went to (the client-name field's
      server=); a fast request before or after is there only if it took 20 ms itself (a
      loaded sanitizer build: reported, not a failure); redis-py's slowlog_get()
      parses the reply; SLOWLOG LEN, RESET, HELP and argument errors answer as Redis 7.0.
  slowlog_argument_trimming
      SLOWLOG's arguments as Redis trims them: a long argument shows its first bytes and
      "... (N more bytes)" (the proxy keeps a request's first 64 bytes), the arguments
      past the kept prefix "... (N more arguments)".
  commandstats_exact
      100,000 pipelined requests (SET, GET, INCR, DEL, EXISTS) over two connections
      (two workers): INFO commandstats through the proxy counts every one by command,
      equal to what the client sent; no failed or rejected call.
  errorstats_differential
      the same requests with errors (WRONGTYPE, a non-integer INCR, unknown commands,
      wrong arity) through the proxy and straight to another redis-server: the proxy's
      INFO errorstats equal the server's, and so do the commands' failed_calls and
      rejected_calls.
  request_log_sample
      sample: 0.01 over 100,000 pipelined requests: 1,000 +- 150 lines. The sampling is
      random (a PRNG per worker): a statistical bound, not an exact count — the count is
      Binomial(100000, 0.01), standard deviation 31.5, so 150 is 4.7 standard
      deviations (a false failure about once in 400,000 runs). And every one of 200
      error replies is logged, with user, client, pool, command, key, server, bytes,
      latency and result; key: hash logs the key's hash, never its bytes.
  request_log_reopen
      SIGUSR1 reopens the file: lines before the rename stay in the renamed file, lines
      after it go to a new file at the configured path; stats count written and dropped.
  memcached_pool
      a memcached pool: `stats` carries cmdstat_<command>_calls ... and
      errorstat_CLIENT_ERROR, equal to what was sent; its requests and errors are in the
      request log.
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Memcached, Proxy, Raw, Redis, Runner, check, eq, resp_encode  # noqa: E402
from harness.common import patience  # noqa: E402
from harness.procs import tmpdir  # noqa: E402

R = Runner("test_introspect", per_test_timeout=60, total_timeout=240)


def rd_pool(servers, **extra):
    p = {"redis": True, "hash": "fnv1a_64", "distribution": "ketama", "timeout": 5000,
         "server_connections": 1,
         "servers": ["%s:1 s%d" % (be.hostport(), i) for i, be in enumerate(servers)]}
    p.update(extra)
    return p


def mc_pool(servers):
    return {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 5000,
            "servers": ["%s:1 m%d" % (be.hostport(), i) for i, be in enumerate(servers)]}


def wait_for(pred, what, seconds=10):
    deadline = time.monotonic() + patience(seconds)
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def info_section(c, section):
    """{name: value-text} of one INFO section, through a Raw client."""
    text = c.rd("INFO", section)
    out = {}
    for line in text.split(b"\r\n"):
        if b":" in line and not line.startswith(b"#"):
            k, v = line.split(b":", 1)
            out[k.decode()] = v.decode()
    return out


def fields(v):
    """'calls=3,usec=5,...' -> {'calls': '3', ...}"""
    return dict(kv.split("=", 1) for kv in v.split(","))


def log_lines(path):
    try:
        with open(path, "rb") as f:
            return [json.loads(line) for line in f.read().splitlines() if line]
    except FileNotFoundError:
        return []


class Env(harness.Env):
    def __init__(self):
        self.rd = Redis.start()
        self.rd2 = Redis.start()
        self.mc = Memcached.start()
        self.backends = [self.rd, self.rd2, self.mc]
        self.proxies = []

    def proxy(self, pools, glob=None, workers=2):
        px = Proxy(pools, workers=workers, glob=glob, dump=lambda d: harness.ydump(d) + "\n")
        self.proxies.append(px)
        return px


# ------------------------------------------------------------------ SLOWLOG

def slow_entries(c):
    got = c.rd("SLOWLOG", "GET", "-1")
    return [{"id": e[0], "ts": e[1], "usec": e[2], "args": e[3], "addr": e[4], "name": e[5]}
            for e in got]


@R.test(ringleader=True)
def slowlog_frozen_server(env):
    rd = Redis.start()          # this test's own: it is stopped for a while
    env.backends.append(rd)
    px = env.proxy({"rd": rd_pool([rd])}, glob={"slowlog_threshold_us": 20000})
    conns = [px.client("rd") for _ in range(6)]
    try:
        for i, c in enumerate(conns):           # server connections open, warm
            eq(c.rd("SET", "fast:%d" % i, "v"), "OK")
        eq(conns[0].rd("SLOWLOG", "RESET"), "OK")
        eq(conns[0].rd("SLOWLOG", "LEN"), 0)
        for i, c in enumerate(conns):
            eq(c.rd("GET", "fast:%d" % i), b"v")
        os.kill(rd.proc.pid, signal.SIGSTOP)
        try:
            for i, c in enumerate(conns[:4]):
                c.send(resp_encode("GET", "frozen:%d" % i))
            time.sleep(0.08)
        finally:
            os.kill(rd.proc.pid, signal.SIGCONT)
        for c in conns[:4]:
            eq(c.read_resp(), None)
        for i, c in enumerate(conns):
            eq(c.rd("GET", "fast:%d" % i), b"v")
        entries = slow_entries(conns[5])
        ids = [e["id"] for e in entries]
        eq(ids, sorted(ids, reverse=True), "newest first")
        eq(len(set(ids)), len(ids), "ids are unique over the workers")
        fast = [e for e in entries if not e["args"][1].startswith(b"frozen:")]
        entries = [e for e in entries if e["args"][1].startswith(b"frozen:")]
        keys = sorted(e["args"][1].decode() for e in entries)
        eq(keys, ["frozen:0", "frozen:1", "frozen:2", "frozen:3"], "the slow requests")
        if fast:
            print("  fast requests that took the threshold themselves (a loaded box): %s"
                  % [(e["args"][1], e["usec"]) for e in fast])
        for e in entries + fast:
            check(e["usec"] >= 20000, "duration %d us under the threshold" % e["usec"])
        for e in entries:
            eq(e["args"][0], b"GET")
            check(abs(e["ts"] - time.time()) < 60, "timestamp %d" % e["ts"])
            check(b"server=" + rd.hostport().encode() in e["name"],
                  "the server in the client-name field: %r" % e["name"])
            check(b"user=default" in e["name"], "the user: %r" % e["name"])
            check(e["addr"].startswith(b"127.0.0.1:"), "client address %r" % e["addr"])
        print("  slow requests' durations (us): %s" % sorted(e["usec"] for e in entries))
        total = len(entries) + len(fast)
        eq(conns[0].rd("SLOWLOG", "LEN"), total)
        eq(len(conns[0].rd("SLOWLOG", "GET", "2")), 2)
        eq(len(conns[0].rd("SLOWLOG", "GET")), min(total, 10))     # default 10
        # redis-py parses the reply (six fields: id, time, duration, command, addr, name)
        import redis as redispy
        host, port = px.addr("rd")
        r = redispy.Redis(host=host, port=port, socket_timeout=10)
        parsed = r.slowlog_get(10)
        eq(sorted(p["command"] for p in parsed if p["command"].startswith(b"GET frozen:")),
           [b"GET frozen:0", b"GET frozen:1", b"GET frozen:2", b"GET frozen:3"])
        for p in parsed:        # redis-py 4.3 reads no client fields; later ones do
            check(b"server=" in p.get("client_name", b"server="), "client_name: %r" % p)
            check(p["duration"] >= 20000, "redis-py's duration %r" % p)
        eq(r.slowlog_len(), total)
        r.close()
        help_lines = conns[0].rd("SLOWLOG", "HELP")
        check(help_lines[0].startswith("SLOWLOG <subcommand>"), "HELP: %r" % help_lines[:1])
        err = conns[0].rd("SLOWLOG", "GET", "x")
        check(isinstance(err, harness.RespError) and "out of range" in str(err), repr(err))
        eq(conns[0].rd("SLOWLOG", "RESET"), "OK")
        eq(conns[0].rd("SLOWLOG", "LEN"), 0)
        eq(conns[1].rd("SLOWLOG", "GET"), [])
        # CLIENT LIST / INFO: user, address, age, last command, and the pool (trailing)
        lines = conns[0].rd("CLIENT", "LIST").decode().splitlines()
        check(len(lines) >= 6, "CLIENT LIST: %r" % lines)   # redis-py's may still be closing
        for line in lines:
            f = dict(kv.split("=", 1) for kv in line.split(" "))
            eq(f["pool"], "rd")
            eq(f["user"], "default")
            check(f["addr"].startswith("127.0.0.1:") and int(f["age"]) >= 0, line)
            check(line.endswith(" pool=rd"), "pool= is the last field: %r" % line)
        info = conns[2].rd("CLIENT", "INFO").decode()
        check(" cmd=client|info " in info and info.rstrip().endswith("pool=rd"), info)
    finally:
        for c in conns:
            c.close()


@R.test(ringleader=True)
def slowlog_argument_trimming(env):
    px = env.proxy({"rd": rd_pool([env.rd])}, glob={"slowlog_threshold_us": 0}, workers=1)
    with px.client("rd") as c:
        eq(c.rd("SLOWLOG", "RESET"), "OK")
        long_key = "k" * 100
        eq(c.rd("SET", long_key, "v"), "OK")
        eq(c.rd("MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6"), "OK")
        entries = slow_entries(c)
        # newest first: MSET, then SET, then SLOWLOG RESET (logged like any command)
        mset, sset = entries[0]["args"], entries[1]["args"]
        eq(sset[0], b"SET")
        # "*3\r\n$3\r\nSET\r\n$100\r\n" is 19 bytes: 45 of the key's 100 are kept
        eq(sset[1], b"k" * 45 + b"... (55 more bytes)")
        eq(sset[2], b"... (1 more arguments)")
        eq(mset[0], b"MSET")
        check(mset[-1].startswith(b"... (") and mset[-1].endswith(b" more arguments)"),
              "the arguments past the kept prefix: %r" % mset)
        shown = len(mset) - 1
        eq(int(mset[-1].split(b"(")[1].split()[0]) + shown, 13, "arguments counted")


# ------------------------------------------------------------------ commandstats

def big_pipeline(prefix, groups):
    """(request bytes, expected reply bytes, counts) of `groups` groups of five requests."""
    req, want = [], []
    counts = {"set": 0, "get": 0, "incr": 0, "del": 0, "exists": 0}
    for i in range(groups):
        a, b, n = "%sa%d" % (prefix, i), "%sb%d" % (prefix, i), "%sn%d" % (prefix, i)
        req += [resp_encode("SET", a, "v"), resp_encode("GET", a),
                resp_encode("SET", b, "v"), resp_encode("GET", b)]
        want += [b"+OK\r\n", b"$1\r\nv\r\n", b"+OK\r\n", b"$1\r\nv\r\n"]
        counts["set"] += 2
        counts["get"] += 2
        if i % 2 == 0:
            req.append(resp_encode("INCR", n))
            counts["incr"] += 1
        elif i % 4 == 1:
            req.append(resp_encode("DEL", a))
            counts["del"] += 1
        else:
            req.append(resp_encode("EXISTS", a))
            counts["exists"] += 1
        want.append(b":1\r\n")
    return b"".join(req), b"".join(want), counts


@R.test(ringleader=True, timeout=120)
def commandstats_exact(env):
    px = env.proxy({"rd": rd_pool([env.rd, env.rd2])}, workers=2)
    total = {}
    t0 = time.monotonic()
    with px.client("rd") as c1, px.client("rd") as c2:
        for k, c in enumerate((c1, c2)):
            req, want, counts = big_pipeline("cs%d-%d:" % (os.getpid(), k), 10000)
            c.pipeline(req, want, timeout=patience(60))
            for name, n in counts.items():
                total[name] = total.get(name, 0) + n
        elapsed = time.monotonic() - t0
        eq(sum(total.values()), 100000)
        st = info_section(c1, "commandstats")
    print("  100,000 pipelined requests in %.2f s" % elapsed)
    for name, n in total.items():
        f = fields(st["cmdstat_" + name])
        eq(int(f["calls"]), n, "cmdstat_%s calls" % name)
        eq(int(f["failed_calls"]), 0, "cmdstat_%s failed_calls" % name)
        eq(int(f["rejected_calls"]), 0, "cmdstat_%s rejected_calls" % name)
        check(int(f["usec"]) >= 0 and float(f["usec_per_call"]) >= 0, "usec %r" % f)
        print("  cmdstat_%s: %s" % (name, st["cmdstat_" + name]))
    # INFO's own call is counted once it is answered, as Redis counts it after it ran
    with px.client("rd") as c:
        st2 = info_section(c, "commandstats")
        check("cmdstat_info" in st2, "INFO counted: %r" % sorted(st2))
        plain = c.rd("INFO")
        check(b"# Commandstats" not in plain, "commandstats is not a default section")
        check(b"# Errorstats" in plain, "errorstats is a default section (as Redis 7.0)")
        check(b"# Commandstats" in c.rd("INFO", "all"), "INFO all has commandstats")


# ------------------------------------------------------------------ errorstats

ERROR_SEQUENCE = [
    ("RPUSH", "es:list", "a"),
    ("SET", "es:str", "abc"),
    ("GET", "es:list"), ("GET", "es:list"), ("GET", "es:list"),   # WRONGTYPE x3
    ("INCR", "es:str"), ("INCR", "es:str"),                        # ERR not an integer
    ("NOSUCHCOMMAND", "x"), ("ALSONOTACOMMAND",),                  # ERR unknown command
    ("GET",),                                                      # ERR wrong arity
    ("LPOP", "es:str"),                                            # WRONGTYPE
    ("GET", "es:str"),
]


def run_sequence(c):
    for cmd in ERROR_SEQUENCE:
        c.rd(*cmd)


@R.test(ringleader=True)
def errorstats_differential(env):
    ref = Redis.start()
    env.backends.append(ref)
    px = env.proxy({"rd": rd_pool([env.rd])}, workers=1)
    with px.client("rd") as c, ref.client() as d:
        eq(d.rd("CONFIG", "RESETSTAT"), "OK")
        run_sequence(c)
        run_sequence(d)
        pe, se = info_section(c, "errorstats"), info_section(d, "errorstats")
        eq(pe, se, "INFO errorstats: the proxy's vs the server's")
        check(se.get("errorstat_WRONGTYPE") == "count=4", "the reference counted: %r" % se)
        pc, sc = info_section(c, "commandstats"), info_section(d, "commandstats")
        for name in ("get", "incr", "lpop"):
            p, s = fields(pc["cmdstat_" + name]), fields(sc["cmdstat_" + name])
            for k in ("calls", "failed_calls", "rejected_calls"):
                eq(p[k], s[k], "cmdstat_%s %s: proxy vs server" % (name, k))
        print("  errorstats: %s" % pe)


# ------------------------------------------------------------------ the request log

def pipelined_gets(c, prefix, n, chunk=20000):
    eq(c.rd("SET", prefix, "v"), "OK")
    one, want1 = resp_encode("GET", prefix), b"$1\r\nv\r\n"
    done = 0
    while done < n:
        k = min(chunk, n - done)
        c.pipeline(one * k, want1 * k, timeout=patience(60))
        done += k


@R.test(ringleader=True, timeout=120)
def request_log_sample(env):
    path = os.path.join(tmpdir(), "requests-sample.log")
    px = env.proxy({"rd": rd_pool([env.rd]), "rh": rd_pool([env.rd2])},
                   glob={"request_log": {"path": path, "sample": 0.01, "errors": "all"},
                         "slowlog_threshold_us": -1})
    # 100,000 requests: 99,999 GETs pipelined and the SET before them
    with px.client("rd") as c:
        pipelined_gets(c, "rl-sample", 99999)
    odd = b'q"\\\x01\xc3\xa9'                  # a quote, a backslash, a control byte, UTF-8
    with px.client("rd") as c:
        eq(c.rd("SET", "rl-err", "abc"), "OK")
        eq(c.rd("SET", odd, "abc"), "OK")
        for _ in range(199):
            check(isinstance(c.rd("INCR", "rl-err"), harness.RespError), "INCR error")
        check(isinstance(c.rd("INCR", odd), harness.RespError), "INCR error")
    wait_for(lambda: sum(1 for x in log_lines(path) if x["command"] == "incr") >= 200,
             "the error lines")
    time.sleep(0.3)                     # the writer's last pass (every 100 ms)
    lines = log_lines(path)
    sampled = [x for x in lines if x.get("key") == "rl-sample"]     # the 100,000
    errors = [x for x in lines if x["result"] == "error"]
    print("  sample 0.01 over 100,000 requests: %d lines (bound 1,000 +- 150)" % len(sampled))
    check(850 <= len(sampled) <= 1150, "%d sampled lines, outside 1,000 +- 150" % len(sampled))
    eq(len(errors), 200, "error lines")
    # a key's bytes come back from the JSON string: every byte outside printable ASCII
    # is one \u00XX escape
    eq([x["key"].encode("latin-1") for x in errors if x["key"] != "rl-err"], [odd])
    e = errors[0]
    eq(e["user"], "default")
    eq(e["pool"], "rd")
    eq(e["command"], "incr")
    eq(e["key"], "rl-err")
    eq(e["server"], env.rd.hostport())
    eq(e["error"], "ERR")
    check(e["client"].startswith("127.0.0.1:"), "client %r" % e["client"])
    check(e["bytes_in"] > 0 and e["bytes_out"] > 0 and e["latency_us"] >= 0, repr(e))
    g = next(x for x in sampled if x["command"] == "get")
    eq(g["key"], "rl-sample")
    eq(g["bytes_out"], 7)
    st = px.stats()
    check(st["request_log_written"] >= len(lines), "stats request_log_written: %r" % st)
    eq(st["request_log_dropped"], 0, "dropped lines")
    # key: hash logs the key's hash, never its bytes
    px.rewrite(glob={"request_log": {"path": path, "sample": 1, "key": "hash"},
                     "slowlog_threshold_us": -1})
    os.kill(px.proc.pid, signal.SIGHUP)
    time.sleep(0.5 * patience(1))
    with px.client("rh") as c:
        wait_for(lambda: c.rd("SET", "secret-key-name", "v") == "OK" and any(
            x.get("pool") == "rh" and "key_hash" in x for x in log_lines(path)),
            "a hashed key line")
    text = open(path, "rb").read()
    check(b"secret-key-name" not in text, "key: hash wrote the key's bytes")


@R.test(ringleader=True)
def request_log_reopen(env):
    path = os.path.join(tmpdir(), "requests-reopen.log")
    px = env.proxy({"rd": rd_pool([env.rd])},
                   glob={"request_log": {"path": path, "sample": 1}}, workers=1)
    with px.client("rd") as c:
        for i in range(10):
            eq(c.rd("SET", "before:%d" % i, "v"), "OK")
        wait_for(lambda: len(log_lines(path)) >= 10, "the first lines")
        os.rename(path, path + ".1")
        os.kill(px.proc.pid, signal.SIGUSR1)
        wait_for(lambda: os.path.exists(path), "the reopened file")
        for i in range(10):
            eq(c.rd("SET", "after:%d" % i, "v"), "OK")
        wait_for(lambda: len(log_lines(path)) >= 10, "the lines after the reopen")
    old = [x["key"] for x in log_lines(path + ".1")]
    new = [x["key"] for x in log_lines(path)]
    eq(sorted(old), sorted("before:%d" % i for i in range(10)))
    eq(sorted(new), sorted("after:%d" % i for i in range(10)))
    st = px.stats()
    eq(st["request_log_written"], 20)
    eq(st["request_log_dropped"], 0)


# ------------------------------------------------------------------ memcached

@R.test(ringleader=True)
def memcached_pool(env):
    path = os.path.join(tmpdir(), "requests-mc.log")
    px = env.proxy({"mc": mc_pool([env.mc])},
                   glob={"request_log": {"path": path, "sample": 1}}, workers=1)
    with px.client("mc") as c:
        for i in range(30):
            eq(c.mc(b"set mck%d 0 0 1\r\nx" % i).rstrip(), b"STORED")
        for i in range(20):
            c.send(b"get mck%d\r\n" % i)
            c.read_values()
        for _ in range(5):
            check(c.mc(b"incr mck0 1").startswith(b"CLIENT_ERROR"), "incr of a non-number")
        c.send(b"stats\r\n")
        raw = c.read_until(lambda b: b.find(b"END\r\n") + 5 if b.find(b"END\r\n") >= 0 else None)
    st = {}
    for line in raw.decode().splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "STAT":
            st[f[1]] = f[2]
    eq(st.get("cmdstat_set_calls"), "30")
    eq(st.get("cmdstat_get_calls"), "20")
    eq(st.get("cmdstat_incr_calls"), "5")
    eq(st.get("cmdstat_incr_failed_calls"), "5")
    eq(st.get("errorstat_CLIENT_ERROR"), "5")
    wait_for(lambda: len(log_lines(path)) >= 55, "the request log's lines")
    lines = log_lines(path)
    eq(sum(1 for x in lines if x["command"] == "set"), 30)
    eq(sum(1 for x in lines if x["command"] == "get"), 20)
    errs = [x for x in lines if x["result"] == "error"]
    eq(len(errs), 5)
    eq(errs[0]["error"], "CLIENT_ERROR")
    eq(errs[0]["server"], env.mc.hostport())
    eq(errs[0]["pool"], "mc")


if __name__ == "__main__":
    R.main(Env)
