"""test_client_list.py: CLIENT LIST / INFO / KILL over the proxy's own clients of a pool, on
every worker, beside a real redis-server 7 (the differential: field names and order, replies
and errors); redis-py's client_info(), node-redis's clientInfo() and BullMQ's getWorkers().

One redis-server behind a single-server pool (BullMQ's default prefix needs no hash tag
there), a second one asked directly for reference, and a proxy with 3 workers.
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (TOP_SRCDIR, Proxy, Redis, RespError, Runner, Skip, check, eq,  # noqa: E402
                     server_lines)

R = Runner("test_client_list", per_test_timeout=60, total_timeout=150)
NODE_DIR = os.path.join(TOP_SRCDIR, "tests", "clients")
WORKERS = 3


class Env(harness.Env):
    def __init__(self):
        self.need_own_proxy("lists the clients of a proxy it starts",
                            "documents ringleader's CLIENT LIST")
        self.backends = [Redis.start()]
        self.direct = Redis.start()
        self.more_backends = [self.direct]
        self.proxy = Proxy({"rd": {"redis": True, "hash": "fnv1a_64", "distribution": "ketama",
                                   "timeout": 10000, "auto_eject_hosts": False,
                                   "servers": server_lines(self.backends, ["a"])}},
                           workers=WORKERS)

    def conns(self, n):
        return [self.proxy.client() for _ in range(n)]


def parse_lines(text):
    """CLIENT LIST's text: a list of [(field, value)] in order, one per line."""
    if isinstance(text, bytes):
        text = text.decode()
    out = []
    for line in text.split("\n"):
        if line:
            out.append([tuple(kv.split("=", 1)) for kv in line.split(" ")])
    return out


def as_dicts(text):
    return [dict(kv) for kv in parse_lines(text)]


def close_all(cs):
    for c in cs:
        c.close()


@R.test
def fields_and_order_as_redis_7(env):
    """Every field a real redis-server 7 prints for CLIENT LIST and CLIENT INFO, in its order
    (the proxy adds Redis 7.2's lib-name and lib-ver at the end, as 7.2 prints them, then
    its own pool=, docs/introspection.md)."""
    with env.direct.client() as d, env.proxy.client() as p:
        for args in (("CLIENT", "LIST"), ("CLIENT", "INFO")):
            want = [k for k, _ in parse_lines(d.rd(*args))[0]]
            got = [k for k, _ in parse_lines(p.rd(*args))[0]]
            for extra in ("lib-name", "lib-ver", "pool"):   # pool: the proxy's, last
                if extra not in want:
                    want.append(extra)
            eq(got, want, "%s field names and order" % " ".join(args))
        info = as_dicts(p.rd("CLIENT", "INFO"))[0]
        eq(info["cmd"], "client|info")
        eq((info["user"], info["redir"], info["resp"], info["db"], info["multi"]),
           ("default", "-1", "2", "0", "-1"))
        eq(info["laddr"], "127.0.0.1:%d" % env.proxy.addr()[1], "laddr: the proxy's address")
        eq(info["addr"], "127.0.0.1:%d" % p.sock.getsockname()[1], "addr: the client's")
        eq(int(info["id"]), p.rd("CLIENT", "ID"))
        check(int(info["fd"]) > 0, "fd is the proxy's socket: %s" % info["fd"])


