"""test_pubsub.py: Redis pub/sub and RESP3 through the proxy against 4 redis-servers, each
behaviour run twice, through the proxy and against one redis-server directly, in RESP2 and
in RESP3, and required to give the same bytes (modulo what is server-specific: HELLO's
server, version and id; the order of a mass UNSUBSCRIBE, which is Redis's hash table's)."""

import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Proxy, Raw, Redis, RedisPoolEnv, Runner, Skip, check,  # noqa: E402
                     eq, owners, resp_encode, sanitized, server_lines, unique, NAMES)

from harness import patience, resp3_end  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_pubsub", per_test_timeout=40, total_timeout=150)


# ---------------------------------------------------------------- RESP2 and RESP3 replies

class Conn:
    """A raw client that reads whole RESP2/RESP3 replies as bytes."""

    def __init__(self, addr, timeout=10):
        self.raw = Raw(addr, timeout)

    def close(self):
        self.raw.close()

    def send(self, *args):
        self.raw.send(resp_encode(*args))

    def read(self, timeout=None):
        return self.raw.read_until(lambda b: resp3_end(b, 0), timeout)

    def cmd(self, *args):
        self.send(*args)
        return self.read()

    def reads(self, n, timeout=None):
        return [self.read(timeout) for _ in range(n)]

    def quiet(self, secs=0.2):
        """True when nothing arrives for secs."""
        try:
            self.raw.read_until(lambda b: 1 if b else None, secs)
            return False
        except TimeoutError:
            return True


def hello_fields_normalized(reply):
    """HELLO's reply with the server-specific values (server, version, id) blanked."""
    out = reply
    for field in (b"server", b"version", b"id"):
        key = b"$%d\r\n%s\r\n" % (len(field), field)
        i = out.find(key)
        if i < 0:
            continue
        j = i + len(key)
        end = resp3_end(out, j)
        out = out[:j] + b"<x>" + out[end:]
    return out


class Env(RedisPoolEnv):
    def __init__(self):
        super().__init__()
        if self.external:
            raise Skip("needs its own backends and a reference redis-server")
        self.ref = Redis.start()            # the one server the proxy is compared with
        self.more_backends.append(self.ref)
        self.paddr = self.proxy.addr()

    def pair(self, resp=2):
        """A (proxy, direct) pair of connections in protocol `resp`."""
        out = []
        for addr in (self.paddr, self.ref.addr):
            c = Conn(addr)
            if resp == 3:
                h = c.cmd("HELLO", "3")
                check(h.startswith(b"%7\r\n"), "HELLO 3: %r" % h[:40])
            out.append(c)
        return out


def both(env, resp, script):
    """Run script(conn) through the proxy and directly; return both transcripts."""
    res = []
    for c in env.pair(resp):
        try:
            res.append(script(c))
        finally:
            c.close()
    return res


def same(got, want, what):
    if got != want:
        for i, (a, b) in enumerate(zip(got, want)):
            if a != b:
                raise AssertionError("%s: step %d differs:\n proxy  %r\n direct %r" % (what, i, a, b))
        raise AssertionError("%s: %d steps through the proxy, %d direct" % (what, len(got), len(want)))


# ---------------------------------------------------------------- subscribed mode

