"""test_cluster.py: a redis_cluster pool in front of a real 6-node Redis Cluster (3 masters, 3 replicas, cluster-node-timeout 1000 ms) started by the test.

  families_match_the_owning_node   strings, hashes, lists, sets, sorted sets, bitmaps,
      HyperLogLog, geo, streams, scripts through the proxy; every reply equals what the key's
      master gives straight to the same command (differential), and every value is read back
      on the node that owns its slot.
  multi_key_split_per_slot         MGET/MSET/DEL/UNLINK/EXISTS/TOUCH over keys of many slots,
      merged in key order; same-slot commands with a hash tag; keys of two slots get
      Redis Cluster's own CROSSSLOT text (the node's answer to the same bytes).
  cluster_aware_clients            CLUSTER SLOTS/SHARDS/NODES/INFO describe a one-node cluster
      at the proxy's address, CLUSTER KEYSLOT equals the nodes' for 2,000 keys, and redis-py's
      RedisCluster pointed at the proxy works.
  sessions_and_broadcasts          MULTI/EXEC and BLPOP pinned to a slot's master, CROSSSLOT over
      two slots, KEYS/DBSIZE/RANDOMKEY over the masters only; SCAN walks the masters: a
      full scan returns every master's keys once (differential against KEYS on each
      master), with MATCH and COUNT, and redis-py's scan_iter works through the proxy.
  stats_ring_and_reload            per-node role and slots, the pool's cluster numbers and
      counters, /ring?pool=cl&key=k names the slot and its node, a reload fetches the
      map again and keeps it (the same epoch and checksum).
  ring_tool_reads_a_saved_map      ringleader-ring --cluster-shards on a CLUSTER SHARDS and a
      CLUSTER SLOTS reply saved from a node, and --cluster HOST:PORT asking a node, place
      2,000 keys as the cluster does.
  slot_migrated_by_hand            IMPORTING/MIGRATING, MIGRATE in batches, SETSLOT NODE: keys
      of the slot read and written through the proxy at every step (ASK, then MOVED), then the
      map is refreshed: a new epoch and checksum, /ring names the new master.
  reshard_under_traffic            4 clients writing and reading back unique values while
      redis-cli --cluster reshard moves 500 slots: 0 client errors.
  manual_failover_under_traffic    CLUSTER FAILOVER of a replica while 4 clients run: 0 errors.
  master_killed                    kill -9 of a master under traffic: errors only on its slots,
      only until the cluster promotes its replica and the map is refreshed (the window is
      printed); none on the other masters' slots.
  replicas_serve_reads             read_from: any-live sends reads to replicas too (READONLY on
      their connections) and writes only to masters; a WATCH/MULTI transaction and a
      BLPOP still run on the slot's master.
  map_naming_the_proxy_is_never_dialled   (mock nodes, no cluster needed) a node whose
      CLUSTER SLOTS names the proxy's own listen address, then its stats port: the map is
      refused (cluster_refresh_errors, the reason), the proxy accepts 0 connections from
      itself, the client gets the node's MOVED at its deadline, a later GET does the same.
  redirect_loop_between_two_nodes_ends    (mock nodes) two nodes sending each other's MOVED
      for a key: 6 GETs in all (the request and 5 redirects), the client gets the last MOVED,
      cluster_redirect_limit counts it, and nothing more is sent once it is answered.

Set RL_CLUSTER_SKIP_SLOW=1 to leave out the three tests that move the cluster under load.
"""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Proxy, Raw, RespError, Runner, Skip, binary, check, eq,  # noqa: E402
                     free_port, http, resp_encode, tmpdir, unique, yaml_dump)
from mock_backend import MockBackend, garbage  # noqa: E402
from cluster_harness import (CLUSTER_ONLY_FIELDS, RedisCluster, key_in_slot, keyslot,  # noqa: E402
                             slots_map, tags_for_slots)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_cluster", per_test_timeout=90, total_timeout=420)
MOCK_ONLY = ("map_naming_the_proxy_is_never_dialled", "redirect_loop_between_two_nodes_ends")



class Env(harness.Env):
    def __init__(self):
        self.cl = None
        self.proxy = None
        self.proxies = []
        argv = sys.argv[1:]
        if argv and all(any(a in t for t in MOCK_ONLY) for a in argv):
            return              # only tests on mock nodes: no cluster to start
        if subprocess.run(["which", "redis-cli"], capture_output=True).returncode != 0:
            raise Skip("redis-cli not installed")
        self.cl = RedisCluster.start()
        self.more_backends = [self.cl]
        self.proxies = []
        self.admin = free_port()
        self.proxy = self.start_proxy()

    def start_proxy(self, **extra):
        pool = {"redis_cluster": True, "timeout": 3000, "cluster_refresh": 30,
                "servers": ["%s:1" % n.hostport() for n in self.cl.nodes[:2]]}
        pool.update(extra)
        glob = {"admin": "127.0.0.1:%d" % (self.admin if not self.proxies else free_port())}
        px = Proxy({"cl": pool}, workers=2, glob=glob)
        px.admin_port = int(glob["admin"].rsplit(":", 1)[1])
        self.proxies.append(px)
        return px

    def diagnostics(self):
        return "--- proxy log tail:\n" + (self.proxies[-1].log_tail(40) if self.proxies else "")


def owner_cmd(env, key, *args):
    """The reply of the key's master to the command, asked directly."""
    with env.cl.master_of(key).client() as c:
        return c.rd(*args)


# ---------------------------------------------------------------- correctness

