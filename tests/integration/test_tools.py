"""test_tools.py: the tools twemproxy users already run work through the proxy: memcping, memcstat, memcdump; redis-cli INFO, INFO keyspace and --stat; CLIENT SETINFO."""

import os
import pty
import random
import re
import select
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Memcached, Proxy, Raw, Redis, Runner, Skip, check, eq,  # noqa: E402
                     server_lines, unique)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_tools", per_test_timeout=40, total_timeout=150)


def tool(name):
    path = shutil.which(name)
    if path is None:
        raise Skip("%s is not installed (scripts/deps installs libmemcached-tools and redis-tools)"
                   % name)
    return path


def run(argv, timeout=20):
    r = subprocess.run(argv, capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


class Env(harness.Env):
    def __init__(self):
        self.mc = [Memcached.start() for _ in range(3)]
        self.rd = [Redis.start() for _ in range(2)]
        self.backends = self.mc + self.rd
        self.proxy = Proxy({
            "mc": {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 2000,
                   "servers": server_lines(self.mc, NAMES[:3])},
            "rd": {"redis": True, "hash": "fnv1a_64", "distribution": "ketama", "timeout": 2000,
                   "servers": server_lines(self.rd, NAMES[:2])},
        })
        self.mc_addr = "%s:%d" % self.proxy.addr("mc")
        self.rd_host, self.rd_port = self.proxy.addr("rd")
        # Keys on every memcached (fnv1a_64 spreads sequential keys poorly; these are not)
        rng = random.Random(18)
        self.keys = {b"tools:%016x" % rng.getrandbits(64) for _ in range(300)}
        with self.proxy.client("mc") as c:
            for k in sorted(self.keys):
                eq(c.mc_store(b"set", k, b"value"), b"STORED\r\n")
        for i, m in enumerate(self.mc):
            check(m.get_many(sorted(self.keys)), "keys on memcached %d" % i)

    def redis_cli(self, *args, timeout=20):
        return run([tool("redis-cli"), "-h", self.rd_host, "-p", str(self.rd_port)] + list(args),
                   timeout)



# ---------------------------------------------------------------- memcached

@R.test(ringleader=True)
def memcping_answers_and_version_is_the_backends(env):
    st, out, err = run([tool("memcping"), "--servers=" + env.mc_addr])
    eq(st, 0, "memcping exit status (%s%s)" % (out, err))
    with env.proxy.client("mc") as c:
        v = c.mc(b"version")
    with env.mc[0].client() as c:
        eq(v, c.mc(b"version"), "the backends' version")


@R.test(ringleader=True)
def memcstat_parses_every_general_field(env):
    p = unique("ms")
    with env.proxy.client("mc") as c:
        for i in range(10):
            eq(c.mc_store(b"set", b"%s:%d" % (p, i), b"v"), b"STORED\r\n")
        c.mc_get(b"get", b"%s:1" % p, b"%s:nosuch" % p)
    st, out, err = run([tool("memcstat"), "--servers=" + env.mc_addr])
    eq(st, 0, "memcstat exit status (%s)" % err)
    check(not err.strip(), "memcstat complains: %r" % err)
    fields = dict(re.findall(r"^\s+(\w+): (.*)$", out, re.M))
    for name in ("pid", "uptime", "time", "version", "pointer_size", "rusage_user",
                 "rusage_system", "curr_connections", "total_connections", "cmd_get", "get_hits",
                 "get_misses", "threads"):
        check(name in fields, "memcstat shows %s: %r" % (name, out[:500]))
    eq(int(fields["pid"]), env.proxy.proc.pid, "pid is the proxy's")
    eq(int(fields["threads"]), 2, "threads: the proxy's workers")
    stats = env.proxy.stats()
    check(int(fields["get_hits"]) >= 1 and int(fields["get_misses"]) >= 1, "hits and misses: %r" % fields)
    eq(int(fields["cmd_get"]), int(fields["get_hits"]) + int(fields["get_misses"]), "cmd_get")
    # get_hits is the servers' (summed); the proxy's own count is `hits`, the stats port's
    own = 0
    for be in env.mc:
        with be.client() as c:
            c.send(b"stats\r\n")
            raw = c.read_until(lambda b: b.find(b"END\r\n") + 5 if b.find(b"END\r\n") >= 0 else None)
        own += int(re.search(rb"STAT get_hits (\d+)", raw).group(1))
    eq(int(fields["get_hits"]), own, "get_hits = the servers' summed")
    with env.proxy.client("mc") as c:
        c.send(b"stats\r\n")
        raw = c.read_until(lambda b: b.find(b"END\r\n") + 5 if b.find(b"END\r\n") >= 0 else None)
    eq(int(re.search(rb"STAT hits (\d+)", raw).group(1)), stats["mc"]["hits"],
       "hits = the stats port's, every worker")
    check(re.match(r"^\d+\.\d{6}$", fields["rusage_user"]), "rusage_user %r" % fields["rusage_user"])


@R.test(ringleader=True)
def memcstat_items_names_every_server(env):
    st, out, err = run([tool("memcstat"), "--servers=" + env.mc_addr, "--args=items"])
    eq(st, 0, "memcstat --args=items (%s)" % err)
    for name in NAMES[:3]:
        check(re.search(r"^\s+%s:items:\d+:number: \d+$" % name, out, re.M),
              "items of %s in %r" % (name, out[:800]))
    with env.proxy.client("mc") as c:
        c.send(b"stats settings\r\n")
        raw = c.read_until(lambda b: b.find(b"END\r\n") + 5 if b.find(b"END\r\n") >= 0 else None)
    lines = raw.split(b"\r\n")[:-2]
    check(all(ln.split(b" ", 2)[1].split(b":")[0] in [n.encode() for n in NAMES[:3]]
              for ln in lines), "every settings line names its server")
    eq(sum(1 for ln in lines if b":maxbytes " in ln), 3, "one maxbytes per server")


@R.test(ringleader=True)
def memcdump_lists_the_keys_of_every_server(env):
    # memcached's cachedump walks only part of its LRUs, and its LRU maintainer moves items
    # between them at any time (a key may be listed by one dump and not the next), so the
    # reference is memcdump run against the servers themselves just before and just after
    # the one through the proxy: every key both list must be there, and no key neither does
    servers = "--servers=" + ",".join(m.hostport() for m in env.mc)
    st, before, err = run([tool("memcdump"), servers])
    eq(st, 0, "memcdump against the servers (%s)" % err)
    st, out, err = run([tool("memcdump"), "--servers=" + env.mc_addr])
    eq(st, 0, "memcdump through the proxy (%s)" % err)
    st, after, err = run([tool("memcdump"), servers])
    eq(st, 0, "memcdump against the servers (%s)" % err)
    got, lo, hi = set(out.split()), set(before.split()), set(after.split())
    lo, hi = lo & hi, lo | hi
    check(len(lo & {k.decode() for k in env.keys}) > 100, "the reference lists most keys")
    eq(sorted(lo - got), [], "keys both dumps of the servers list, missing through the proxy")
    eq(sorted(got - hi), [], "keys through the proxy that no dump of the servers lists")


# ---------------------------------------------------------------- redis

@R.test(ringleader=True)
def redis_info_has_redis_sections_and_true_values(env):
    p = unique("ri")
    with env.proxy.client("rd") as c:
        for i in range(40):
            eq(c.rd("SET", b"%s:%d" % (p, i), "x" * 100), "OK")
    st, out, err = env.redis_cli("INFO")
    eq(st, 0, "redis-cli INFO (%s)" % err)
    sections = re.findall(r"^# (\w+)", out, re.M)
    eq(sections, ["Server", "Clients", "Memory", "Persistence", "Stats", "Replication", "CPU",
                  "Modules", "Errorstats", "Cluster", "Keyspace"], "sections, in Redis's order")
    f = dict(re.findall(r"^(\w+):(.*?)\r?$", out, re.M))
    direct = []
    for r in env.rd:
        st, o, _ = run([tool("redis-cli"), "-p", str(r.port), "INFO"])
        direct.append(dict(re.findall(r"^(\w+):(.*?)\r?$", o, re.M)))
    eq(f["redis_version"], min(d["redis_version"] for d in direct), "redis_version")
    # used_memory moves between two INFO calls: the sum is within the two readings
    used = int(f["used_memory"])
    check(used > 0 and abs(used - sum(int(d["used_memory"]) for d in direct)) < 1 << 20,
          "used_memory %d, backends %r" % (used, [d["used_memory"] for d in direct]))
    keys = sum(int(re.search(r"keys=(\d+)", d.get("db0", "keys=0")).group(1)) for d in direct)
    eq(int(re.search(r"keys=(\d+)", f["db0"]).group(1)), keys, "db0 keys = the backends' sum")
    eq(int(f["process_id"]), env.proxy.proc.pid, "process_id: the proxy's")
    eq(f["ringleader_servers_answering"], "2", "both servers answered")
    stats = env.proxy.stats()
    # total_commands_processed: the proxy's count of this pool's commands (INFO included)
    eq(int(f["total_commands_processed"]), stats["rd"]["requests"], "total_commands_processed")
    eq(f["blocked_clients"], "0", "blocked_clients")
    # connected_clients: the pool's clients while INFO ran (redis-cli's own, at least)
    check(int(f["connected_clients"]) >= 1, "connected_clients %s" % f["connected_clients"])


@R.test(ringleader=True)
def redis_info_keyspace_sums_the_servers(env):
    st, out, err = env.redis_cli("INFO", "keyspace")
    eq(st, 0, "redis-cli INFO keyspace (%s)" % err)
    check(out.startswith("# Keyspace"), "one section: %r" % out[:200])
    total = 0
    for r in env.rd:
        with r.client() as c:
            total += c.rd("DBSIZE")
    eq(int(re.search(r"^db0:keys=(\d+),", out, re.M).group(1)), total, "keys summed")
    st, out, err = env.redis_cli("DBSIZE")
    eq(int(out.strip()), total, "DBSIZE agrees")


@R.test(ringleader=True)
def redis_info_sections_as_the_server_reads_them(env):
    """INFO's arguments as Redis reads them, however they were written: after an empty
    request (*0) in the same packet, and inline with quotes. Differential: the section
    headers are the ones one redis-server gives to the same bytes."""
    forms = [b"*0\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n",
             b'INFO "server" \'memory\'\r\n',
             b"INFO   keyspace\r\n",
             b"*0\r\nINFO cpu\r\n"]
    for raw in forms:
        got = []
        for addr in (env.proxy.addr("rd"), env.rd[0].addr):
            with Raw(addr) as c:
                c.send(raw)
                got.append(re.findall(r"^# (\w+)", c.read_resp().decode(), re.M))
        eq(got[0], got[1], "sections of %r: proxy, redis-server" % raw)
        check(len(got[0]) in (1, 2), "%r: %r" % (raw, got[0]))


@R.test(ringleader=True)
def redis_cli_stat_shows_keys_memory_and_requests(env):
    st, dbsize, _ = env.redis_cli("DBSIZE")
    # --stat prints a header and a row per interval (-i 0.3), to a terminal: on a pipe its
    # rows would sit in stdio's buffer, so it gets a pty, read for a bounded time
    master, slave = pty.openpty()
    p = subprocess.Popen([tool("redis-cli"), "-h", env.rd_host, "-p", str(env.rd_port), "--stat",
                          "-i", "0.3"], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + patience(10)
        while out.count(b"\n") < 6 and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                out += os.read(master, 65536)
    finally:
        p.terminate()
        p.wait(10)
        os.close(master)
    rows = [ln.split() for ln in out.decode("utf-8", "replace").splitlines()
            if re.match(r"^\s*\d", ln)]
    check(len(rows) >= 3, "--stat printed rows: %r" % out[-400:])
    keys, mem, clients, blocked = rows[-1][0], rows[-1][1], rows[-1][2], rows[-1][3]
    eq(int(keys), int(dbsize), "keys column")
    check(re.match(r"^\d+(\.\d+)?[KMG]?$", mem) and not mem.startswith("-"),
          "memory column %r (was negative before)" % mem)
    check(int(clients) >= 1, "clients column %r" % clients)
    eq(blocked, "0", "blocked column")
    # requests grow: each row adds the INFO of the row before
    reqs = [int(r[4]) for r in rows]
    check(reqs == sorted(reqs) and reqs[-1] > reqs[0], "requests grow: %r" % reqs)


@R.test(ringleader=True)
def client_setinfo_and_no_evict_are_accepted(env):
    with env.proxy.client("rd") as c:
        eq(c.rd("CLIENT", "SETINFO", "LIB-NAME", "redis-py"), "OK")
        eq(c.rd("CLIENT", "SETINFO", "LIB-VER", "5.0.1"), "OK")
        eq(c.rd("CLIENT", "NO-EVICT", "ON"), "OK")
        eq(c.rd("CLIENT", "NO-TOUCH", "ON"), "OK")
        info = c.rd("CLIENT", "INFO")
        check(b"lib-name=redis-py lib-ver=5.0.1" in info, "CLIENT INFO: %r" % info)
        eq(c.rd("PING"), "PONG", "the connection goes on")


R.main(Env)