@R.test(ringleader=True)
def confirmations_counts_and_subscribed_mode(env):
    p = unique().decode()
    chans = ["%s:c%d" % (p, i) for i in range(12)]      # spread over the 4 servers

    def script(c):
        t = []
        c.send("SUBSCRIBE", *chans[:6])
        t += c.reads(6)
        c.send("SUBSCRIBE", chans[0], chans[6], chans[6])   # a repeat, a new one twice
        t += c.reads(3)
        c.send("PSUBSCRIBE", p + ":c1*", p + ":x?")
        t += c.reads(2)
        c.send("SSUBSCRIBE", "{%s}s1" % p, "{%s}s2" % p)
        t += c.reads(2)
        t.append(c.cmd("PING"))
        t.append(c.cmd("PING", "hi"))
        t.append(c.cmd("GET", p))             # RESP2: refused in this context
        t.append(c.cmd("CLIENT", "ID") if resp == 2 else b"-")
        c.send("UNSUBSCRIBE", chans[1], "nosuch")
        t += c.reads(2)
        c.send("PUNSUBSCRIBE", p + ":x?")
        t += c.reads(1)
        c.send("SUNSUBSCRIBE")
        mass = c.reads(2)
        t.append(sorted(m.split(b"\r\n")[4] for m in mass))
        t.append([m.rsplit(b":", 1)[1] for m in mass])
        t.append(c.cmd("PUNSUBSCRIBE"))
        # mass unsubscribe: Redis's order is its hash table's; the counts still fall by one
        c.send("UNSUBSCRIBE")
        mass = c.reads(6)
        t.append(sorted(m.split(b"\r\n")[4] for m in mass))
        t.append([m.rsplit(b":", 1)[1] for m in mass])
        t.append(c.cmd("UNSUBSCRIBE"))        # nothing left: a null name, count 0
        t.append(c.cmd("PING"))               # an ordinary client again
        t.append(c.cmd("GET", p))
        return t

    for resp in (2, 3):
        got, want = both(env, resp, script)
        same(got, want, "RESP%d" % resp)
    st = env.proxy.stats()
    eq(st["rd"]["pubsub_clients"], 0, "no subscriber left")


@R.test(ringleader=True)
def publish_reaches_every_kind_of_subscriber(env):
    p = unique().decode()
    chans = ["%s:n%d" % (p, i) for i in range(16)]

    def run(addr_resp):
        subs, pub = [], None
        try:
            for addr, resp in addr_resp:
                c = Conn(addr)
                if resp == 3:
                    c.cmd("HELLO", "3")
                subs.append(c)
            a, b, s = subs
            a.send("SUBSCRIBE", *chans)
            a.reads(len(chans))
            b.send("PSUBSCRIBE", p + ":n1*", p + ":*")
            b.reads(2)
            s.send("SSUBSCRIBE", *["{%s}%d" % (p, i) for i in range(3)])
            s.reads(3)
            pub = Conn(addr_resp[0][0])
            t = []
            for i, ch in enumerate(chans):
                t.append(pub.cmd("PUBLISH", ch, "m%d" % i))
            t.append(pub.cmd("PUBLISH", p + ":other", "x"))
            t.append(pub.cmd("SPUBLISH", "{%s}1" % p, "sharded"))
            t.append(pub.cmd("SPUBLISH", "{%s}9" % p, "nobody"))
            # each subscriber's messages as a set: messages from different servers may
            # interleave either way, and one PUBLISH matching two patterns delivers them in
            # its server's pattern table order (per-server order: the next test)
            t.append(sorted(a.reads(len(chans))))
            # every n* and :other for p:*, and the :n1* matches (n1, n10..n15): all of them,
            # or which ones come first would depend on how the servers' messages interleave
            n1 = sum(1 for ch in chans if ch.startswith(p + ":n1"))
            t.append(sorted(b.reads(len(chans) + 1 + n1)))
            t.append(s.reads(1))
            t.append(a.quiet() and b.quiet() and s.quiet())
            # introspection with these subscribers in place
            t.append(pub.cmd("PUBSUB", "NUMSUB", chans[0], chans[5], "nosuch"))
            t.append(pub.cmd("PUBSUB", "NUMPAT"))
            t.append(pub.cmd("PUBSUB", "SHARDNUMSUB", "{%s}0" % p))
            t.append(pub.cmd("PUBSUB", "NUMSUB"))
            lst = pub.cmd("PUBSUB", "CHANNELS", p + ":n*")
            t.append(sorted(lst.split(b"\r\n")[2::2]))
            return t
        finally:
            for c in subs + ([pub] if pub else []):
                c.close()

    for resp in (2, 3):
        got = run([(env.paddr, resp)] * 3)
        want = run([(env.ref.addr, resp)] * 3)
        same(got, want, "RESP%d" % resp)


