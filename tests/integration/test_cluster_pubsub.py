"""test_cluster_pubsub.py: pub/sub through a Redis Cluster pool against a real 3-master
cluster, compared byte for byte with what a cluster-aware client sees talking to the nodes
directly (SUBSCRIBE/PSUBSCRIBE on any one node, SSUBSCRIBE on the slot's master), in RESP2
and RESP3; every message counted: neither lost nor duplicated (a cluster propagates each
PUBLISH to every node, so a pattern placed on each node would arrive once per node)."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import time

from harness import Proxy, Runner, Skip, check, eq, free_port, unique  # noqa: E402
from cluster_harness import RedisCluster, keyslot  # noqa: E402
from harness import resp3_end  # noqa: E402
from test_pubsub import Conn  # noqa: E402

R = Runner("test_cluster_pubsub", per_test_timeout=40, total_timeout=120)


class Env(harness.Env):
    LOG_LINES = 40

    def __init__(self):
        if subprocess.run(["which", "redis-cli"], capture_output=True).returncode != 0:
            raise Skip("redis-cli not installed")
        self.cl = RedisCluster.start(masters=3, replicas=1)
        pool = {"redis_cluster": True, "timeout": 3000, "cluster_refresh": 30,
                "servers": ["%s:1" % n.hostport() for n in self.cl.nodes[:2]]}
        self.proxy = Proxy({"cl": pool}, workers=2,
                           glob={"admin": "127.0.0.1:%d" % free_port()})
        self.paddr = self.proxy.addr("cl")
        self.more_backends = [self.cl]

    def conn(self, addr, resp):
        c = Conn(addr)
        if resp == 3:
            h = c.cmd("HELLO", "3")
            check(h.startswith(b"%7\r\n"), "HELLO 3: %r" % h[:40])
        return c

    def node(self, i):
        return self.cl.by_addr(self.cl.masters()[i])

    def master_of(self, name):
        return self.cl.master_of(name)


def drain(c, secs=0.3):
    """Every reply that arrives until nothing comes for secs."""
    out = []
    while True:
        try:
            out.append(c.raw.read_until(lambda b: resp3_end(b, 0), secs))
        except TimeoutError:
            return out


def channels_in_every_master(env, p, n):
    """n channel names whose slots are served by every master in turn."""
    by_master = {}
    i = 0
    while sum(len(v) for v in by_master.values()) < n:
        ch = "%s:c%d" % (p, i)
        i += 1
        m = env.master_of(ch).hostport()
        if len(by_master.setdefault(m, [])) < (n + 2) // 3:
            by_master[m].append(ch)
    return [ch for v in by_master.values() for ch in v]


def subscriber_script(env, c, chans, pats, publish):
    """Subscribe, have `publish` send, read every message; the transcript."""
    t = [c.cmd("SUBSCRIBE", *chans[:2])]
    t.append(c.read())                              # the second confirmation
    c.send("SUBSCRIBE", *chans[2:])
    t += c.reads(len(chans) - 2)
    c.send("PSUBSCRIBE", *pats)
    t += c.reads(len(pats))
    t.append(c.cmd("SUBSCRIBE", chans[0]))          # again: count unchanged
    t.append(c.cmd("PING"))
    sent = publish()
    msgs = c.reads(sent)
    extra = drain(c)
    return t, msgs, extra


@R.test
def channels_and_patterns_exactly_once(env):
    for resp in (2, 3):
        p = unique("ps%d" % resp).decode()
        chans = channels_in_every_master(env, p, 6)
        pats = ["%s:c1*" % p, "%s:*" % p]
        pubs = [env.node(i).client() for i in range(3)]

        def publish():
            # from every master in turn, as cluster clients publish: each channel's message
            # reaches every subscriber of it on every node (the cluster's bus)
            n = 0
            for k, ch in enumerate(chans + ["%s:other" % p]):
                pubs[k % 3].rd("PUBLISH", ch, "m%d" % k)
                n += (ch in chans) + sum(1 for q in pats if ch.startswith(q[:-1]))
            return n

        got = []
        for addr in (env.paddr, env.node(1).addr):
            c = env.conn(addr, resp)
            try:
                got.append(subscriber_script(env, c, chans, pats, publish))
                # counts as one node reports them, and leaving subscribed mode
                c.send("UNSUBSCRIBE")
                uns = c.reads(len(chans))
                # Redis's order is its hash table's: names and counts compared as sets
                uns = (sorted(u[:u.rindex(b":")] for u in uns),
                       sorted(u[u.rindex(b":"):] for u in uns))
                c.send("PUNSUBSCRIBE")
                puns = c.reads(len(pats))
                got[-1] += (uns, puns, c.cmd("PING"), drain(c))
            finally:
                c.close()
        (tp, mp, xp, up, pp, pingp, dp), (td, md, xd, ud, pd, pingd, dd) = got
        eq(tp, td, "RESP%d confirmations and counts" % resp)
        eq(xp, [], "RESP%d: no message twice through the proxy" % resp)
        eq(xd, [], "RESP%d: direct" % resp)
        eq(sorted(mp), sorted(md), "RESP%d: the same messages" % resp)
        check(len(mp) == 6 + 6 + 2, "14 messages: %d" % len(mp))
        # (no order across channels: a node delivers its own PUBLISH at once and the others'
        # when the cluster bus brings them, also to a direct subscriber)
        eq(up, ud, "RESP%d mass UNSUBSCRIBE (sorted)" % resp)
        eq(pp, pd, "RESP%d PUNSUBSCRIBE: subscription order" % resp)
        eq(pingp, pingd, "PING after leaving subscribed mode")
        eq(dp, [], "nothing after")
        for c in pubs:
            c.close()
        print("  RESP%d: %d messages once each, confirmations identical" % (resp, len(mp)))


@R.test
def shard_channels_by_slot(env):
    for resp in (2, 3):
        p = unique("sh%d" % resp).decode()
        a, b = "{%s}a" % p, "{%s}b" % p
        other = next("%s:x%d" % (p, i) for i in range(100)
                     if keyslot("%s:x%d" % (p, i)) != keyslot(a))
        owner = env.master_of(a)
        got = []
        pub = owner.client()
        for addr in (env.paddr, owner.addr):
            c = env.conn(addr, resp)
            try:
                t = [c.cmd("SSUBSCRIBE", a, other)]            # CROSSSLOT, nothing changed
                t.append(c.cmd("SSUBSCRIBE", a))
                c.send("SSUBSCRIBE", a, b)
                t += c.reads(2)
                t.append(c.cmd("SSUBSCRIBE", a, other))        # again, while subscribed
                t.append(c.cmd("SUNSUBSCRIBE", a, other))
                n = pub.rd("SPUBLISH", a, "one")
                pub.rd("SPUBLISH", b, "two")
                pub.rd("SPUBLISH", "{%s}c" % p, "none")
                t += c.reads(2)
                t.append(drain(c))
                t.append(c.cmd("SUNSUBSCRIBE", b))
                c.send("SUNSUBSCRIBE")
                t += c.reads(1)
                t.append(c.cmd("PING"))
                got.append((t, n))
            finally:
                c.close()
        pub.close()
        eq(got[0][0], got[1][0], "RESP%d shard transcript" % resp)
        check(got[0][0][0].startswith(b"-CROSSSLOT Keys in request don't hash to the same slot"),
              "CROSSSLOT: %r" % got[0][0][0])
        eq(got[0][1], 1, "the proxy's subscription was on the slot's master")
        print("  RESP%d: SSUBSCRIBE on the slot's master, CROSSSLOT as the node says" % resp)


@R.test
def spublish_and_pubsub_counts(env):
    p = unique("cnt").decode()
    a = "{%s}s" % p
    chans = channels_in_every_master(env, p, 3)
    sub = env.conn(env.paddr, 2)
    px = env.conn(env.paddr, 2)
    try:
        sub.send("SUBSCRIBE", *chans)
        sub.reads(len(chans))
        sub.send("PSUBSCRIBE", p + ":*", p + ":c*")
        sub.reads(2)
        sub.send("SSUBSCRIBE", a)
        sub.reads(1)
        # SPUBLISH through the proxy goes to the slot's master: 1 receiver
        eq(px.cmd("SPUBLISH", a, "v"), b":1\r\n")
        eq(sub.read()[-4:], b"\nv\r\n")
        # PUBLISH through the proxy (to the channel's slot master): the cluster's bus
        # delivers it to the subscriber wherever it is; the count is that node's
        # (the patterns are on the node of the first one's slot)
        local = 1 + (2 if env.master_of(p + ":*").hostport() == env.master_of(chans[0]).hostport()
                     else 0)
        eq(px.cmd("PUBLISH", chans[0], "w"), b":%d\r\n" % local, "that node's receivers")
        msgs = sub.reads(3)
        eq(drain(sub), [], "each once")
        check(all(b"\nw\r\n" in m for m in msgs), "%r" % msgs)
        eq(px.cmd("PUBSUB", "NUMSUB", *chans),
           b"*6\r\n" + b"".join(b"$%d\r\n%s\r\n:1\r\n" % (len(ch), ch.encode()) for ch in chans))
        eq(px.cmd("PUBSUB", "SHARDNUMSUB", a), b"*2\r\n$%d\r\n%s\r\n:1\r\n" % (len(a), a.encode()))
        eq(px.cmd("PUBSUB", "NUMPAT"), b":2\r\n", "the client's two patterns, once")
        ch = px.cmd("PUBSUB", "CHANNELS", p + ":*")
        for c in chans:
            check(c.encode() in ch, "CHANNELS lists %s: %r" % (c, ch))
        check(a.encode() in px.cmd("PUBSUB", "SHARDCHANNELS", "{%s}*" % p), "SHARDCHANNELS")
    finally:
        sub.close()
        px.close()


def as_sets(replies):
    """(un)subscribe confirmations in an order Redis leaves to its tables: names and counts
    compared as sets."""
    return (sorted(u[:u.rindex(b":")] for u in replies), sorted(u[u.rindex(b":"):] for u in replies))


def wait_epoch(env, before, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if env.proxy.stats()["cl"]["epoch"] > before:
            return
        time.sleep(0.02)
    raise AssertionError("the proxy's map did not follow within %.0f s" % timeout)


@R.test
def shard_channel_moved_ends_in_sunsubscribe(env):
    """A slot migrated, then its new master demoted by CLUSTER FAILOVER: each time the node
    that loses the slot ends the shard subscriptions with `sunsubscribe` (Redis 7.0); the
    client through the proxy sees just that, keeps its other subscriptions, and may
    SSUBSCRIBE again at once, on the slot's new master."""
    p = unique("mv").decode()
    a, b, plain = "{%s}a" % p, "{%s}b" % p, "%s:plain" % p
    slot = keyslot(a)
    src = env.master_of(a)
    dst = env.cl.by_addr(next(m for m in env.cl.masters() if m != src.hostport()))
    subs = []                   # (resp, through the proxy?, conn)
    for resp in (2, 3):
        for addr in (env.paddr, src.addr):
            c = env.conn(addr, resp)
            c.send("SSUBSCRIBE", a, b)
            c.reads(2)
            eq(c.cmd("SUBSCRIBE", plain)[-4:], b":1\r\n")
            subs.append((resp, addr == env.paddr, c))
    try:
        epoch = env.proxy.stats()["cl"]["epoch"]
        before = env.proxy.stats()["cl"]["pubsub_dropped"]
        env.cl.migrate_slot(slot, dst)
        got = {}
        for resp, via, c in subs:
            got[(resp, via)] = as_sets(c.reads(2))
        for resp in (2, 3):
            eq(got[(resp, True)], got[(resp, False)], "RESP%d sunsubscribe on migration" % resp)
            check(b"sunsubscribe" in got[(resp, True)][0][0], "%r" % (got[(resp, True)],))
        eq(env.proxy.stats()["cl"]["pubsub_dropped"] - before, 4, "stat pubsub_dropped")
        # the plain channel was kept, on every subscriber, once
        with env.cl.by_addr(env.cl.masters()[2]).client() as pub:
            pub.rd("PUBLISH", plain, "still")
        for resp, via, c in subs:
            m = c.read()
            check(m.endswith(b"$5\r\nstill\r\n"), "RESP%d kept %s: %r" % (resp, plain, m))
            eq(drain(c, 0.1), [], "once")
        # SSUBSCRIBE again: through the proxy, once its map followed (asked by the
        # sunsubscribe), to the new master, as a cluster client would after its refresh
        wait_epoch(env, epoch)
        direct = []
        for resp, via, c in subs:
            if via:
                r = c.cmd("SSUBSCRIBE", a)
                d = env.conn(dst.addr, resp)
                eq(r, d.cmd("SSUBSCRIBE", a), "RESP%d SSUBSCRIBE again" % resp)
                direct.append((resp, d))
        with dst.client() as pub:
            eq(pub.rd("SPUBLISH", a, "moved"), 4, "the proxy's 2 subscriptions are on the new master")
        for resp, via, c in subs:
            if via:
                check(c.read().endswith(b"$5\r\nmoved\r\n"), "smessage")
                eq(drain(c, 0.1), [], "once")
        for resp, d in direct:
            d.read()
        # the new master demoted: its replica takes the slot, the demoted node unsubscribes
        replica = env.cl.replicas_of(dst)[0]
        epoch = env.proxy.stats()["cl"]["epoch"]
        eq(replica.cmd("CLUSTER", "FAILOVER"), "OK")
        for resp, via, c in subs:
            if via:
                want = direct.pop(0)[1].read(timeout=10)
                eq(c.read(timeout=10), want, "RESP%d sunsubscribe on failover" % resp)
                eq(c.cmd("PING"), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n" if resp == 2 else b"+PONG\r\n",
                   "still subscribed to %s" % plain)
        env.cl.wait_ok()
        print("  migration and failover: sunsubscribe as the node sends it; the rest kept")
    finally:
        for _, _, c in subs:
            c.close()


@R.test
def proxy_exits_cleanly(env):
    eq(env.proxy.stop(), 0, "exit status; log:\n%s" % env.proxy.log_tail(30))


if __name__ == "__main__":
    R.main(Env)