FAMILIES = [
    # (key, setup commands through the proxy, read commands compared with the owner)
    ("str", [("SET", "{K}", "hello"), ("APPEND", "{K}", " world"), ("SETRANGE", "{K}", 0, "J")],
     [("GET", "{K}"), ("STRLEN", "{K}"), ("GETRANGE", "{K}", 1, 4), ("TYPE", "{K}")]),
    ("num", [("SET", "{K}", 10), ("INCR", "{K}"), ("INCRBY", "{K}", 5), ("DECR", "{K}"),
             ("INCRBYFLOAT", "{K}", "1.5")], [("GET", "{K}")]),
    ("exp", [("SET", "{K}", "v", "EX", 100), ("PEXPIRE", "{K}", 200000)],
     [("EXISTS", "{K}"), ("TYPE", "{K}")]),
    ("hash", [("HSET", "{K}", "a", 1, "b", 2, "c", 3), ("HINCRBY", "{K}", "a", 10),
              ("HDEL", "{K}", "c")],
     [("HGETALL", "{K}"), ("HGET", "{K}", "a"), ("HLEN", "{K}"), ("HMGET", "{K}", "a", "z"),
      ("HKEYS", "{K}"), ("HEXISTS", "{K}", "b")]),
    ("list", [("RPUSH", "{K}", "a", "b", "c", "d"), ("LPUSH", "{K}", "z"), ("LPOP", "{K}"),
              ("LSET", "{K}", 0, "A")],
     [("LRANGE", "{K}", 0, -1), ("LLEN", "{K}"), ("LINDEX", "{K}", 2), ("LPOS", "{K}", "c")]),
    ("set", [("SADD", "{K}", "a", "b", "c", "d"), ("SREM", "{K}", "d")],
     [("SCARD", "{K}"), ("SISMEMBER", "{K}", "b"), ("SMISMEMBER", "{K}", "a", "x")]),
    ("zset", [("ZADD", "{K}", 1, "a", 2, "b", 3, "c"), ("ZINCRBY", "{K}", 5, "a")],
     [("ZRANGE", "{K}", 0, -1, "WITHSCORES"), ("ZSCORE", "{K}", "a"), ("ZRANK", "{K}", "b"),
      ("ZCARD", "{K}"), ("ZRANGEBYSCORE", "{K}", 2, 10)]),
    ("bits", [("SETBIT", "{K}", 7, 1), ("SETBIT", "{K}", 100, 1)],
     [("BITCOUNT", "{K}"), ("GETBIT", "{K}", 100), ("BITPOS", "{K}", 1)]),
    ("hll", [("PFADD", "{K}", "a", "b", "c", "a")], [("PFCOUNT", "{K}")]),
    ("geo", [("GEOADD", "{K}", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669",
              "Catania")],
     [("GEODIST", "{K}", "Palermo", "Catania", "km"), ("GEOPOS", "{K}", "Palermo")]),
    ("stream", [("XADD", "{K}", "1-1", "f", "v"), ("XADD", "{K}", "2-1", "g", "w")],
     [("XLEN", "{K}"), ("XRANGE", "{K}", "-", "+")]),
]


@R.test
def families_match_the_owning_node(env):
    u = unique("fam").decode()
    with env.proxy.client("cl") as c:
        for name, setup, reads in FAMILIES:
            key = "%s:%s" % (u, name)
            sub = lambda a: tuple(x.replace("{K}", key) if isinstance(x, str) else x for x in a)
            for args in setup:
                got = c.rd(*sub(args))
                check(not isinstance(got, RespError), "%s: %r", sub(args), got)
            for args in reads:
                eq(c.rd(*sub(args)), owner_cmd(env, key, *sub(args)), "%s" % (sub(args),))
            # the value lives on the master of the key's slot, nowhere else
            eq(owner_cmd(env, key, "EXISTS", key), 1, name + " on its master")
            others = [n for n in env.cl.live() if n.hostport() != env.cl.master_of(key).hostport()]
            for n in others:
                with n.client() as d:
                    r = d.rd("EXISTS", key)
                    check(isinstance(r, RespError) or r in (0, 1), "%r", r)
        # scripts: keys of one slot, and none
        k1, k2 = "{%s}a" % u, "{%s}b" % u
        eq(c.rd("EVAL", "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])",
               1, k1, "sv"), b"sv")
        eq(c.rd("EVAL", "return #KEYS", 2, k1, k2), 2)
        eq(c.rd("EVAL", "return 7", 0), 7)
        eq(owner_cmd(env, k1, "GET", k1), b"sv")
        # a write then a read back, over many slots
        for i in range(300):
            eq(c.rd("SET", "%s:w%d" % (u, i), "v%d" % i), "OK")
        for i in range(300):
            k = "%s:w%d" % (u, i)
            eq(owner_cmd(env, k, "GET", k), ("v%d" % i).encode(), k)


@R.test
def multi_key_split_per_slot(env):
    u = unique("mk").decode()
    keys = ["%s:%d" % (u, i) for i in range(60)]
    check(len({keyslot(k) for k in keys}) > 30, "keys over many slots")
    with env.proxy.client("cl") as c:
        args = []
        for i, k in enumerate(keys):
            args += [k, "v%d" % i]
        eq(c.rd("MSET", *args), "OK")
        eq(c.rd("MGET", *(keys + ["%s:missing" % u])), [("v%d" % i).encode() for i in
                                                          range(60)] + [None])
        eq(c.rd("EXISTS", *(keys[:10] + keys[:5])), 15)
        eq(c.rd("TOUCH", *keys[:10]), 10)
        eq(c.rd("DEL", *keys[:20]), 20)
        eq(c.rd("UNLINK", *keys[10:30]), 10)
        eq(c.rd("MGET", *keys[25:35]), [None] * 5 + [("v%d" % i).encode() for i in range(30, 35)])
        for k in keys[30:]:
            eq(owner_cmd(env, k, "EXISTS", k), 1)
        # same slot through a hash tag
        a, b, d = "{%s}a" % u, "{%s}b" % u, "{%s}dst" % u
        eq(c.rd("SADD", a, 1, 2, 3), 3)
        eq(c.rd("SADD", b, 3, 4), 2)
        eq(c.rd("SUNIONSTORE", d, a, b), 4)
        eq(c.rd("MSETNX", "{%s}x" % u, 1, "{%s}y" % u, 2), 1)
        eq(c.rd("RENAME", d, "{%s}moved" % u), "OK")
        eq(owner_cmd(env, a, "SCARD", "{%s}moved" % u), 4)
        # two slots: the cluster's own words, byte for byte
        x, y = "%s:cross1" % u, "%s:cross2" % u
        while keyslot(x) == keyslot(y):
            y += "z"
        for args in (("RENAME", x, y), ("SUNION", x, y), ("MSETNX", x, 1, y, 2),
                     ("EVAL", "return 1", 2, x, y)):
            got = c.rd(*args)
            with env.cl.live()[0].client() as n:
                want = n.rd(*args)
            check(isinstance(got, RespError), "%r: %r", args, got)
            eq(str(got), str(want), "%s" % (args,))


def skeleton(b, pos=0, key=False):
    """(skeleton, end) of the RESP2/RESP3 value at b[pos:]: scalars by their type (a map's
    keys by their text too); an array as the distinct skeletons of its elements in order;
    a map as its keys, each with its value's skeleton. Two replies with the same skeleton
    have the same shape whatever their sizes and values."""
    t = b[pos:pos + 1].decode()
    i = b.index(b"\r\n", pos)
    head = b[pos + 1:i]
    pos = i + 2
    if t in "*~>":
        out = []
        for _ in range(int(head)):
            sk, pos = skeleton(b, pos)
            if sk not in out:
                out.append(sk)
        return (t, tuple(out)), pos
    if t == "%":
        out = []
        for _ in range(int(head)):
            k, pos = skeleton(b, pos, key=True)
            v, pos = skeleton(b, pos)
            out.append((k, v))
        return (t, tuple(out)), pos
    if t in "$=!" and int(head) >= 0:
        n = int(head)
        text = b[pos:pos + n].decode("latin-1")
        pos += n + 2
        return ((t, text) if key else t), pos
    return t, pos


def whole_reply(b):
    """The length of the one whole RESP2/RESP3 value at the start of b, or None."""
    try:
        end = skeleton(bytes(b))[1]
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    return end if end <= len(b) else None


