"""test_redis_py.py: redis-py used as an application would, through the proxy against 4 redis-servers."""

import os
import sys

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


@R.test(external=True, ringleader=True, nutcracker_reason="twemproxy closes on SCAN")
def scan_refused_with_response_error(env):
    try:
        env.r.scan(0)
    except env.redis.exceptions.ResponseError as e:
        check("not supported by ringleader" in str(e), "message: %s" % e)
    else:
        raise AssertionError("SCAN was not refused")
    eq(env.r.ping(), True)


@R.test(external=True, ringleader=True, nutcracker_reason="twemproxy closes on KEYS")
def keys_refused_with_response_error(env):
    try:
        env.r.keys("*")
    except env.redis.exceptions.ResponseError as e:
        check("not supported by ringleader" in str(e), "message: %s" % e)
    else:
        raise AssertionError("KEYS was not refused")


if __name__ == "__main__":
    R.main(Env)