@R.test
def list_shows_every_worker_clients(env):
    """Clients accepted by different workers are all listed, with their own values, from
    whichever worker answers."""
    cs = env.conns(9)
    try:
        ids = []
        for i, c in enumerate(cs):
            eq(c.rd("CLIENT", "SETNAME", "cl%d" % i), "OK")
            ids.append(c.rd("CLIENT", "ID"))
        eq(cs[1].rd("GET", "cl:k"), None)
        cs[2].send(harness.resp_encode("HELLO", "3"))      # a RESP3 map: read, not parsed
        cs[2].read_until(lambda b: harness.resp3_end(b, 0))
        eq(cs[3].rd("SUBSCRIBE", "cl:ch"), [b"subscribe", b"cl:ch", 1])
        for asker in (cs[0], cs[4], cs[8]):
            rows = {int(r["id"]): r for r in as_dicts(asker.rd("CLIENT", "LIST"))}
            check(set(ids) <= set(rows), "every client listed: %s of %s" % (sorted(rows), ids))
            for i, cid in enumerate(ids):
                eq(rows[cid]["name"], "cl%d" % i)
            eq(rows[ids[1]]["cmd"], "get")
            eq(rows[ids[2]]["resp"], "3")
            eq((rows[ids[3]]["flags"], rows[ids[3]]["sub"], rows[ids[3]]["cmd"]),
               ("P", "1", "subscribe"))
            eq(rows[ids[0]]["flags"], "N")
        pub = as_dicts(cs[0].rd("CLIENT", "LIST", "TYPE", "pubsub"))
        eq([int(r["id"]) for r in pub], [ids[3]], "TYPE pubsub")
        normal = {int(r["id"]) for r in as_dicts(cs[0].rd("CLIENT", "LIST", "TYPE", "normal"))}
        check(ids[3] not in normal and set(ids) - {ids[3]} <= normal, "TYPE normal")
        some = as_dicts(cs[0].rd("CLIENT", "LIST", "ID", str(ids[5]), str(ids[7]), "999999"))
        eq(sorted(int(r["id"]) for r in some), sorted([ids[5], ids[7]]), "ID filter")
        eq(cs[0].rd("CLIENT", "LIST", "TYPE", "master"), b"")
    finally:
        close_all(cs)


@R.test
def kill_across_workers(env):
    """CLIENT KILL by ID, ADDR, LADDR, USER (SKIPME yes by default) closes the proxy's
    clients on whatever worker holds them, and counts them as Redis does."""
    cs = env.conns(8)
    try:
        ids = [c.rd("CLIENT", "ID") for c in cs]
        killer = cs[0]
        # twice in one write: the second finds it gone, though its worker may not have
        # closed it yet
        killer.send(harness.resp_encode("CLIENT", "KILL", "ID", str(ids[1])) * 2)
        eq([killer.read_resp(), killer.read_resp()], [1, 0])
        check(cs[1].closed(5), "killed by ID: closed")
        addr = "127.0.0.1:%d" % cs[2].sock.getsockname()[1]
        eq(killer.rd("CLIENT", "KILL", "ADDR", addr), 1)
        check(cs[2].closed(5), "killed by ADDR: closed")
        eq(killer.rd("CLIENT", "KILL", addr), RespError("ERR No such client"), "old form, gone")
        eq(killer.rd("CLIENT", "KILL", "127.0.0.1:%d" % cs[3].sock.getsockname()[1]), "OK",
           "old form")
        check(cs[3].closed(5), "killed by the old form: closed")
        eq(killer.rd("CLIENT", "KILL", "ID", str(ids[4]), "LADDR", "1.2.3.4:5"), 0,
           "filters are ANDed")
        left = [c for c in cs[4:]]
        n = killer.rd("CLIENT", "KILL", "LADDR", "127.0.0.1:%d" % env.proxy.addr()[1],
                      "USER", "default")
        check(n >= len(left), "LADDR + USER kill every other client: %d" % n)
        for c in left:
            check(c.closed(5), "killed by LADDR/USER: closed")
        eq(killer.rd("PING"), "PONG", "SKIPME yes: the killer stays")
        eq([int(r["id"]) for r in as_dicts(killer.rd("CLIENT", "LIST"))], [ids[0]])
        # the killer itself: its reply, then the close
        eq(killer.rd("CLIENT", "KILL", "ID", str(ids[0]), "SKIPME", "no"), 1)
        check(killer.closed(5), "CLIENT KILL of itself: closed after the reply")
    finally:
        close_all(cs)