def raw_reply3(addr, *args):
    """One reply's bytes after HELLO 3."""
    with Raw(addr, 5.0) as c:
        c.send(resp_encode("HELLO", "3"))
        c.read_until(whole_reply)
        c.send(resp_encode(*args))
        return c.read_until(whole_reply)


@R.test
def cluster_aware_clients(env):
    host, port = env.proxy.addr("cl")
    with env.proxy.client("cl") as c:
        slots = c.rd("CLUSTER", "SLOTS")
        eq(len(slots), 1)
        eq(slots[0][:2], [0, 16383])
        eq(slots[0][2][:2], [host.encode(), port])
        nid = slots[0][2][2]
        eq(len(nid), 40)
        eq(c.rd("CLUSTER", "MYID"), nid)
        info = c.rd("CLUSTER", "INFO").decode()
        check("cluster_state:ok" in info and "cluster_known_nodes:1" in info, info)
        nodes = c.rd("CLUSTER", "NODES").decode()
        check(nodes.startswith(nid.decode() + " %s:%d@" % (host, port)), nodes)
        check("myself,master" in nodes and "0-16383" in nodes, nodes)
        shards = c.rd("CLUSTER", "SHARDS")
        eq(len(shards), 1)
        check("cluster_enabled:1" in c.rd("INFO", "cluster").decode(), "INFO cluster")
        eq(c.rd("READONLY"), "OK")
        eq(c.rd("READWRITE"), "OK")
        keys = ["%d:%s" % (i, "x" * (i % 7)) for i in range(2000)] + ["{a}b", "c{}d", "{", "}{x}"]
        c.send(b"".join(resp_encode("CLUSTER", "KEYSLOT", k) for k in keys))
        ours = [c.read_resp() for _ in keys]
        with env.cl.live()[0].client() as n:
            n.send(b"".join(resp_encode("CLUSTER", "KEYSLOT", k) for k in keys))
            theirs = [n.read_resp() for _ in keys]
        eq(ours, theirs, "CLUSTER KEYSLOT")
        eq(ours[:5], [keyslot(k) for k in keys[:5]])
    # RESP3 (HELLO 3): the shapes a node gives (maps, verbatim strings, a map of metadata)
    node = env.cl.live()[0]
    for sub in ("SHARDS", "SLOTS", "NODES", "INFO", "MYID"):
        ours, theirs = raw_reply3(env.proxy.addr("cl"), "CLUSTER", sub), \
            raw_reply3(node.addr, "CLUSTER", sub)
        eq(skeleton(ours)[0], skeleton(theirs)[0], "CLUSTER %s in RESP3: %r / %r" % (
            sub, ours[:80], theirs[:80]))
    try:
        sys.path.insert(0, "/usr/lib/python3/dist-packages")
        from redis.cluster import RedisCluster as PyCluster
    except ImportError:
        print("  (redis-py not installed: its RedisCluster not tried)")
        return
    rc = PyCluster(host=host, port=port, socket_timeout=5)
    try:
        u = unique("py").decode()
        for i in range(50):
            rc.set("%s%d" % (u, i), i)
        eq([int(v) for v in rc.mget_nonatomic(["%s%d" % (u, i) for i in range(50)])], list(range(50)))
        eq(rc.mget(["{%s}a" % u, "{%s}b" % u]), [None, None])  # one slot: one MGET
        eq(rc.get("%s7" % u), b"7")
    finally:
        rc.close()


@R.test
def sessions_and_broadcasts(env):
    """Transactions and blocking commands pin to the slot's master ("same server" is "same
    slot" here); KEYS, DBSIZE, RANDOMKEY reach the masters only; SCAN walks the masters."""
    u = unique("ss").decode()
    a, b = "{%s}a" % u, "{%s}b" % u
    x, y = "%s:x" % u, "%s:y" % u
    while keyslot(x) == keyslot(y):
        y += "z"
    with env.proxy.client("cl") as c:
        eq(c.rd("MULTI"), "OK")
        eq(c.rd("SET", a, "1"), "QUEUED")
        eq(c.rd("INCR", b), "QUEUED")
        eq(c.rd("EXEC"), ["OK", 1])
        eq(owner_cmd(env, a, "GET", b), b"1")
        # WATCH + MULTI over two slots: the cluster's words, from the proxy or the node
        eq(c.rd("MULTI"), "OK")
        got = c.rd("MSETNX", x, 1, y, 2)
        check(isinstance(got, RespError) and "CROSSSLOT" in str(got), "%r", got)
        c.rd("DISCARD")
        # a blocking pop woken by a push from another client
        out = {}

        def pop():
            with env.proxy.client("cl") as c2:
                out["r"] = c2.rd("BLPOP", a + ":q", 5)
        t = threading.Thread(target=pop, daemon=True)
        t.start()
        time.sleep(0.2)
        eq(c.rd("RPUSH", a + ":q", "job"), 1)
        t.join(10)
        eq(out.get("r"), [(a + ":q").encode(), b"job"], "BLPOP through a cluster pool")
        # broadcasts: the masters' keys, once each
        total = sum(env.cl.by_addr(m).cmd("DBSIZE") for m in env.cl.masters())
        eq(c.rd("DBSIZE"), total, "DBSIZE over the masters")
        keys = c.rd("KEYS", "{%s}*" % u)
        eq(sorted(keys), sorted([a.encode(), b.encode()]), "KEYS over the masters")
        check(not isinstance(c.rd("RANDOMKEY"), RespError), "RANDOMKEY")
        # SCAN: every master's keys once, none of a replica's copies
        for i in range(300):
            eq(c.rd("SET", "%s:scan:%d" % (u, i), i), "OK")
        want = []
        for m in env.cl.masters():
            want += env.cl.by_addr(m).cmd("KEYS", "%s:scan:*" % u)
        seen, cur, calls = [], 0, 0
        while True:
            got = c.rd("SCAN", cur, "MATCH", "%s:scan:*" % u, "COUNT", 50)
            check(isinstance(got, list) and len(got) == 2, "SCAN %s: %r", cur, got)
            cur = int(got[0])
            seen += got[1]
            calls += 1
            if cur == 0 or calls > 5000:
                break
        eq(len(want), 300, "the masters hold the 300 keys once")
        eq(sorted(seen), sorted(want), "SCAN through the proxy: every master's keys, once")
        check("cursor" in str(c.rd("SCAN", "abc")).lower(), "an invalid cursor refused")
    try:
        import redis as redis_py
    except ImportError:
        return
    host, port = env.proxy.addr("cl")
    r = redis_py.Redis(host=host, port=port, socket_timeout=10)
    try:
        got = sorted(r.scan_iter(match="%s:scan:*" % u, count=100))
    finally:
        r.close()
    eq(got, sorted(want), "redis-py scan_iter through a cluster pool")


# ---------------------------------------------------------------- slots moving

def pool_stats(env, px=None):
    return (px or env.proxy).stats()["cl"]


