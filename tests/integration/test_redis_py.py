"""test_redis_py.py: redis-py used as an application would, through the proxy against 4 redis-servers."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (RedisPoolEnv, Runner, Skip,  # noqa: E402
                     check, eq, owners, unique)

R = Runner("test_redis_py", per_test_timeout=60, total_timeout=120)


class Env(RedisPoolEnv):
    def __init__(self):
        try:
            import redis
        except ImportError:
            raise Skip("python3-redis not installed")
        self.redis = redis
        super().__init__()
        host, port = self.proxy.addr()
        self.r = redis.Redis(host=host, port=port, socket_timeout=10, socket_connect_timeout=5)

    def close(self):
        self.r.close()
        super().close()


@R.test(external=True)
def get_set_mget(env):
    p = unique().decode()
    r = env.r
    check(r.set(p + ":a", "1"), "set")
    eq(r.get(p + ":a"), b"1")
    eq(r.get(p + ":none"), None)
    check(r.mset({"%s:%d" % (p, i): i for i in range(200)}), "mset")
    eq(r.mget(["%s:%d" % (p, i) for i in range(199, -1, -1)]),
       [b"%d" % i for i in range(199, -1, -1)])
    eq(r.delete(p + ":a", p + ":0", p + ":none"), 2)


@R.test(external=True)
def pipeline_without_transaction_1000_commands(env):
    p = unique().decode()
    pipe = env.r.pipeline(transaction=False)
    for i in range(500):
        pipe.set("%s:%d" % (p, i), "v%d" % i)
        pipe.incr("%s:c%d" % (p, i % 10))
    res = pipe.execute()
    eq(len(res), 1000)
    check(all(x is True for x in res[0::2]), "every SET ok")
    eq(res[1::2][:20], [1] * 10 + [2] * 10)
    pipe = env.r.pipeline(transaction=False)
    for i in range(1000):
        pipe.get("%s:%d" % (p, i % 500))
    eq(pipe.execute(), [b"v%d" % (i % 500) for i in range(1000)])
    if env.backends:
        held = owners(env.backends, ["%s:%d" % (p, i) for i in range(500)])
        check(all(len(o) == 1 for o in held.values()), "each key on one server")
        # fnv1a_64 clusters similar keys under ketama: spread, not an even split
        check(len({o[0] for o in held.values()}) >= 2, "keys spread over the servers")


@R.test(external=True)
def hashes_expire_incr(env):
    p = unique().decode()
    r = env.r
    eq(r.hset(p + ":h", mapping={"a": "1", "b": "2"}), 2)
    eq(r.hgetall(p + ":h"), {b"a": b"1", b"b": b"2"})
    eq(r.hincrby(p + ":h", "a", 5), 6)
    eq(r.incr(p + ":n"), 1)
    eq(r.incrby(p + ":n", 9), 10)
    check(r.expire(p + ":n", 100), "expire")
    check(95 <= r.ttl(p + ":n") <= 100, "ttl")
    check(r.persist(p + ":n"), "persist")
    eq(r.ttl(p + ":n"), -1)


def tagged_client(env):
    """A client of a proxy whose pool hashes by {tag}, so that keys of one transaction can
    share a server."""
    host, port = env.with_pool(hash_tag="{}").addr()
    return env.redis.Redis(host=host, port=port, socket_timeout=10, socket_connect_timeout=5)


@R.test(ringleader=True, nutcracker_reason="twemproxy refuses MULTI")
def transactional_pipeline(env):
    r = tagged_client(env)
    p = "{%s}" % unique().decode()
    pipe = r.pipeline()                 # transaction=True: MULTI ... EXEC
    pipe.set(p + "a", 1).incr(p + "a").incrby(p + "a", 5).get(p + "a").lpush(p + "l", "x", "y")
    eq(pipe.execute(), [True, 2, 7, b"7", 2])
    # keys of two servers in one transaction: the pipeline raises, nothing applied
    if env.backends:
        cands = ["x%d-%s" % (i, unique().decode()) for i in range(64)]
        r.mset({k: "1" for k in cands})
        held = owners(env.backends, cands)
        r.delete(*cands)
        a = cands[0]
        b = next(k for k in cands if held[k.encode()] != held[a.encode()])
        pipe = r.pipeline()
        pipe.set(a, 1).set(b, 2)
        try:
            pipe.execute()
            raise AssertionError("a transaction over two servers was applied")
        except env.redis.exceptions.ResponseError as e:
            check("EXECABORT" in str(e) or "CROSSSLOT" in str(e), "message: %s" % e)
        eq(r.exists(a, b), 0)
    eq(r.ping(), True)
    r.close()


@R.test(ringleader=True, nutcracker_reason="twemproxy refuses WATCH")
def watch_retry_loop(env):
    """redis-py's optimistic lock: 4 threads x 25 increments through WATCH/MULTI/EXEC."""
    key = "{%s}counter" % unique().decode()
    errors = []

    def worker():
        r = tagged_client(env)
        try:
            for _ in range(25):
                def incr(pipe):
                    v = int(pipe.get(key) or 0)
                    pipe.multi()
                    pipe.set(key, v + 1)
                r.transaction(incr, key)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            r.close()
    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    eq(errors, [])
    r = tagged_client(env)
    eq(r.get(key), b"100", "every increment applied once")
    r.close()


@R.test(ringleader=True, nutcracker_reason="twemproxy refuses SCAN")
def scan_iter_yields_every_key_once(env):
    p = unique().decode()
    names = ["%s:%d" % (p, i) for i in range(500)]
    env.r.mset({n: "v" for n in names})
    got = list(env.r.scan_iter(match=p + ":*", count=50))
    eq(len(got), len(set(got)), "no key twice")
    eq(sorted(got), sorted(n.encode() for n in names))
    eq(sorted(env.r.keys(p + ":1*")), sorted(n.encode() for n in names if n.startswith(p + ":1")))
    check(env.r.dbsize() >= 500, "dbsize")
    if env.backends:
        held = owners(env.backends, names)
        check(len({o[0] for o in held.values()}) >= 2, "the keys are on several servers")


@R.test(ringleader=True, nutcracker_reason="twemproxy refuses BLPOP")
def blpop_worker_queue(env):
    """3 producers, 3 consumers blocked in BLPOP: every job is taken exactly once."""
    q = "queue:" + unique().decode()
    jobs = ["job%d" % i for i in range(150)]
    taken, lock = [], threading.Lock()

    def consumer():
        r = env.redis.Redis(*env.proxy.addr(), socket_timeout=10)
        try:
            while True:
                got = r.blpop(q, timeout=1)
                if got is None:
                    return
                with lock:
                    taken.append(got[1].decode())
        finally:
            r.close()

    def producer(part):
        r = env.redis.Redis(*env.proxy.addr(), socket_timeout=10)
        try:
            for j in part:
                r.rpush(q, j)
                time.sleep(0.001)
        finally:
            r.close()
    cs = [threading.Thread(target=consumer) for _ in range(3)]
    ps = [threading.Thread(target=producer, args=(jobs[i::3],)) for i in range(3)]
    for t in cs + ps:
        t.start()
    for t in ps + cs:
        t.join(30)
    eq(sorted(taken), sorted(jobs), "every job taken exactly once")
    eq(env.r.llen(q), 0)


if __name__ == "__main__":
    R.main(Env)