@R.test(ringleader=True)
def messages_keep_their_place_among_replies(env):
    """RESP3: a subscriber runs commands while messages arrive; each server's messages keep
    their order, and every reply comes in request order."""
    p = unique().decode()
    chans = ["%s:o%d" % (p, i) for i in range(8)]
    c = Conn(env.paddr)
    pub = Conn(env.paddr)
    try:
        c.cmd("HELLO", "3")
        c.send("SUBSCRIBE", *chans)
        c.reads(len(chans))
        n = 300
        stop = []

        def publish():
            for i in range(n):
                pub.cmd("PUBLISH", chans[i % len(chans)], "%d" % i)
            stop.append(1)
        th = threading.Thread(target=publish, daemon=True)
        th.start()
        seen, replies = {}, []
        for i in range(200):
            c.send("SET", "%s:k" % p, "%d" % i)
            c.send("GET", "%s:k" % p)
        deadline = time.monotonic() + patience(20)
        while (len(replies) < 400 or sum(len(v) for v in seen.values()) < n) and time.monotonic() < deadline:
            r = c.read()
            if r.startswith(b">3\r\n$7\r\nmessage\r\n"):
                parts = r.split(b"\r\n")
                seen.setdefault(parts[4], []).append(int(parts[6]))
            else:
                replies.append(r)
        th.join(10)
        eq(replies, [b"+OK\r\n", b"$1\r\n0\r\n"] + [x for i in range(1, 200)
                                                      for x in (b"+OK\r\n", b"$%d\r\n%d\r\n" % (len(str(i)), i))])
        eq(sum(len(v) for v in seen.values()), n, "every message")
        for ch, nums in seen.items():
            eq(nums, sorted(nums), "order of %r" % ch)
    finally:
        c.close()
        pub.close()


@R.test(ringleader=True)
def reset_and_hello_while_subscribed(env):
    p = unique().decode()

    def script(c):
        t = []
        c.send("SUBSCRIBE", p + ":a")
        t.append(c.read())
        t.append(c.cmd("HELLO", "2"))        # RESP2 subscribed: refused; RESP3: back to RESP2
        t.append(c.cmd("PING"))
        t.append(c.cmd("RESET"))
        t.append(c.cmd("PING"))              # RESET: RESP2 and ordinary
        t.append(c.cmd("GET", p))
        return [hello_fields_normalized(x) for x in t]

    for resp in (2, 3):
        got, want = both(env, resp, script)
        same(got, want, "RESP%d" % resp)
    # the subscription is gone from the server soon after (RESET is answered at once)
    pub = Conn(env.paddr)
    try:
        deadline = time.monotonic() + patience(5)
        while pub.cmd("PUBLISH", p + ":a", "x") != b":0\r\n" and time.monotonic() < deadline:
            time.sleep(0.05)
        eq(pub.cmd("PUBLISH", p + ":a", "x"), b":0\r\n")
    finally:
        pub.close()


@R.test(ringleader=True)
def large_message_and_binary_channel(env):
    p = unique()
    payload = os.urandom(3 << 20)
    chan = p + b"\x00\r\n\xff"

    def run(addr, resp):
        s, pub = Conn(addr), Conn(addr)
        try:
            if resp == 3:
                s.cmd("HELLO", "3")
            s.send("SUBSCRIBE", chan)
            conf = s.read()
            n = pub.cmd("PUBLISH", chan, payload)
            return [conf, n, s.read(20)]
        finally:
            s.close()
            pub.close()
    for resp in (2, 3):
        same(run(env.paddr, resp), run(env.ref.addr, resp), "RESP%d" % resp)


# ---------------------------------------------------------------- RESP3 request/reply