def ring(env, key, px=None):
    st, body = http((px or env.proxy).admin_port, "GET", "/ring?pool=cl&key=%s" % key)
    eq(st, 200, body)
    return json.loads(body)


def reload_and_refetch(env):
    """POST /reload, then the pool's stats once a map fetch followed it (stats are
    published once a second)."""
    before = pool_stats(env)["cluster_refreshes"]
    deadline = time.monotonic() + patience(5)
    while True:
        # 409 while the workers adopt the snapshot before (a map the last fetch found)
        st, body = http(env.proxy.admin_port, "POST", "/reload")
        if st != 409 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    eq(st, 200, body)
    deadline = time.monotonic() + patience(5)
    while time.monotonic() < deadline:
        after = pool_stats(env)
        if after["cluster_refreshes"] > before:
            return after
        time.sleep(0.2)
    raise AssertionError("no map fetch after a reload: %r" % after["cluster_refreshes"])


@R.test
def stats_ring_and_reload(env):
    # before the map moves: a reload of a steady cluster finds the same map
    st = pool_stats(env)
    nodes = {n.hostport() for n in env.cl.live()}
    for a in nodes:
        check(a in st, "%s in stats", a)
        check(st[a]["role"] in ("master", "replica"), "%r", st[a]["role"])
    eq(sum(st[a]["slots"] for a in nodes if a in st), 16384)
    eq(st["distribution"], "slots")
    eq(st["cluster_state"], "ok")
    check(st["cluster_epoch"] > 0 and st["cluster_refreshes"] >= 1, "%r", st)
    k = "stats-key"
    r = ring(env, k)
    eq(r["slot"], keyslot(k))
    eq(r["owner"], env.cl.map()[keyslot(k)][0])
    eq(r["preference"][0]["role"], "master")
    # a reload fetches the map again. The first one may find a newer map than the start
    # did (a replica is "loading" in CLUSTER SHARDS until its first replication offset,
    # then "online"); a second reload of the same file over a steady cluster keeps the
    # map, its epoch and its checksum.
    reload_and_refetch(env)
    time.sleep(1.5)         # a map that fetch found is published (after the reload's adoption)
    first = pool_stats(env)
    second = reload_and_refetch(env)
    time.sleep(1.5)
    second = pool_stats(env)
    eq(second["epoch"], first["epoch"], "epoch after a reload")
    eq(second["ring_checksum"], first["ring_checksum"], "checksum after a reload")
    with env.proxy.client("cl") as c:
        eq(c.rd("SET", k, "1"), "OK")
    # the fields only a cluster pool has (test_stats leaves them out) are all here
    have = set(second) | set(second[env.cl.live()[0].hostport()])
    missing = sorted(CLUSTER_ONLY_FIELDS - have)
    check(not missing, "cluster fields missing from the document: %s", missing)
    st3, body = http(env.proxy.admin_port, "GET", "/metrics")
    check("ringleader_server_slots{" in body and "ringleader_pool_cluster_epoch{" in body,
          "metrics")


def raw_reply(node, *args):
    """The node's reply to one command, bytes as sent (QUIT after it: read to the end)."""
    with socket.create_connection(node.addr, timeout=10) as sk:
        sk.sendall(resp_encode(*args) + resp_encode("QUIT"))
        data = b""
        deadline = time.monotonic() + patience(10)
        while time.monotonic() < deadline:
            d = sk.recv(1 << 16)
            if not d:
                break
            data += d
    check(data.endswith(b"+OK\r\n"), "QUIT answered: %r", data[-20:])
    return data[:-5]


@R.test
def ring_tool_reads_a_saved_map(env):
    """ringleader-ring --cluster-shards FILE, on a CLUSTER SHARDS (and a CLUSTER SLOTS) reply
    saved from a node, places 2,000 keys as the cluster does: slot, master, replicas."""
    m = env.cl.map()
    keys = ["rt:%d" % i for i in range(2000)] + ["{user1}a", "{user1}b", "x{}y"]
    d = tmpdir()
    for what in ("SHARDS", "SLOTS", "live"):
        if what == "live":          # --cluster HOST:PORT asks the node itself
            how = ["--cluster", env.cl.live()[-1].hostport()]
        else:
            path = os.path.join(d, "cluster-%s.resp" % what.lower())
            with open(path, "wb") as f:
                f.write(raw_reply(env.cl.live()[0], "CLUSTER", what))
            how = ["--cluster-shards", path]
        r = subprocess.run([binary("ringleader-ring")] + how + ["--tsv"],
                           input="\n".join(keys).encode() + b"\n", capture_output=True,
                           timeout=30)
        eq(r.returncode, 0, "ringleader-ring: %s" % r.stderr[-300:])
        got = [line.split(b"\t") for line in r.stdout.splitlines()]
        eq(len(got), len(keys))
        for k, (gk, owner) in zip(keys, got):
            eq(gk.decode(), k)
            eq(owner.decode(), m[keyslot(k)][0], "%s %s" % (what, k))
    r = subprocess.run([binary("ringleader-ring"), "--cluster-shards",
                        os.path.join(d, "cluster-shards.resp"), "--json", "rt:1", "{user1}a"],
                       capture_output=True, timeout=30)
    eq(r.returncode, 0, r.stderr)
    doc = json.loads(r.stdout)
    eq(doc["nodes"], len(env.cl.live()))
    # the checksum of the proxy's map of the same steady cluster (fetched on a reload)
    eq(doc["checksum"], reload_and_refetch(env)["ring_checksum"], "checksum of the map")
    for e in doc["keys"]:
        slot = keyslot(e["key"])
        eq(e["slot"], slot)
        eq(e["master"], m[slot][0])
        eq(sorted(e["replicas"]), sorted(m[slot][1]), "replicas of %s" % e["key"])
    # a node that is not a cluster's, and one that is not there: exit 1 with the reason
    for addr in ("127.0.0.1:%d" % free_port(),):
        r = subprocess.run([binary("ringleader-ring"), "--cluster", addr, "k"],
                           capture_output=True, timeout=30)
        eq(r.returncode, 1)
        check(addr.encode() in r.stderr, "%r", r.stderr)
    # not a map: exit 1 with the reason
    bad = os.path.join(d, "cluster-bad.resp")
    with open(bad, "wb") as f:
        f.write(b"+OK\r\n")
    r = subprocess.run([binary("ringleader-ring"), "--cluster-shards", bad, "k"],
                       capture_output=True, timeout=30)
    eq(r.returncode, 1)
    check(b"not a CLUSTER SHARDS or CLUSTER SLOTS reply" in r.stderr, "%r", r.stderr)
    # --cluster with an ACL user: AUTH user REDISCLI_AUTH first (a user that may only ask
    # CLUSTER and QUIT), the same placement; a wrong password: exit 1, AUTH refused
    node = env.cl.live()[-1]
    eq(node.cmd("ACL", "SETUSER", "ringtool", "on", ">s3cret", "-@all", "+cluster|info",
                "+cluster|shards", "+cluster|slots", "+quit"), "OK")
    try:
        for pw, rc in (("s3cret", 0), ("wrong", 1)):
            r = subprocess.run([binary("ringleader-ring"), "--cluster", node.hostport(),
                                "--cluster-user", "ringtool", "--tsv", "rt:1", "{user1}a"],
                               capture_output=True, timeout=30,
                               env=dict(os.environ, REDISCLI_AUTH=pw))
            eq(r.returncode, rc, "ringleader-ring --cluster-user, password %s: %s" % (
                pw, r.stderr[-300:]))
            if rc == 0:
                eq([line.split(b"\t")[1].decode() for line in r.stdout.splitlines()],
                   [m[keyslot("rt:1")][0], m[keyslot("{user1}a")][0]])
            else:
                check(b"AUTH refused" in r.stderr, "%r", r.stderr)
    finally:
        node.cmd("ACL", "DELUSER", "ringtool")