@R.test
def errors_as_redis(env):
    """Syntax and argument errors byte for byte as a real redis-server 7 answers them."""
    cases = [
        ("CLIENT", "KILL", "ID", "0"), ("CLIENT", "KILL", "ID", "x"),
        ("CLIENT", "KILL", "TYPE", "nope"), ("CLIENT", "KILL", "USER", "nobody"),
        ("CLIENT", "KILL", "SKIPME", "maybe"), ("CLIENT", "KILL", "BOGUS", "1"),
        ("CLIENT", "KILL", "ID", "1", "SKIPME"), ("CLIENT", "KILL", "9.9.9.9:1"),
        ("CLIENT", "KILL", "ID", "999999"), ("CLIENT", "KILL", "TYPE", "pubsub"),
        ("CLIENT", "LIST", "TYPE", "nope"), ("CLIENT", "LIST", "ID", "x"),
        ("CLIENT", "LIST", "ID", "0"), ("CLIENT", "LIST", "BOGUS"),
        ("CLIENT", "LIST", "TYPE"), ("CLIENT", "KILL"),
        ("CLIENT", "NO-EVICT", "on"),
        ("CLIENT", "SETNAME", "a b"), ("CLIENT", "GETNAME"),
    ]
    with env.direct.client() as d, env.proxy.client() as p:
        for args in cases:
            eq(p.rd(*args), d.rd(*args), " ".join(args))
        # Redis 7.2's; accepted (it changes nothing through a proxy, docs/redis.md)
        eq(p.rd("CLIENT", "NO-TOUCH", "on"), "OK")


@R.test
def redis_py_client_info(env):
    """redis-py's client_info() / client_list() parse every field (4.3.4 converts id, age,
    idle, db, sub, psub, multi, qbuf, qbuf-free, obl, argv-mem, oll, omem, tot-mem with
    int() and raised KeyError: 'omem' before); client_kill_filter counts."""
    try:
        import redis
    except ImportError:
        raise Skip("python3-redis not installed")
    host, port = env.proxy.addr()
    rs = [redis.Redis(host=host, port=port, socket_timeout=10, client_name="rp%d" % i)
          for i in range(3)]
    try:
        info = rs[0].client_info()
        eq(info["name"], "rp0")
        for k in ("id", "age", "idle", "db", "sub", "psub", "multi", "qbuf", "qbuf-free", "obl",
                  "argv-mem", "oll", "omem", "tot-mem"):
            check(isinstance(info[k], int), "%s is an int: %r" % (k, info[k]))
        for r in rs[1:]:
            r.ping()
        names = {c["name"] for c in rs[0].client_list()}
        check({"rp0", "rp1", "rp2"} <= names, "client_list(): %s" % names)
        eq(rs[0].client_kill_filter(_id=rs[2].client_id()), 1)
        names = {c["name"] for c in rs[0].client_list()}
        check("rp2" not in names and {"rp0", "rp1"} <= names, "after the kill: %s" % names)
    finally:
        for r in rs:
            r.close()


@R.test
def node_redis_and_bullmq(env):
    """node-redis 5's clientInfo() has every field a redis-server gives; BullMQ's
    getWorkers() finds its 3 workers (tests/clients/client_list.js)."""
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        raise Skip("node not installed (scripts/deps)")
    for pkg in ("redis", "bullmq"):
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", pkg)):
            raise Skip("npm package %s not installed: npm ci in tests/clients (scripts/deps)" % pkg)
    out = subprocess.run([node, os.path.join(NODE_DIR, "client_list.js"),
                          str(env.proxy.addr()[1]), str(env.direct.port)],
                         capture_output=True, text=True, timeout=50, cwd=NODE_DIR,
                         stdin=subprocess.DEVNULL)
    print(out.stdout.rstrip())
    if out.stderr.strip():
        print(out.stderr.rstrip()[-2000:])
    check(out.returncode == 0 and " 0 failed" in out.stdout,
          "node client_list.js failed (exit %d)" % out.returncode)


if __name__ == "__main__":
    R.main(Env)