@R.test(ringleader=True)
def resp3_replies_as_redis_sends_them(env):
    p = unique().decode()

    def script(c):
        t = []
        for cmd in (("SET", p + ":s", "v"), ("GET", p + ":s"), ("GET", p + ":none"),
                    ("HSET", p + ":h", "a", "1", "b", "2"), ("HGETALL", p + ":h"),
                    ("SADD", p + ":set", "x"), ("SMEMBERS", p + ":set"),
                    ("ZADD", p + ":z", "1.5", "m"), ("ZSCORE", p + ":z", "m"),
                    ("ZRANGE", p + ":z", "0", "-1", "WITHSCORES"),
                    ("MSET", p + ":m1", "1", p + ":m2", "2"),
                    ("MGET", p + ":m1", p + ":none", p + ":m2"),
                    ("EXISTS", p + ":m1", p + ":m2", p + ":none"),
                    ("DEL", p + ":m1", p + ":m2"), ("LPOP", p + ":none"),
                    ("INCRBYFLOAT", p + ":f", "1.25"), ("HRANDFIELD", p + ":none"),
                    ("CLIENT", "GETNAME"), ("PING",), ("ECHO", "e"),
                    ("XADD", p + ":x", "1-1", "f", "v"), ("XRANGE", p + ":x", "-", "+"),
                    ("OBJECT", "ENCODING", p + ":h"), ("TTL", p + ":s"),
                    ("GETRANGE", p + ":s", "0", "0"), ("EVAL", "return {1,'a',false}", "0"),
                    ("EVAL", "return redis.setresp(3) and {map={a=1}}", "0")):
            t.append(c.cmd(*cmd))
        return t

    for resp in (2, 3):
        got, want = both(env, resp, script)
        same(got, want, "RESP%d" % resp)
    # the proxy's own replies in RESP3 have RESP3's types
    c = Conn(env.paddr)
    try:
        c.cmd("HELLO", "3")
        check(c.cmd("INFO", "keyspace").startswith(b"="), "INFO keyspace: verbatim")
        check(c.cmd("INFO", "server").startswith(b"="), "INFO: verbatim")
        check(c.cmd("CLIENT", "INFO").startswith(b"="), "CLIENT INFO: verbatim")
        check(b" resp=3 " in c.cmd("CLIENT", "INFO"), "CLIENT INFO says resp=3")
        eq(c.cmd("CLIENT", "TRACKINGINFO"),
           b"%3\r\n$5\r\nflags\r\n~1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n")
        eq(c.cmd("CLIENT", "TRACKING", "on"), b"+OK\r\n")     # test_tracking.py: the rest
        eq(c.cmd("CLIENT", "TRACKINGINFO"),
           b"%3\r\n$5\r\nflags\r\n~1\r\n$2\r\non\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n")
    finally:
        c.close()


@R.test(ringleader=True)
def sessions_in_resp3(env):
    """Transactions, WATCH and blocking commands (part A's sessions, on pinned connections)
    give a RESP3 client RESP3's bytes, as one redis-server does; a subscriber's session
    runs beside its subscriptions."""
    p = unique().decode()
    k = p + ":w"                # one key: the pool has no hash tags

    def script(c):
        t = []
        for cmd in (("WATCH", k), ("MULTI",), ("DEL", k), ("HSET", k, "f", "v"),
                    ("HGETALL", k), ("HGET", k, "none"), ("EXEC",),
                    ("BLPOP", p + ":none", "0.05"),
                    ("MULTI",), ("HINCRBY", k, "n", "1"), ("DISCARD",)):
            t.append(c.cmd(*cmd))
        return t

    for resp in (2, 3):
        got, want = both(env, resp, script)
        same(got, want, "RESP%d" % resp)

    def subscribed(c):
        t = [c.cmd("SUBSCRIBE", p + ":ch")]
        for cmd in (("MULTI",), ("SET", p + ":k", "v"), ("GET", p + ":k"), ("EXEC",)):
            t.append(c.cmd(*cmd))
        pub = Conn(c.raw.addr)
        try:
            t.append(pub.cmd("PUBLISH", p + ":ch", "m"))
        finally:
            pub.close()
        t.append(c.read())
        return t

    got, want = both(env, 3, subscribed)
    same(got, want, "RESP3 subscriber with a transaction")