@R.test
def slot_migrated_by_hand(env):
    cl = env.cl
    m = cl.map()
    src_addr = m[0][0]
    dst = cl.by_addr(next(a for a in cl.masters() if a != src_addr))
    slot = random.Random(7).randrange(0, 5000)
    while m[slot][0] != src_addr:
        slot += 1
    keys = [key_in_slot(slot, "mig%d-" % i) for i in range(5)]
    keys += ["{%s}%d" % (keys[0], i) for i in range(40)]
    # The MGET across the split is retried until its request's deadline (the pool's
    # timeout); the rest of the migration must fit in that, however loaded the machine:
    # its own proxy with a deadline well past it.
    patient = env.start_proxy(timeout=int(1000 * patience(20)))
    before = pool_stats(env)
    before_patient = pool_stats(env, patient)
    with env.proxy.client("cl") as c:
        for k in keys:
            eq(c.rd("SET", k, "old:" + k), "OK")
        scan_cur = int(c.rd("SCAN", 0, "COUNT", 10)[0])    # a walk under way
        check(scan_cur != 0, "a SCAN cursor mid-walk")
        new = []
        pending = []

        def between(i):
            if i == 1:
                # one key moved and one not: the source answers TRYAGAIN until the slot's
                # keys are all moved (then ASK): the proxy retries, the client waits
                def on_dst(k):
                    with dst.client() as d:
                        d.rd("ASKING")
                        return d.rd("EXISTS", k)
                mv = next(k for k in keys if on_dst(k) == 1)
                st = next(k for k in keys if src.cmd("EXISTS", k) == 1)
                out = {}

                def mget():
                    with patient.client("cl", timeout=30) as c2:
                        out["r"] = c2.rd("MGET", mv, st)
                t = threading.Thread(target=mget, daemon=True)
                t.start()
                time.sleep(0.1)
                pending.append((t, out, mv, st))
            # every key of the slot readable, and new ones writable, mid-migration
            for k in keys:
                got = c.rd("GET", k)
                eq(got, ("old:" + k).encode(), "GET %s in batch %d" % (k, i))
            nk = "{%s}new%d" % (keys[0], i)
            eq(c.rd("SET", nk, "n"), "OK", "SET during migration")
            new.append(nk)
            eq(c.rd("MGET", keys[0], keys[1]), [("old:" + keys[0]).encode(),
                                                   ("old:" + keys[1]).encode()])
        src = cl.by_addr(src_addr)
        moved = cl.migrate_slot(slot, dst, batch=8, between=between)
        for t, out, mv, st in pending:
            t.join(patience(30))
            eq(out.get("r"), [("old:" + mv).encode(), ("old:" + st).encode()], "MGET retried")
        check(moved >= len(keys), "moved %d keys", moved)
        cl.wait_ok()
        for k in keys:
            eq(c.rd("GET", k), ("old:" + k).encode(), "after SETSLOT NODE")
        for k in new:
            eq(c.rd("GET", k), b"n")
            eq(dst.cmd("EXISTS", k), 1, "written to the importing node")
    after = pool_stats(env)
    check(after["cluster_ask"] > before["cluster_ask"], "ASK followed: %r", after["cluster_ask"])
    check(after["cluster_tryagain"] > before["cluster_tryagain"] or
          pool_stats(env, patient)["cluster_tryagain"] > before_patient["cluster_tryagain"],
          "TRYAGAIN retried")
    deadline = time.monotonic() + patience(10)
    while time.monotonic() < deadline:
        r = ring(env, keys[0])
        if r["owner"] == dst.hostport():
            break
        time.sleep(0.1)
    eq(r["owner"], dst.hostport(), "/ring after the refresh")
    eq(r["slot"], slot)
    after = pool_stats(env)
    check(after["epoch"] > before["epoch"], "epoch %r -> %r", before["epoch"], after["epoch"])
    check(after["ring_checksum"] != before["ring_checksum"], "checksum changed")
    eq(after[dst.hostport()]["slots"], before[dst.hostport()]["slots"] + 1)
    # the walk's cursor names a node of the old map: refused, not a scan of another node
    with env.proxy.client("cl") as c:
        got = c.rd("SCAN", scan_cur)
    check(isinstance(got, RespError) and "changed during the scan" in str(got),
          "a SCAN cursor from before the map changed: %r", got)


class Traffic:
    """n clients, each writing unique values and reading them back (and an MGET of its last
    keys) until stopped; errors and wrong values are counted with when they happened. With
    `tags`, client keys are "{tag}..." of those tags (slots chosen by the test)."""

    def __init__(self, addr, n=4, mget=True, tags=None):
        self.addr = addr
        self.tags = tags
        self.stop_ev = threading.Event()
        self.errors = []
        self.ops = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i, mget), daemon=True)
                        for i in range(n)]

    def run(self, i, mget):
        u = unique("tr%d" % i).decode()
        seq = 0
        c = None
        while not self.stop_ev.is_set():
            try:
                if c is None:
                    c = Raw(self.addr, 5.0)
                seq += 1
                k = self.key(u, seq)
                v = "%d" % seq
                r = c.rd("SET", k, v)
                if r != "OK":
                    raise AssertionError("SET %s: %r" % (k, r))
                r = c.rd("GET", k)
                if r != v.encode():
                    raise AssertionError("GET %s: %r, wanted %s" % (k, r, v))
                if mget and seq % 5 == 0:
                    ks = [self.key(u, seq - j) for j in range(4)]
                    r = c.rd("MGET", *ks)
                    want = [("%d" % (seq - j)).encode() for j in range(4)]
                    if r != want:
                        raise AssertionError("MGET %r: %r" % (ks, r))
                if mget and self.tags and seq % 5 == 1:
                    # two keys of one slot: a migration in progress answers TRYAGAIN
                    k2 = k + ":pair"
                    r = c.rd("MSET", k, v, k2, v)
                    if r != "OK":
                        raise AssertionError("MSET %s: %r" % (k, r))
                    r = c.rd("MGET", k, k2)
                    if r != [v.encode(), v.encode()]:
                        raise AssertionError("MGET %s pair: %r" % (k, r))
                with self.lock:
                    self.ops += 1
            except Exception as e:  # noqa: BLE001 - every failure is the finding
                with self.lock:
                    self.errors.append((time.monotonic(), "%s" % e, k))
                if c is not None and not isinstance(e, AssertionError):
                    c.close()
                    c = None
                time.sleep(0.01)
        if c is not None:
            c.close()

    def key(self, u, seq):
        if self.tags:
            return "{%s}%s:%d" % (self.tags[seq % len(self.tags)], u, seq % 500)
        return "%s:%d" % (u, seq % 500)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        for t in self.threads:
            t.join(10)

    def wait_ops(self, n, timeout=20):
        deadline = time.monotonic() + patience(timeout)
        start = self.ops
        while self.ops < start + n and time.monotonic() < deadline:
            time.sleep(0.02)
        check(self.ops >= start + n, "traffic stalled at %d ops", self.ops)


