"""test_cluster_tls.py: a redis_cluster pool with server_tls in front of a real TLS-only Redis Cluster (3 masters, 3 replicas) started by the test.

Every node listens on TLS only (--port 0 --tls-port P --tls-cluster yes --tls-replication yes,
client certificates required); the cluster is created with redis-cli --tls --cluster create
and the replicas sync over TLS.
Certificates come from test_tls.py's Certs (openssl CLI): nodes carry the backend certificate
(IP:127.0.0.1, DNS:localhost, DNS:cache.internal), the proxy presents the client one.

  tls_map_and_data_path      the slot map is fetched over TLS from the seeds (two of the three
      nodes configured: the four others are learnt from the map), SET/GET/MGET through the proxy,
      every value read back on the node that owns its slot (differential: MGET equals the
      owners' GETs), TLS handshakes counted on every master, no refresh error.
  server_name_for_every_node server_tls.server_name is the name every node's certificate is
      verified against (the map's addresses are IPs): cache.internal works, a name the
      certificates lack is refused for the fetch and for the data path.
  moved_after_slot_moves     a slot migrated by hand (MIGRATE over the nodes' TLS): reads of
      its keys follow the MOVED over TLS and the map refresh (over TLS) names the new owner.
  untrusted_node_refused     server_tls.ca of another CA: the fetch fails with "certificate
      verify failed" (cluster_refresh_error), a request gets "tls: certificate verify
      failed", the verify failure is counted, as for a plain pool's TLS server.
  clean_exit                 the proxy exits 0 (under ASan: no leak)
"""

import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Proxy, RespError, Runner, Skip, check, eq, free_port, http  # noqa: E402
from cluster_harness import NodeTls, RedisCluster, key_in_slot, keyslot  # noqa: E402
from test_tls import Certs, TlsRaw, client_ctx, dump  # noqa: E402

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_cluster_tls", per_test_timeout=40, total_timeout=120)



class Env(harness.Env):
    LOG_LINES = 40

    def __init__(self):
        for tool in ("openssl", "redis-server", "redis-cli"):
            if shutil.which(tool) is None:
                raise Skip("%s is not installed" % tool)
        self.certs = c = Certs()
        ctx = client_ctx(c, c.backend)

        def connect(addr, timeout):
            return TlsRaw(addr, ctx, timeout)
        try:
            self.cl = RedisCluster.start(masters=3, replicas=1,
                                         tls=NodeTls(c.backend[0], c.backend[1], c.ca, connect))
        except Exception as e:
            if "TLS" in str(e) or "tls" in str(e):
                raise Skip("redis-server without TLS: %s" % e)
            raise
        self.more_backends = [self.cl]
        seeds = ["%s:1" % n.hostport() for n in self.cl.nodes[:2]]
        with_cert = {"ca": c.ca, "cert": c.client[0], "key": c.client[1]}

        def pool(refresh=30, **server_tls):
            return {"redis_cluster": True, "timeout": 3000, "cluster_refresh": refresh,
                    "servers": seeds, "server_tls": dict(with_cert, **server_tls)}
        self.pools = {
            # only events refresh "cl"'s map (and, while a node is loading, a refresh
            # every second: map_settled): a refresh landing between a slot's move and the
            # first request after it (a loaded run) would leave no MOVED to follow in
            # moved_after_slot_moves
            "cl": pool(refresh=0),
            "cl_named": pool(server_name="cache.internal"),
            "cl_badname": pool(server_name="elsewhere.internal"),
            "cl_wrongca": pool(ca=c.evil_ca),
        }
        self.admin = free_port()
        self.proxy = Proxy(self.pools, dump=dump, workers=2,
                           glob={"admin": "127.0.0.1:%d" % self.admin})

    def stats(self, pool="cl"):
        return self.proxy.stats()[pool]


def node_stats(st, hostport):
    return st[hostport]


@R.test(ringleader=True)
def tls_map_and_data_path(env):
    cl = env.cl
    st = env.stats()
    eq(st["cluster_refresh_error"], "", "no refresh error")
    check(st["cluster_refreshes"] >= 1, "a map fetched: %r" % st["cluster_refreshes"])
    for n in cl.nodes:     # four of the six are known from the map fetched over TLS
        check(n.hostport() in st, "node %s in the pool: %r" % (n.hostport(), sorted(st)))
    keys = ["tk%d" % i for i in range(60)]
    slots = {keyslot(k) for k in keys}
    check(len({cl.map()[s][0] for s in slots}) == 3, "the keys span the 3 masters")
    with env.proxy.client("cl") as c:
        for k in keys:
            eq(c.rd("SET", k, "v:" + k), "OK", "SET %s" % k)
        for k in keys:
            eq(c.rd("GET", k), ("v:" + k).encode(), "GET %s" % k)
        direct = [cl.master_of(k).cmd("GET", k) for k in keys]
        eq(direct, [("v:" + k).encode() for k in keys], "each value on its slot's master")
        eq(c.rd("MGET", *keys), direct, "MGET through the proxy equals the owners' GETs")
        eq(c.rd("DEL", *keys[:30]), 30)
        eq(c.rd("MGET", keys[0], keys[59]), [None, ("v:" + keys[59]).encode()])
    st = env.stats()
    for a in cl.masters():
        ns = node_stats(st, a)
        check(ns["tls_handshakes"] >= 1, "handshakes with %s: %r" % (a, ns))
        eq(ns["tls_verify_failures"], 0)