@R.test(ringleader=True)
def resp2_and_resp3_clients_never_share_a_connection(env):
    """Interleaved RESP2 and RESP3 clients on a pool with one connection per server: each
    gets its own protocol's replies."""
    proxy = env.with_pool(server_connections=1)
    p = unique().decode()
    c2, c3 = Conn(proxy.addr()), Conn(proxy.addr())
    try:
        c3.cmd("HELLO", "3")
        c2.cmd("HSET", p, "f", "v")
        for _ in range(50):
            c2.send("HGETALL", p)
            c3.send("HGETALL", p)
            c2.send("GET", p + ":none")
            c3.send("GET", p + ":none")
        for _ in range(50):
            eq(c2.read(), b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n")
            eq(c2.read(), b"$-1\r\n")
            eq(c3.read(), b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n")
            eq(c3.read(), b"_\r\n")
    finally:
        c2.close()
        c3.close()


@R.test(ringleader=True)
def hello_forms_with_a_password(env):
    pw = "pw-%d" % os.getpid()
    backs = [Redis.start(password=pw) for _ in range(2)]
    ref = Redis.start(password=pw)
    env.more_backends += backs + [ref]
    proxy = Proxy({"rdpw": {"redis": True, "hash": "md5", "distribution": "ketama",
                            "redis_auth": pw, "auto_eject_hosts": False, "timeout": 2000,
                            "servers": server_lines(backs, NAMES[:2])}})
    p = unique().decode()
    try:
        def script(c):
            t = []
            for cmd in (("HELLO", "3"), ("HELLO", "3", "AUTH", "default", "wrong"),
                        ("HELLO", "4"), ("HELLO", "x"), ("HELLO", "3", "SETNAME"),
                        ("HELLO", "3", "AUTH", "default", pw, "SETNAME", "app"),
                        ("CLIENT", "GETNAME"), ("SET", p, "1"), ("GET", p), ("HELLO",),
                        ("HELLO", "2"), ("GET", p + ":none"), ("HELLO", "3", "SETNAME", "b c")):
                t.append(hello_fields_normalized(c.cmd(*cmd)))
            return t
        got = script(Conn(proxy.addr()))
        want = script(Conn(ref.addr))
        same(got, want, "HELLO forms")
    finally:
        proxy.stop()


# ---------------------------------------------------------------- bounds and failures

@R.test(ringleader=True)
def subscriber_that_does_not_read_is_closed(env):
    proxy = Proxy({"rdlim": {**env.pool(), "timeout": 5000}},
                  glob={"pubsub_output_limit": 1 << 20, "pubsub_output_soft_limit": 0})
    p = unique().decode()
    slow = socket.create_connection(proxy.addr())
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    pub = Conn(proxy.addr())
    other = Conn(proxy.addr())
    try:
        slow.sendall(resp_encode("SUBSCRIBE", p))
        # the confirmation, not a fixed sleep: the publishes must find the subscriber
        slow.settimeout(patience(5))
        confirm = b""
        while not confirm.endswith(b":1\r\n"):
            more = slow.recv(100)
            check(more, "closed before the SUBSCRIBE confirmation: %r" % confirm)
            confirm += more
        big = b"x" * 65536
        for _ in range(200):                  # 13 MB for a reader that takes none of it
            pub.cmd("PUBLISH", p, big)
        deadline = time.monotonic() + patience(10)
        closed = 0
        while time.monotonic() < deadline:
            st = proxy.stats()["rdlim"]
            closed = st["pubsub_closed"]
            if closed:
                break
            time.sleep(0.1)
        eq(closed, 1, "pubsub_closed")
        eq(other.cmd("PING"), b"+PONG\r\n", "other clients served")
        eq(pub.cmd("PUBLISH", p, "x"), b":0\r\n", "the subscription went with it")
    finally:
        slow.close()
        pub.close()
        other.close()
        proxy.stop()


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def publish_flood(addr, channel, n, batch=2000):
    """PUBLISH channel x, n times, pipelined in batches (each batch's replies read)."""
    s = socket.create_connection(addr, 10)
    s.settimeout(10)
    try:
        one = resp_encode("PUBLISH", channel, "x")
        for done in range(0, n, batch):
            k = min(batch, n - done)
            s.sendall(one * k)
            got = 0
            deadline = time.monotonic() + 30
            while got < k and time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    return done + got
                got += chunk.count(b"\r\n")
    finally:
        s.close()
    return n


def messages_taken(proxy, pool, n, deadline_s=20):
    """Wait (bounded) until the proxy has taken n messages from its servers (stats
    pubsub_messages), or closed someone over a limit; returns the pool's stats."""
    deadline = time.monotonic() + deadline_s
    while True:
        st = proxy.stats()[pool]
        if (st["pubsub_messages"] >= n or st["memory_refused"] or st["pubsub_closed"] or
                time.monotonic() > deadline):
            return st
        time.sleep(0.05)


def list_apart(env, proxy, channel):
    """A list name whose server is not channel's: messages then wait behind the BLPOP's
    reply (on the channel's own connection they would precede it, as Redis sends them)."""
    c = Conn(proxy.addr())
    try:
        cands = ["%s-l%d" % (channel, i) for i in range(32)]
        for k in [channel] + cands:
            c.cmd("SET", k, "1")
        own = owners(env.backends, [channel] + cands)
        for k in [channel] + cands:
            c.cmd("DEL", k)
    finally:
        c.close()
    for k in cands:
        if own[k.encode()] != own[channel.encode()]:
            return k
    raise AssertionError("no list name off the channel's server in 32 tries")


def blocked_subscriber(proxy, channel, lst):
    """A RESP3 client subscribed to channel that then waits in BLPOP lst 0."""
    sub = Conn(proxy.addr(), timeout=30)
    check(sub.cmd("HELLO", "3").startswith(b"%7\r\n"), "HELLO 3")
    sub.cmd("SUBSCRIBE", channel)
    sub.send("BLPOP", lst, "0")
    check(sub.quiet(0.3), "BLPOP blocks")
    return sub


@R.test(ringleader=True)
def messages_behind_a_blocked_reply_are_held_at_cost(env):
    """A RESP3 subscriber blocked in BLPOP while 30,000 messages arrive for it: they wait
    behind the BLPOP's reply, held in one buffer (not a request and a 16 KiB buffer each:
    the proxy's RSS grows by little, within memory_limit 16 MiB), and all of them follow
    the BLPOP's reply in order once it comes."""
    n = 30000
    proxy = Proxy({"rdflood": {**env.pool(), "timeout": 0}}, glob={"memory_limit": 16 << 20})
    ch = unique(b"flood").decode()
    sub = None
    try:
        lst = list_apart(env, proxy, ch)
        sub = blocked_subscriber(proxy, ch, lst)
        base = rss_kb(proxy.proc.pid)
        eq(publish_flood(proxy.addr(), ch, n), n, "messages published")
        st = messages_taken(proxy, "rdflood", n)
        grew = (rss_kb(proxy.proc.pid) - base) / 1024.0
        print("  %d messages behind a blocked BLPOP: proxy RSS grew by %.1f MB" % (n, grew))
        # (ASan's shadow memory and quarantine add to the sanitizer build's RSS: a looser
        # bound there, still far below a request and a buffer per message, 200 MB)
        check(grew < 16 + (48 if sanitized() else 16),
              "proxy RSS grew by %.1f MB (memory_limit 16 MiB)" % grew)
        eq(st["pubsub_closed"] + st["memory_refused"], 0, "nothing closed under the limits")
        pusher = Conn(proxy.addr())
        try:
            eq(pusher.cmd("LPUSH", lst, "go"), b":1\r\n", "LPUSH")
        finally:
            pusher.close()
        eq(sub.read(30), b"*2\r\n$%d\r\n%s\r\n$2\r\ngo\r\n" % (len(lst), lst.encode()),
           "the BLPOP reply first")
        msg = b">3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$1\r\nx\r\n" % (len(ch), ch.encode())
        want = msg * n
        got = sub.raw.read_until(lambda b: len(want) if len(b) >= len(want) else None, 30)
        eq(len(got), len(want), "bytes of the messages")
        check(got == want, "every message, in order")
    finally:
        if sub is not None:
            sub.close()
        proxy.stop()


@R.test(ringleader=True)
def message_flood_past_memory_limit_closes_the_subscriber(env):
    """The same, 60,000 messages with memory_limit 1 MiB and no pub/sub output limits: the
    subscriber is closed when its messages put the proxy over memory_limit (stats
    memory_refused), the proxy's RSS stays bounded, other clients are served."""
    n = 60000
    proxy = Proxy({"rdflood": {**env.pool(), "timeout": 0}},
                  glob={"memory_limit": 1 << 20, "pubsub_output_limit": 0,
                        "pubsub_output_soft_limit": 0})
    ch = unique(b"flood").decode()
    sub = None
    try:
        lst = list_apart(env, proxy, ch)
        sub = blocked_subscriber(proxy, ch, lst)
        base = rss_kb(proxy.proc.pid)
        publish_flood(proxy.addr(), ch, n)
        messages_taken(proxy, "rdflood", n)
        grew = (rss_kb(proxy.proc.pid) - base) / 1024.0
        st = proxy.stats()["rdflood"]
        print("  %d messages for a blocked subscriber, memory_limit 1 MiB: RSS grew by %.1f MB, "
              "memory_refused %d" % (n, grew, st["memory_refused"]))
        check(grew < 1 + (48 if sanitized() else 16),
              "proxy RSS grew by %.1f MB (memory_limit 1 MiB)" % grew)
        check(st["memory_refused"] >= 1, "the subscriber was refused over memory_limit")
        check(sub.raw.closed(5), "the subscriber's connection is closed")
        other = Conn(proxy.addr())
        try:
            eq(other.cmd("PING"), b"+PONG\r\n", "other clients served")
        finally:
            other.close()
    finally:
        if sub is not None:
            sub.close()
        proxy.stop()


@R.test(ringleader=True)
def info_counts_the_pools_channels_and_patterns(env):
    """INFO stats through the proxy: channels and shard channels summed over the servers,
    patterns the largest; the same growth as on one redis-server."""
    def counts(c):
        r = c.cmd("INFO", "stats")
        body = r[r.index(b"\r\n") + 2:].decode()
        f = dict(l.split(":", 1) for l in body.split("\r\n") if ":" in l)
        return [int(f.get(k, -1)) for k in ("pubsub_channels", "pubsub_patterns",
                                             "pubsubshard_channels")]
    p = unique().decode()
    grew = []
    for addr in (env.paddr, env.ref.addr):
        obs, sub = Conn(addr), Conn(addr)
        try:
            before = counts(obs)
            sub.send("SUBSCRIBE", p + ":a", p + ":b", p + ":c")
            sub.reads(3)
            sub.send("PSUBSCRIBE", p + ":*")
            sub.read()
            sub.send("SSUBSCRIBE", "{%s}x" % p)
            sub.read()
            deadline = time.monotonic() + patience(5)
            while True:                 # other tests' subscribers may still be going away
                d = [a - b for a, b in zip(counts(obs), before)]
                if d == [3, 1, 1] or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            grew.append(d)
        finally:
            sub.close()
            obs.close()
    eq(grew[0], grew[1])
    eq(grew[0], [3, 1, 1])


@R.test(ringleader=True)
def lost_subscription_connection_closes_the_subscriber(env):
    backs = [Redis.start() for _ in range(2)]
    env.more_backends += backs
    proxy = Proxy({"rdloss": {**env.pool(backs), "timeout": 2000}})
    try:
        c = Conn(proxy.addr())
        c.send("PSUBSCRIBE", "*")                # a pattern pins every server
        eq(c.read(), b"*3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n")
        backs[1].stop()
        r = c.read()
        check(r.startswith(b"-ERR server error: connection to server beta lost"), "last reply %r" % r)
        check(c.raw.closed(5.0), "subscriber closed when a server it needs went away")
        eq(proxy.stats()["rdloss"]["pubsub_closed"], 1)
        d = Conn(proxy.addr())
        d.send("PSUBSCRIBE", "*")
        r = d.read()
        check(r.startswith(b"-ERR"), "a pattern needs every server: %r" % r)
        check(d.raw.closed(5.0), "closed after the error (its subscriptions are not the servers')")
    finally:
        proxy.stop()


if __name__ == "__main__":
    R.main(Env)