def slow():
    if os.environ.get("RL_CLUSTER_SKIP_SLOW"):
        raise Skip("RL_CLUSTER_SKIP_SLOW")


@R.test
def reshard_under_traffic(env):
    slow()
    cl = env.cl
    masters = cl.masters()
    src, dst = cl.by_addr(masters[0]), cl.by_addr(masters[1])
    # redis-cli moves the source's first 500 slots: the clients' keys live there, among
    # 20 keys per slot written first, so that slots move with keys (MIGRATE, ASK)
    moving = sorted(s for s, (m, _) in cl.map().items() if m == src.hostport())[:500]
    tags = tags_for_slots(moving)
    with env.proxy.client("cl") as c:
        batch = []
        for slot, tag in tags.items():
            for j in range(20):
                batch += ["{%s}fill%d" % (tag, j), "x" * 100]
            if len(batch) >= 2000:
                c.send(b"".join(resp_encode("SET", batch[i], batch[i + 1])
                                for i in range(0, len(batch), 2)))
                for _ in range(len(batch) // 2):
                    eq(c.read_resp(), "OK")
                batch = []
        for i in range(0, len(batch), 2):
            eq(c.rd("SET", batch[i], batch[i + 1]), "OK")
    before = pool_stats(env)
    with Traffic(env.proxy.addr("cl"), tags=[tags[s] for s in moving]) as tr:
        tr.wait_ops(200)
        t0 = time.monotonic()
        r = subprocess.run(["redis-cli", "--cluster", "reshard", src.hostport(),
                            "--cluster-from", src.myid(), "--cluster-to", dst.myid(),
                            "--cluster-slots", "500", "--cluster-yes",
                            "--cluster-pipeline", "20"],
                           capture_output=True, timeout=120)
        took = time.monotonic() - t0
        eq(r.returncode, 0, "reshard: %s" % r.stderr[-300:])
        cl.wait_ok()
        tr.wait_ops(200)
    after = pool_stats(env)
    print("  reshard of 500 slots: %.1f s, %d client ops, %d errors, moved %d ask %d tryagain "
          "%d parked %d, epoch %d -> %d" % (
              took, tr.ops, len(tr.errors), after["cluster_moved"] - before["cluster_moved"],
              after["cluster_ask"] - before["cluster_ask"],
              after["cluster_tryagain"] - before["cluster_tryagain"],
              after["cluster_parked"] - before["cluster_parked"], before["epoch"], after["epoch"]))
    eq(tr.errors[:5], [], "client errors during the reshard")
    check(after["epoch"] > before["epoch"], "the map followed")


@R.test
def manual_failover_under_traffic(env):
    slow()
    cl = env.cl
    master = cl.by_addr(cl.masters()[0])
    replica = cl.replicas_of(master)[0]
    with Traffic(env.proxy.addr("cl")) as tr:
        tr.wait_ops(200)
        t0 = time.monotonic()
        eq(replica.cmd("CLUSTER", "FAILOVER"), "OK")
        deadline = time.monotonic() + patience(20)
        while time.monotonic() < deadline and replica.info("replication").get("role") != "master":
            time.sleep(0.05)
        eq(replica.info("replication").get("role"), "master", "promoted")
        promoted = time.monotonic()
        cl.wait_ok()
        tr.wait_ops(300)
    after_promotion = [e for e in tr.errors if e[0] > promoted]
    print("  CLUSTER FAILOVER: promoted after %.2f s; %d client ops, %d errors (%d after the "
          "promotion)" % (promoted - t0, tr.ops, len(tr.errors), len(after_promotion)))
    eq(after_promotion, [], "errors after the promotion")
    check(len(tr.errors) <= 3, "a handful at most during it: %r", tr.errors[:5])


@R.test
def master_killed(env):
    slow()
    cl = env.cl
    victim = cl.by_addr(cl.masters()[1])
    vslots = {s for s, (m, _) in cl.map().items() if m == victim.hostport()}
    # two kinds of clients: keys of the victim's slots, keys of the others'
    u = unique("kill").decode()
    mine = [k for k in ("%s:%d" % (u, i) for i in range(3000)) if keyslot(k) in vslots][:200]
    theirs = [k for k in ("%s:%d" % (u, i) for i in range(3000)) if keyslot(k) not in vslots][:200]
    errs = {"mine": [], "theirs": []}
    ops = {"mine": 0, "theirs": 0}
    stop = threading.Event()

    def run(which, keys):
        c = None
        i = 0
        while not stop.is_set():
            k = keys[i % len(keys)]
            i += 1
            try:
                if c is None:
                    c = Raw(env.proxy.addr("cl"), 5.0)
                r = c.rd("SET", k, str(i))
                if r != "OK":
                    raise AssertionError("SET: %r" % r)
                r = c.rd("GET", k)
                if r != str(i).encode():
                    raise AssertionError("GET: %r" % r)
                ops[which] += 1
            except Exception as e:  # noqa: BLE001
                errs[which].append((time.monotonic(), str(e)))
                if not isinstance(e, AssertionError) and c is not None:
                    c.close()
                    c = None
                time.sleep(0.005)
        if c:
            c.close()
    # each thread its own keys (two writers of one key would race each other)
    ts = [threading.Thread(target=run, args=("mine", mine[j::2]), daemon=True)
          for j in range(2)] + \
         [threading.Thread(target=run, args=("theirs", theirs[j::2]), daemon=True)
          for j in range(2)]
    for t in ts:
        t.start()
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        victim.kill9()
        # the cluster promotes a replica (seen from a live node), the proxy follows
        others = [n for n in cl.live()]
        deadline = time.monotonic() + patience(30)
        promoted = recovered = None
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if promoted is None:
                try:
                    m = slots_map(others[0])
                    if m[min(vslots)][0] != victim.hostport():
                        promoted = time.monotonic()
                except (OSError, EOFError, RespError):
                    pass
            if promoted and errs["mine"] and time.monotonic() - errs["mine"][-1][0] > 1.5 and \
                    errs["mine"][-1][0] > t0:
                recovered = errs["mine"][-1][0]
                break
        check(promoted is not None, "the cluster promoted no replica")
        check(recovered is not None, "errors went on: %r", errs["mine"][-3:])
        n = ops["mine"]
        wait_more = time.monotonic() + patience(5)    # polled: a loaded machine is slow
        while ops["mine"] <= n and time.monotonic() < wait_more:
            time.sleep(0.05)
        check(ops["mine"] > n, "the victim's slots are served again")
    finally:
        stop.set()
        for t in ts:
            t.join(10)
        # the dead node comes back as a replica of its successor (also when a check above
        # failed: the tests after this one need the whole cluster)
        victim.restart()
        cl.wait_ok_or_fix(first=25.0, then=40.0)
    window = recovered - t0
    print("  kill -9 of a master: the cluster promoted its replica after %.2f s (node timeout "
          "1.0 s); errors on its slots for %.2f s (%d errors, the last %.2f s after the "
          "promotion); %d errors on the others' slots in %d ops" % (
              promoted - t0, window, len(errs["mine"]), recovered - promoted,
              len(errs["theirs"]), ops["theirs"]))
    eq(errs["theirs"], [], "errors on the other masters' slots")
    check(recovered - promoted < 1.5, "errors %.2f s after the promotion", recovered - promoted)


def replicated(master, timeout=10.0):
    """Until every online replica of master has acknowledged its whole replication
    stream (WAIT on a connection of its own would count only that connection's writes,
    and it has none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rep = master.info("replication")
        want = int(rep.get("master_repl_offset", "0"))
        offs = [dict(kv.split("=", 1) for kv in v.split(",")).get("offset")
                for k, v in rep.items() if re.match(r"slave\d+$", k)]
        if offs and all(o is not None and int(o) >= want for o in offs):
            return
        time.sleep(0.02)
    raise AssertionError("replicas of %s behind after %.0f s: %r" % (
        master.hostport(), timeout, master.info("replication")))


@R.test
def replicas_serve_reads(env):
    env.cl.wait_ok()
    env.cl.wait_synced()        # every replica (the node killed above is one again)
    px = env.start_proxy(read_from="any-live")
    u = unique("rep").decode()
    keys = ["%s:%d" % (u, i) for i in range(200)]
    with px.client("cl") as c:
        for k in keys:
            eq(c.rd("SET", k, k), "OK")
        for m in env.cl.masters():
            replicated(env.cl.by_addr(m))     # the writes are on the replicas
        # a replica that has just synced is "loading" in CLUSTER SHARDS until the cluster
        # bus carries its offset; the proxy refreshes every second while one is, so the
        # next refresh after the nodes say "online" makes them readable
        deadline = time.monotonic() + patience(15)
        while b"loading" in raw_reply(env.cl.live()[0], "CLUSTER", "SHARDS") and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        n0 = pool_stats(env, px)["cluster_refreshes"]
        while pool_stats(env, px)["cluster_refreshes"] <= n0 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = pool_stats(env, px)
        for _ in range(3):
            for k in keys:
                eq(c.rd("GET", k), k.encode())
        eq(c.rd("MGET", *keys[:50]), [k.encode() for k in keys[:50]])
        eq(c.rd("SET", keys[0], "w"), "OK")
        # sessions pin to the slot's master, never a replica chosen for reading
        tk = "{%s}tx" % u
        eq(c.rd("WATCH", tk), "OK")
        eq(c.rd("MULTI"), "OK")
        eq(c.rd("SET", tk, "1"), "QUEUED")
        eq(c.rd("INCR", tk), "QUEUED")
        eq(c.rd("GET", tk), "QUEUED")
        eq(c.rd("EXEC"), ["OK", 2, b"2"], "a transaction with read_from: any-live")
        eq(env.cl.master_of(tk).cmd("GET", tk), b"2", "run on the master")
        eq(c.rd("RPUSH", tk + ":q", "j"), 1)
        eq(c.rd("BLPOP", tk + ":q", 1), [(tk + ":q").encode(), b"j"], "BLPOP on the master")
    st = pool_stats(env, px)
    by_role = {"master": 0, "replica": 0}
    for node in env.cl.live():
        s = st[node.hostport()]
        by_role[s["role"]] += s["requests"] - before[node.hostport()]["requests"]
    check(by_role["replica"] > 100 and by_role["master"] > 100, "reads spread: %r", by_role)
    # a replica answers a write with MOVED: none came, so no write reached one
    eq(st["cluster_moved"], before["cluster_moved"], "MOVED from a replica")
    for node in env.cl.live():
        if node.info("replication").get("role") == "slave":
            check("cmdstat_readonly" in node.info("commandstats"),
                  "READONLY sent to %s" % node.hostport())
    px.stop()
    env.proxies.remove(px)


@R.test
def proxy_exits_cleanly(env):
    """Last: SIGTERM ends the proxy with status 0 (in the sanitizer build: no leak, no
    error report, with requests parked and maps replaced along the way)."""
    px = env.proxy
    env.proxies.remove(px)
    eq(px.stop(), 0, "exit status; log:\n%s" % px.log_tail(30))


# ---------------------------------------------------------------- nodes that misbehave (mocks)

def _bulk(b):
    return b"$%d\r\n%s\r\n" % (len(b), b)


def mock_node(slots_reply):
    """A mock Redis Cluster node: CLUSTER INFO ok, CLUSTER SHARDS unknown (Redis 6), CLUSTER
    SLOTS answered with slots_reply (a real node cannot be made to name another address)."""
    m = MockBackend.start(protocol="redis")
    m.on_key(b"INFO", garbage(_bulk(b"cluster_state:ok\r\ncluster_current_epoch:1\r\n")))
    m.on_key(b"SHARDS", garbage(b"-ERR unknown subcommand 'shards'. Try CLUSTER HELP.\r\n"))
    m.on_key(b"SLOTS", garbage(slots_reply))
    return m


def slots_reply(*ranges):
    """CLUSTER SLOTS for [(lo, hi, port)], every node at 127.0.0.1."""
    out = b"*%d\r\n" % len(ranges)
    for lo, hi, port in ranges:
        out += b"*3\r\n:%d\r\n:%d\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n" % (lo, hi, port)
    return out


def mock_gets(m):
    return sum(1 for r in m.requests() if r.cmd == b"get")


def mock_fetches(m):
    """Map fetches (each is CLUSTER INFO + SHARDS, then INFO + SLOTS: counted by SLOTS)."""
    return sum(1 for r in m.requests() if r.args[:2] == [b"CLUSTER", b"SLOTS"])


def get_error(px, key):
    """GET key through a new client: its error reply (the test fails on any other)."""
    with px.client("cl") as c:
        got = c.rd("GET", key, timeout=10)
    if isinstance(got, RespError):
        return str(got)
    raise AssertionError("GET %r answered %r, not an error" % (key, got))


def refresh_error_with(px, text, timeout=10):
    """The stats once the pool's cluster_refresh_error holds text (the next refresh may
    come up to 1 s after the request that asked for it)."""
    deadline = time.monotonic() + timeout
    while True:
        st = px.stats()
        if text in st["cl"]["cluster_refresh_error"] or time.monotonic() > deadline:
            check(text in st["cl"]["cluster_refresh_error"], "%r not in %r", text,
                  st["cl"]["cluster_refresh_error"])
            return st
        time.sleep(0.05)


@R.test(ringleader=True)
def map_naming_the_proxy_is_never_dialled(env):
    lport = free_port()
    key = "selfkey"
    node = mock_node(slots_reply((0, 16383, lport)))
    try:
        # the node also sends the key to the proxy's address, as a hostile node could
        node.on_key(key, garbage(b"-MOVED %d 127.0.0.1:%d\r\n" % (keyslot(key), lport)))
        px = Proxy({"cl": {"redis_cluster": True, "timeout": 1000, "cluster_refresh": 1,
                           "listen": "127.0.0.1:%d" % lport,
                           "servers": ["%s:1" % node.hostport()]}}, workers=2)
        env.proxies.append(px)
        accepted0 = px.stats()["total_connections"]
        err = get_error(px, key)
        check(err.startswith("MOVED %d 127.0.0.1:%d" % (keyslot(key), lport)), err)
        time.sleep(2.5)         # on a proxy that dials itself, thousands of hops by now
        st = px.stats()
        # one connection accepted: the test's client; none from the proxy itself
        eq(st["total_connections"] - accepted0, 1, "connections accepted")
        eq(st["cl"]["client_connections"], 0, "clients open")
        eq(mock_gets(node), 1, "GETs the node received")
        check(st["cl"]["cluster_refresh_errors"] >= 1, "no refresh error counted")
        check("which is this proxy" in st["cl"]["cluster_refresh_error"],
              st["cl"]["cluster_refresh_error"])
        eq(st["cl"]["requests"], 1, "requests")
        # a later GET: the same answer, still nothing dialled
        err = get_error(px, key)
        check(err.startswith("MOVED"), err)
        time.sleep(1.0)
        st = px.stats()
        eq(st["total_connections"] - accepted0, 2, "connections accepted")
        eq(st["cl"]["requests"], 2, "requests")
        eq(mock_gets(node), 2, "GETs the node received")
        # refreshes are spaced (1 s apart at most once failing), not a storm
        check(mock_fetches(node) <= 12, "%d map fetches in ~5 s", mock_fetches(node))
        # the stats port is the proxy too
        node.on_key(b"SLOTS", garbage(slots_reply((0, 16383, px.stats_port))))
        err = get_error(px, key)
        st = refresh_error_with(px, "the stats port")
        eq(st["total_connections"] - accepted0, 3, "connections accepted")
        # a name is compared by its addresses: localhost is 127.0.0.1, the pool's listener
        node.on_key(b"SLOTS", garbage(b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\nlocalhost\r\n"
                                      b":%d\r\n" % lport))
        err = get_error(px, key)
        st = refresh_error_with(px, "node localhost:%d, which is this proxy (pool 'cl'" % lport)
        eq(st["total_connections"] - accepted0, 4, "connections accepted")
        # a seed that is the proxy itself fails the reload, which says which seed
        px.pools["cl"]["servers"] = ["%s:1" % node.hostport(), "127.0.0.1:%d:1" % lport]
        with open(px.conf_path, "w") as f:
            f.write(yaml_dump(px.pools))
        os.kill(px.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while px.stats()["cl"]["last_reload"] in ("", "ok") and time.monotonic() < deadline:
            time.sleep(0.05)
        check("seed 127.0.0.1:%d is this proxy itself" % lport in px.stats()["cl"]["last_reload"],
              px.stats()["cl"]["last_reload"])
        time.sleep(1.5)         # a periodic refresh (cluster_refresh: 1) asks the old seeds
        eq(px.stats()["total_connections"] - accepted0, 4, "connections accepted")
        log = open(px.log_file, "rb").read()
        # logged once a minute, not per fetch
        eq(log.count(b"which is this proxy"), 1, "log lines about the map")
        check(log.count(b"slot map refresh failed") <= 1, "failed rounds logged %d times",
              log.count(b"slot map refresh failed"))
        check(len(log) < 16384, "the log grew to %d bytes in ~6 s", len(log))
        eq(px.stop(), 0, "the proxy's exit status (under ASan a leak makes it non-zero)")
    finally:
        node.stop()


@R.test(ringleader=True)
def redirect_loop_between_two_nodes_ends(env):
    a = MockBackend.start(protocol="redis")
    b = MockBackend.start(protocol="redis")
    key = "loopkey"
    slot = keyslot(key)
    try:
        for m in (a, b):
            reply = slots_reply((0, 8191, a.port), (8192, 16383, b.port))
            m.on_key(b"INFO", garbage(_bulk(b"cluster_state:ok\r\ncluster_current_epoch:1\r\n")))
            m.on_key(b"SHARDS", garbage(b"-ERR unknown subcommand 'shards'. Try CLUSTER HELP.\r\n"))
            m.on_key(b"SLOTS", garbage(reply))
        a.on_key(key, garbage(b"-MOVED %d 127.0.0.1:%d\r\n" % (slot, b.port)))
        b.on_key(key, garbage(b"-MOVED %d 127.0.0.1:%d\r\n" % (slot, a.port)))
        px = Proxy({"cl": {"redis_cluster": True, "timeout": 2000, "cluster_refresh": 30,
                           "servers": ["%s:1" % a.hostport()]}}, workers=2)
        env.proxies.append(px)
        err = get_error(px, key)
        check(err.startswith("MOVED %d 127.0.0.1:" % slot), err)
        eq(mock_gets(a) + mock_gets(b), 6, "GETs: the request and 5 redirects")
        st = px.stats()["cl"]
        eq(st["cluster_redirect_limit"], 1, "cluster_redirect_limit")
        eq(st["cluster_moved"], 6, "cluster_moved")
        # the MOVEDs asked for refreshes: a few more (CLUSTER_EVIDENCE_TRIES, spaced 100 ms
        # doubling to 1 s), then none while nothing asks (cluster_refresh: 30): quiet for
        # 1.5 s within 10 s
        fetches, quiet_since, deadline = -1, 0, time.monotonic() + 10
        while time.monotonic() < deadline:
            n = mock_fetches(a) + mock_fetches(b)
            if n != fetches:
                fetches, quiet_since = n, time.monotonic()
            elif time.monotonic() - quiet_since >= 1.5:
                break
            time.sleep(0.1)
        check(time.monotonic() - quiet_since >= 1.5, "map fetches went on: %d", fetches)
        eq(mock_gets(a) + mock_gets(b), 6, "GETs once answered")
        eq(px.stop(), 0, "the proxy's exit status (under ASan a leak makes it non-zero)")
        check(fetches <= 10, "%d map fetches", fetches)
    finally:
        a.stop()
        b.stop()


if __name__ == "__main__":
    R.main(Env)
