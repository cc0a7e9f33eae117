"""test_pubsub_clients.py: redis-py, ioredis and node-redis as pub/sub listeners and RESP3
clients, through the proxy against 4 redis-servers and against one redis-server directly:
what each application sees must be the same."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (TOP_SRCDIR, Redis, RedisPoolEnv, Runner, Skip, check, eq,  # noqa: E402
                     unique)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_pubsub_clients", per_test_timeout=60, total_timeout=150)
CLIENTS = os.path.join(TOP_SRCDIR, "tests", "clients")


class Env(RedisPoolEnv):
    def __init__(self):
        super().__init__()
        if self.external:
            raise Skip("compares with a redis-server of its own")
        self.ref = Redis.start()
        self.more_backends.append(self.ref)


def node_script(lib, resp, port, prefix):
    """What tests/clients/pubsub.js saw (a dict), or raise Skip without node or the package."""
    node = shutil.which("node")
    if node is None:
        raise Skip("node not installed")
    if not os.path.isdir(os.path.join(CLIENTS, "node_modules", lib)):
        raise Skip("%s not installed in tests/clients (scripts/deps runs npm ci there)" % lib)
    r = subprocess.run([node, os.path.join(CLIENTS, "pubsub.js"), lib, str(resp), str(port), prefix],
                       capture_output=True, timeout=40, cwd=CLIENTS)
    eq(r.returncode, 0, "%s RESP%d on port %d: %s" % (lib, resp, port, r.stderr.decode()[-800:]))
    return json.loads(r.stdout)


def node_case(env, lib, resp):
    p = unique().decode()
    got = node_script(lib, resp, env.proxy.addr()[1], p)
    want = node_script(lib, resp, env.ref.port, p)
    eq(got, want, "%s RESP%d through the proxy vs direct" % (lib, resp))
    eq(len(got["messages"]), 15, "every message")


@R.test(ringleader=True)
def ioredis_resp2(env):
    node_case(env, "ioredis", 2)


@R.test(ringleader=True)
def ioredis_resp3(env):
    node_case(env, "ioredis", 3)


@R.test(ringleader=True)
def node_redis_resp2(env):
    node_case(env, "redis", 2)


@R.test(ringleader=True)
def node_redis_resp3(env):
    node_case(env, "redis", 3)


def redis_py_listener(port, prefix, protocol=2):
    """A redis-py pubsub listener thread, as an application runs one: every message it got,
    the publishers' receiver counts, then the connection used for commands again."""
    import redis
    kw = {"protocol": protocol} if protocol != 2 else {}
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, **kw)
    ps = r.pubsub()
    chans = ["%s:c%d" % (prefix, i) for i in range(10)]
    ps.subscribe(*chans)
    ps.psubscribe(prefix + ":c1*")
    confirmations = [ps.get_message(timeout=5) for _ in range(11)]
    got, done = [], threading.Event()

    def listen():
        for m in ps.listen():
            got.append((m["type"], m.get("pattern"), m["channel"], m["data"]))
            if len(got) == 11:
                done.set()
                return
    th = threading.Thread(target=listen, daemon=True)
    th.start()
    pub = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, **kw)
    receivers = [pub.publish(ch, "m%d" % i) for i, ch in enumerate(chans)]
    done.wait(10)
    th.join(5)
    ps.unsubscribe()
    ps.punsubscribe()
    ends = [ps.get_message(timeout=5) for _ in range(11)]
    numsub = pub.pubsub_numsub(chans[0])
    ps.close()
    pub.close()
    r.close()
    # a mass unsubscribe goes in Redis's hash table order: the names as a set, the counts
    # falling by one in order
    return {"confirmations": confirmations, "messages": sorted(got, key=repr),
            "receivers": receivers, "ends": sorted(repr((e["type"], e["channel"])) for e in ends),
            "end_counts": [e["data"] for e in ends], "numsub": numsub}


@R.test(ringleader=True)
def redis_py_pubsub_listener(env):
    try:
        import redis  # noqa: F401
    except ImportError:
        raise Skip("python3-redis not installed")
    p = unique().decode()
    got = redis_py_listener(env.proxy.addr()[1], p)
    want = redis_py_listener(env.ref.port, p)
    for k in want:
        eq(got[k], want[k], "redis-py through the proxy vs direct: %s" % k)
    eq(len(got["messages"]), 11)


@R.test(ringleader=True)
def redis_py_resp3(env):
    import inspect
    import redis
    if "protocol" not in inspect.signature(redis.Redis.__init__).parameters:
        raise Skip("redis-py %s has no protocol=3 (5.0 has; Debian 12 ships 4.3.4)" % redis.__version__)
    p = unique().decode()
    eq(redis_py_listener(env.proxy.addr()[1], p, 3), redis_py_listener(env.ref.port, p, 3))


@R.test(ringleader=True)
def redis_py_reconnects_and_resubscribes(env):
    """A listener whose proxy connection is closed (as when a server it needs goes away)
    resubscribes when it reconnects and gets messages again."""
    import redis
    p = unique().decode()
    r = redis.Redis(host="127.0.0.1", port=env.proxy.addr()[1], socket_timeout=10)
    pub = redis.Redis(host="127.0.0.1", port=env.proxy.addr()[1], socket_timeout=10)
    ps = r.pubsub()
    ps.subscribe(p + ":x")
    eq(ps.get_message(timeout=5)["type"], "subscribe")
    # drop the listener's connection under it, as the proxy does when a server is lost
    ps.connection.disconnect()
    deadline = time.monotonic() + patience(10)
    m = None
    while (m is None or m["type"] != "subscribe") and time.monotonic() < deadline:
        m = ps.get_message(timeout=0.5)   # redis-py reconnects and resubscribes here
    check(m is not None and m["type"] == "subscribe", "resubscribed: %r" % m)
    eq(pub.publish(p + ":x", "again"), 1)
    m = ps.get_message(timeout=5)
    eq((m["type"], m["data"]), ("message", b"again"))
    ps.close()
    pub.close()
    r.close()


if __name__ == "__main__":
    R.main(Env)