@R.test(ringleader=True)
def server_name_for_every_node(env):
    with env.proxy.client("cl_named") as c:
        for i in range(20):
            k = "named%d" % i
            eq(c.rd("SET", k, "n"), "OK")
            eq(env.cl.master_of(k).cmd("GET", k), b"n", "on the owner")
    st = env.stats("cl_named")
    eq(st["cluster_refresh_error"], "")
    for n in env.cl.nodes:
        check(n.hostport() in st, "node %s learnt from the map" % n.hostport())
    with env.proxy.client("cl_badname") as c:
        r = c.rd("GET", "x")
        check(isinstance(r, RespError) and "certificate verify failed" in str(r),
              "a name no certificate carries: %r" % r)
    st = env.stats("cl_badname")
    check("certificate verify failed" in st["cluster_refresh_error"],
          "the fetch refused: %r" % st["cluster_refresh_error"])


def _flat(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flat(y)
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _flat(k)
            yield from _flat(v)
    else:
        yield x


def map_settled(env):
    """Until "cl"'s map can change only by an event: no node "loading" in CLUSTER SHARDS (a
    replica that has just synced is, and the proxy refreshes every second while its map
    shows one, cluster_refresh: 0 or not), and the proxy's refreshes quiet since."""
    deadline = time.monotonic() + patience(30)
    while time.monotonic() < deadline:
        shards = env.cl.live()[0].cmd("CLUSTER", "SHARDS")
        if not any(v in (b"loading", "loading") for v in _flat(shards)):
            break
        time.sleep(0.1)
    # its last refresh may have seen a node loading: one more comes within a second
    seen, quiet_since = env.stats()["cluster_refreshes"], time.monotonic()
    while time.monotonic() - quiet_since < 2.5 and time.monotonic() < deadline:
        time.sleep(0.2)
        now = env.stats()["cluster_refreshes"]
        if now != seen:
            seen, quiet_since = now, time.monotonic()


@R.test(ringleader=True)
def moved_after_slot_moves(env):
    cl = env.cl
    map_settled(env)
    m = cl.map()
    slot = keyslot("movetag")
    src_addr = m[slot][0]
    dst = cl.by_addr(next(a for a in cl.masters() if a != src_addr))
    keys = ["{movetag}%d" % i for i in range(10)] + [key_in_slot(slot, "mv")]
    before = env.stats()
    with env.proxy.client("cl") as c:
        for k in keys:
            eq(c.rd("SET", k, "m:" + k), "OK")
        moved = cl.migrate_slot(slot, dst, batch=5)
        check(moved == len(keys), "moved %d keys" % moved)
        cl.wait_ok()
        for k in keys:
            eq(c.rd("GET", k), ("m:" + k).encode(), "GET %s after the move" % k)
            eq(dst.cmd("GET", k), ("m:" + k).encode(), "on the new owner")
        eq(c.rd("SET", keys[0], "new"), "OK")
        eq(dst.cmd("GET", keys[0]), b"new")
    deadline = time.monotonic() + patience(10)
    r = None
    while time.monotonic() < deadline:
        stc, body = http(env.admin, "GET", "/ring?pool=cl&key=%s" % keys[-1])
        eq(stc, 200, body)
        r = json.loads(body)
        if r["owner"] == dst.hostport():
            break
        time.sleep(0.1)
    eq(r["owner"], dst.hostport(), "/ring after the refresh")
    # counters are gathered on a tick that a loaded machine delays: wait for it, bounded
    deadline = time.monotonic() + patience(10)
    after = env.stats()
    while (after["cluster_moved"] <= before["cluster_moved"] or
           after["cluster_refreshes"] <= before["cluster_refreshes"]) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
        after = env.stats()
    check(after["cluster_moved"] > before["cluster_moved"], "MOVED followed")
    check(after["cluster_refreshes"] > before["cluster_refreshes"], "the map refreshed")
    eq(after["cluster_refresh_error"], "", "the refresh over TLS")
    check(after["epoch"] > before["epoch"], "a new ring")


@R.test(ringleader=True)
def untrusted_node_refused(env):
    with env.proxy.client("cl_wrongca") as c:
        r = c.rd("GET", "x")
        check(isinstance(r, RespError) and "certificate verify failed" in str(r),
              "an untrusted node: %r" % r)
        eq(c.rd("PING"), "PONG", "the proxy itself answers")
    with env.proxy.client("cl") as c:     # other pools untouched
        eq(c.rd("SET", "other", "1"), "OK")
    st = env.stats("cl_wrongca")
    check("certificate verify failed" in st["cluster_refresh_error"],
          "the fetch refused: %r" % st["cluster_refresh_error"])
    check(st["cluster_refresh_errors"] >= 1, "counted")
    fails = sum(v.get("tls_verify_failures", 0) for v in st.values() if isinstance(v, dict))
    check(fails >= 1, "a verify failure counted on a node: %r" % st)


@R.test(ringleader=True)
def clean_exit(env):
    rc = env.proxy.stop()
    eq(rc, 0, "the proxy's exit status (under ASan a leak makes it non-zero); log:\n%s"
       % env.proxy.log_tail(30))


if __name__ == "__main__":
    R.main(Env)
