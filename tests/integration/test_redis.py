"""test_redis.py: Redis RESP through the proxy against 4 real redis-servers (and 2 with requirepass)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PROXY_KIND, Redis, RedisPoolEnv, RespError, Runner,  # noqa: E402
                     check, eq, owners, resp_encode, unique)

R = Runner("test_redis", per_test_timeout=60, total_timeout=240)
PASSWORD = "s3cret-pw"


def is_err(r, prefix):
    return isinstance(r, RespError) and str(r).startswith(prefix)


Env = RedisPoolEnv


def one_owner(env, *keys):
    """Every key is on exactly one backend (when the harness owns them)."""
    if not env.backends:
        return
    for k, o in owners(env.backends, keys).items():
        eq(len(o), 1, "backends holding %r" % k)


# ---------------------------------------------------------------- command families

@R.test(external=True)
def strings(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("SET", k, "v"), "OK")
        eq(c.rd("GET", k), b"v")
        eq(c.rd("SETNX", k, "x"), 0)
        eq(c.rd("GETSET", k, "w"), b"v")
        eq(c.rd("APPEND", k, "123"), 4)
        eq(c.rd("STRLEN", k), 4)
        eq(c.rd("GETRANGE", k, 1, 2), b"12")
        eq(c.rd("SETRANGE", k, 0, "W"), 4)
        eq(c.rd("GET", k), b"W123")
        eq(c.rd("INCR", k + "n"), 1)
        eq(c.rd("INCRBY", k + "n", 41), 42)
        eq(c.rd("DECRBY", k + "n", 2), 40)
        eq(c.rd("DECR", k + "n"), 39)
        eq(c.rd("INCRBYFLOAT", k + "n", "0.5"), b"39.5")
        check(is_err(c.rd("INCR", k), "ERR value is not an integer"), "INCR of text")
        eq(c.rd("SET", k + "x", "1", "NX"), "OK")
        eq(c.rd("SET", k + "x", "2", "NX"), None)
        eq(c.rd("GETDEL", k + "x"), b"1")
        eq(c.rd("GET", k + "x"), None)
        eq(c.rd("GET", k + "missing"), None)
    one_owner(env, k, k + "n")


@R.test(external=True)
def hashes(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("HSET", k, "a", "1", "b", "2"), 2)
        eq(c.rd("HGET", k, "a"), b"1")
        eq(c.rd("HMGET", k, "a", "zz", "b"), [b"1", None, b"2"])
        eq(c.rd("HINCRBY", k, "a", 10), 11)
        eq(c.rd("HEXISTS", k, "b"), 1)
        eq(c.rd("HLEN", k), 2)
        eq(sorted(c.rd("HKEYS", k)), [b"a", b"b"])
        eq(dict(zip(*[iter(c.rd("HGETALL", k))] * 2)), {b"a": b"11", b"b": b"2"})
        eq(c.rd("HDEL", k, "a", "nope"), 1)
        eq(c.rd("HSETNX", k, "b", "9"), 0)
    one_owner(env, k)


@R.test(external=True)
def lists(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("RPUSH", k, "b", "c", "d"), 3)
        eq(c.rd("LPUSH", k, "a"), 4)
        eq(c.rd("LRANGE", k, 0, -1), [b"a", b"b", b"c", b"d"])
        eq(c.rd("LINDEX", k, 1), b"b")
        eq(c.rd("LSET", k, 1, "B"), "OK")
        eq(c.rd("LREM", k, 0, "c"), 1)
        eq(c.rd("LPOP", k), b"a")
        eq(c.rd("RPOP", k), b"d")
        eq(c.rd("LLEN", k), 1)
        eq(c.rd("LTRIM", k, 1, -1), "OK")
        eq(c.rd("LLEN", k), 0)


@R.test(external=True)
def sets(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("SADD", k, "x", "y", "z", "x"), 3)
        eq(c.rd("SCARD", k), 3)
        eq(c.rd("SISMEMBER", k, "y"), 1)
        eq(sorted(c.rd("SMEMBERS", k)), [b"x", b"y", b"z"])
        eq(c.rd("SREM", k, "x", "q"), 1)
        check(c.rd("SRANDMEMBER", k) in (b"y", b"z"), "SRANDMEMBER")
    one_owner(env, k)


@R.test(external=True)
def sorted_sets(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("ZADD", k, 1, "one", 2, "two", 3, "three"), 3)
        eq(c.rd("ZRANGE", k, 0, -1, "WITHSCORES"), [b"one", b"1", b"two", b"2", b"three", b"3"])
        eq(c.rd("ZSCORE", k, "two"), b"2")
        eq(c.rd("ZINCRBY", k, 5, "one"), b"6")
        eq(c.rd("ZRANK", k, "one"), 2)
        eq(c.rd("ZRANGEBYSCORE", k, 2, 3), [b"two", b"three"])
        eq(c.rd("ZCOUNT", k, "-inf", "+inf"), 3)
        eq(c.rd("ZREM", k, "two"), 1)
        eq(c.rd("ZCARD", k), 2)
    one_owner(env, k)


@R.test(external=True)
def hyperloglog(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("PFADD", k, *["e%d" % i for i in range(100)]), 1)
        n = c.rd("PFCOUNT", k)
        check(95 <= n <= 105, "PFCOUNT %r" % n)


@R.test(external=True)
def geo(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("GEOADD", k, "13.361389", "38.115556", "Palermo",
                "15.087269", "37.502669", "Catania"), 2)
        d = float(c.rd("GEODIST", k, "Palermo", "Catania", "km"))
        check(166 < d < 167, "GEODIST %r" % d)
        pos = c.rd("GEOPOS", k, "Palermo")
        check(abs(float(pos[0][0]) - 13.361389) < 1e-4, "GEOPOS %r" % pos)
        eq(c.rd("GEORADIUS", k, 15, 37, 200, "km"), [b"Palermo", b"Catania"])


@R.test(external=True, ringleader=True, nutcracker_reason="twemproxy 0.5.0 has no streams")
def streams(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("XADD", k, "1-1", "f", "v"), b"1-1")
        eq(c.rd("XADD", k, "2-1", "f", "w"), b"2-1")
        eq(c.rd("XLEN", k), 2)
        eq(c.rd("XRANGE", k, "-", "+"), [[b"1-1", [b"f", b"v"]], [b"2-1", [b"f", b"w"]]])
        eq(c.rd("XDEL", k, "1-1"), 1)
        eq(c.rd("XTRIM", k, "MAXLEN", 0), 1)
    one_owner(env, k)


@R.test(external=True)
def expire_family(env):
    k = unique().decode()
    with env.client() as c:
        eq(c.rd("SET", k, "v"), "OK")
        eq(c.rd("TTL", k), -1)
        eq(c.rd("EXPIRE", k, 100), 1)
        check(95 <= c.rd("TTL", k) <= 100, "TTL")
        check(90000 <= c.rd("PTTL", k) <= 100000, "PTTL")
        eq(c.rd("PERSIST", k), 1)
        eq(c.rd("TTL", k), -1)
        eq(c.rd("PEXPIRE", k, 100000), 1)
        eq(c.rd("EXPIREAT", k, 4000000000), 1)
        check(c.rd("TTL", k) > 100000, "EXPIREAT")
        eq(c.rd("SET", k + "e", "v", "EX", 50), "OK")
        check(45 <= c.rd("TTL", k + "e") <= 50, "SET EX")
        eq(c.rd("TTL", k + "missing"), -2)
        eq(c.rd("EXPIRE", k + "missing", 10), 0)


# ---------------------------------------------------------------- multi-key commands

@R.test
def mset_mget_del_exists_over_1000_keys(env):
    p = unique().decode()
    keys = ["%s:%d" % (p, i) for i in range(1000)]
    args = []
    for i, k in enumerate(keys):
        args += [k, "v%d" % i]
    with env.client() as c:
        eq(c.rd("MSET", *args), "OK")
        req = list(reversed(keys)) + [p + ":missing"]
        got = c.rd("MGET", *req)
        eq(got, [("v%d" % (999 - i)).encode() for i in range(1000)] + [None], "MGET")
        if PROXY_KIND == "ringleader":   # twemproxy 0.5.0 sends EXISTS to one server
            eq(c.rd("EXISTS", *(keys + [p + ":missing", keys[0]])), 1001, "EXISTS summed")
        per = [0] * 4
        for k, o in owners(env.backends, keys).items():
            eq(len(o), 1, "owners of %s" % k)
            per[o[0]] += 1
        check(all(n > 0 for n in per), "the multi-key commands span all 4 servers: %r" % per)
        eq(c.rd("DEL", *(keys[:500] + [p + ":missing"])), 500, "DEL summed")
        if PROXY_KIND == "ringleader":
            eq(c.rd("EXISTS", *keys), 500)
        eq(c.rd("MGET", keys[0], keys[999]), [None, b"v999"])


@R.test
def hash_tags_allow_multi_key_commands(env):
    t = unique().decode()
    with env.client(hash_tag="{}") as c:
        a, b, d, e = ("{%s}:a" % t, "{%s}:b" % t, "{%s}:c" % t, "{%s}:d" % t)
        eq(c.rd("SADD", a, "1", "2", "3"), 3)
        eq(c.rd("SADD", b, "2", "3", "4"), 3)
        eq(c.rd("SINTERSTORE", d, a, b), 2)
        eq(sorted(c.rd("SMEMBERS", d)), [b"2", b"3"])
        if PROXY_KIND == "nutcracker":    # twemproxy 0.5.0 closes on RENAME
            e = a
        else:
            eq(c.rd("RENAME", a, e), "OK")
            eq(c.rd("EXISTS", a), 0)
        eq(c.rd("SCARD", e), 3)
    o = owners(env.backends, [b, d, e])
    eq(len({tuple(v) for v in o.values()}), 1, "all tagged keys on one server: %r" % o)


def _keys_on_two_servers(env, prefix):
    """Two keys that the proxy places on different backends."""
    # the counter first: twemproxy's fnv1a_64 barely moves when only the
    # last bytes of a key differ, so "p:0".."p:39" can all share one server
    keys = ["%d:%s" % (i, prefix) for i in range(40)]
    with env.client() as c:
        c.rd("MSET", *[x for k in keys for x in (k, "1")])
        own = owners(env.backends, keys)
        c.rd("DEL", *keys)
    first = keys[0]
    for k in keys[1:]:
        if own[k.encode()] != own[first.encode()]:
            return first, k
    raise AssertionError("40 keys all on one server")


@R.test(ringleader=True, nutcracker_reason="twemproxy forwards to the first key's server")
def cross_server_multi_key_refused(env):
    p = unique().decode()
    a, b = _keys_on_two_servers(env, p)
    dest = p + ":dest"
    with env.client() as c:
        eq(c.rd("SADD", a, "1"), 1)
        eq(c.rd("SADD", b, "1"), 1)
        for cmd in (("SINTERSTORE", dest, a, b), ("SUNIONSTORE", dest, a, b),
                    ("RENAME", a, b), ("SMOVE", a, b, "1")):
            r = c.rd(*cmd)
            check(is_err(r, "CROSSSLOT "), "%s -> %r, want -CROSSSLOT" % (cmd[0], r))
        eq(c.rd("PING"), "PONG")
        eq(c.rd("SCARD", a), 1)
        eq(c.rd("SCARD", b), 1)
    eq(owners(env.backends, [dest])[dest.encode()], [], "nothing forwarded: dest on no backend")


@R.test(external=True)
def pipeline_of_10000_commands(env):
    p = unique().decode()
    reqs, want = [], []
    for i in range(10000):
        k = "%s:%d" % (p, i // 4)
        op = i % 4
        if op == 0:
            reqs.append(resp_encode("SET", k, "v%d" % i))
            want.append(b"+OK\r\n")
        elif op == 1:
            v = b"v%d" % (i - 1)
            reqs.append(resp_encode("GET", k))
            want.append(b"$%d\r\n%s\r\n" % (len(v), v))
        elif op == 2:
            reqs.append(resp_encode("INCR", k + "c"))
            want.append(b":1\r\n")
        else:
            reqs.append(resp_encode("DEL", k, k + "c"))
            want.append(b":2\r\n")
    data, want = b"".join(reqs), b"".join(want)
    with env.client() as c:
        c.pipeline(data, want)
        eq(c.rd("PING"), "PONG")


@R.test(external=True)
def values_0_bytes_and_16_mib(env):
    k = unique()
    big = bytes(range(256)) * (16 * 4096)
    eq(len(big), 16 << 20)
    with env.client() as c:
        eq(c.rd("SET", k + b"0", b""), "OK")
        eq(c.rd("GET", k + b"0"), b"")
        eq(c.rd("STRLEN", k + b"0"), 0)
        eq(c.rd("SET", k + b"big", big), "OK")
        got = c.rd("GET", k + b"big", timeout=30)
        check(got == big, "16 MiB value round trip: got %s", repr(got)[:200] if not
              isinstance(got, bytes) else "%d bytes, first difference at %s" % (
                  len(got), next((i for i, (x, y) in enumerate(zip(got, big)) if x != y),
                                 min(len(got), len(big)))))
        eq(c.rd("DEL", k + b"big"), 1)


@R.test(external=True)
def binary_safe_keys_and_values(env):
    k = unique() + b"\x00\r\n\xff $3\r\n*1 {x}"
    v = b"\r\n$-1\r\n\x00" + bytes(range(256))
    with env.client() as c:
        eq(c.rd("SET", k, v), "OK")
        eq(c.rd("GET", k), v)
        eq(c.rd("MGET", k, k + b"2"), [v, None])
        eq(c.rd("HSET", k + b"h", b"\x00f\r\n", v), 1)
        eq(c.rd("HGET", k + b"h", b"\x00f\r\n"), v)
    one_owner(env, k, k + b"h")


# ---------------------------------------------------------------- refusals and errors

REFUSED = [
    # transactions, blocking commands, SCAN/KEYS/RANDOMKEY and SCRIPT (test_sessions.py)
    # and pub/sub (test_pubsub.py) are served; these stay refused
    ("CONFIG", "GET", "maxmemory"), ("FLUSHALL",), ("FLUSHDB",), ("SHUTDOWN",),
    ("DEBUG", "SLEEP", "0"), ("MONITOR",), ("SAVE",), ("SLAVEOF", "NO", "ONE"),
    ("CLUSTER", "INFO"), ("MIGRATE", "h", "1", "k", "0", "1"),
]


@R.test(external=True, ringleader=True, nutcracker_reason="twemproxy closes the connection")
def refused_commands_answered_without_disconnect(env):
    with env.client() as c:
        for cmd in REFUSED:
            r = c.rd(*cmd)
            check(isinstance(r, RespError) and str(r).startswith("ERR command ")
                  and "is not supported by ringleader" in str(r),
                  "%s -> %r" % (cmd[0], r))
            eq(c.rd("PING"), "PONG", "usable after %s" % cmd[0])


@R.test(external=True, ringleader=True, nutcracker_reason="twemproxy closes on wrong arity")
def wrong_arity_has_redis_text(env):
    with env.client() as c:
        for cmd in (("GET",), ("SET", "k"), ("HGET", "h"), ("EXPIRE", "k"), ("MSET", "a"),
                    ("MSET", "a", "1", "b")):
            r = c.rd(*cmd)
            eq(r, RespError("ERR wrong number of arguments for '%s' command" % cmd[0].lower()),
               "arity of %s" % cmd[0])
        eq(c.rd("PING"), "PONG")


@R.test(ringleader=True, nutcracker_reason="twemproxy 0.5 knows no LMPOP, ZMPOP, SINTERCARD")
def bad_numkeys_has_each_commands_redis_text(env):
    """A bad numkeys gets the text redis-server itself answers, per command family
    (the upstream suite's "LMPOP/ZMPOP/BZMPOP with illegal argument" tests)."""
    forms = {
        "LMPOP": "LMPOP N a{t} b{t} LEFT", "BLMPOP": "BLMPOP 0.01 N a{t} b{t} LEFT",
        "ZMPOP": "ZMPOP N a{t} b{t} MIN", "BZMPOP": "BZMPOP 0.01 N a{t} b{t} MIN",
        "SINTERCARD": "SINTERCARD N a{t} b{t}", "ZUNION": "ZUNION N a{t} b{t}",
        "ZINTERSTORE": "ZINTERSTORE d{t} N a{t} b{t}", "ZINTERCARD": "ZINTERCARD N a{t} b{t}",
        "EVAL": "EVAL return~1 N a{t} b{t}",
    }
    with env.client() as c, env.backends[0].client() as d:
        for name, form in forms.items():
            for n in ("a", "-1", "0", "01", "1.5", "3", "4", "99", "9223372036854775808"):
                args = [(n if w == "N" else w).replace("~", " ") for w in form.split()]
                want = d.rd(*args)
                if not isinstance(want, RespError):
                    continue        # a valid count: routed, answered by the server
                eq(c.rd(*args), want, "%s numkeys %s" % (name, n))


@R.test(ringleader=True, nutcracker_reason="twemproxy 0.5 knows no COPY")
def copy_db_option(env):
    """COPY's DB option is refused (another database); a DB Redis would not read gets
    redis-server's own error, and nothing is written either way."""
    t = unique().decode()
    a, b = "{%s}:a" % t, "{%s}:b" % t
    with env.client(hash_tag="{}") as c, env.backends[0].client() as d:
        eq(c.rd("SET", a, "v"), "OK")
        for db in ("notanumber", "01", "1.5", ""):
            eq(c.rd("COPY", a, b, "DB", db), d.rd("COPY", a, b, "DB", db), "COPY ... DB %r" % db)
        r = c.rd("COPY", a, b, "DB", "1")
        check(is_err(r, "ERR COPY's DB option is not supported by ringleader"), "got %r" % r)
        eq(c.rd("EXISTS", b), 0)
        eq(c.rd("COPY", a, b), 1)
        eq(c.rd("GET", b), b"v")
        eq(c.rd("DEL", a, b), 2)


@R.test(external=True, ringleader=True, nutcracker_reason="twemproxy closes on unknown commands")
def unknown_command_error(env):
    with env.client() as c:
        r = c.rd("NOSUCHCMD", "a")
        check(is_err(r, "ERR unknown command"), "got %r" % r)
        eq(c.rd("PING"), "PONG")


@R.test
def auth_with_redis_auth_and_password_backends(env):
    if not env.more_backends:
        env.more_backends = [Redis.start(password=PASSWORD) for _ in range(2)]
    proxy = env.with_pool(backends=env.more_backends, redis_auth=PASSWORD)
    k = unique().decode()
    with proxy.client() as c:
        r = c.rd("GET", k)
        check(is_err(r, "NOAUTH"), "before AUTH: %r" % r)
        r = c.rd("AUTH", "wrong")
        if PROXY_KIND == "ringleader":
            check(is_err(r, "WRONGPASS"), "wrong password: %r" % r)
        else:
            check(isinstance(r, RespError), "wrong password: %r" % r)
        eq(c.rd("AUTH", PASSWORD), "OK")
        eq(c.rd("SET", k, "v"), "OK")
        eq(c.rd("GET", k), b"v")
        eq(c.rd("MSET", k + "a", "1", k + "b", "2"), "OK")
        eq(c.rd("MGET", k, k + "a", k + "b"), [b"v", b"1", b"2"])
    held = owners(env.more_backends, [k])[k.encode()]
    eq(len(held), 1, "the key reached a password backend")


@R.test(external=True)
def ping_and_quit(env):
    with env.client() as c:
        eq(c.rd("PING"), "PONG")
        c.send(resp_encode("QUIT"))
        if PROXY_KIND == "ringleader" or env.external:   # twemproxy closes without +OK
            eq(c.read_resp(), "OK")
        check(c.closed(), "QUIT closes")


@R.test(external=True, ringleader=True,
        nutcracker_reason="twemproxy 0.5.0 lacks ECHO/TIME/CLIENT/HELLO and PING with a message")
def connection_commands(env):
    with env.client() as c:
        eq(c.rd("PING", "hello"), b"hello")
        eq(c.rd("ECHO", b"a\r\nb"), b"a\r\nb")
        eq(c.rd("SELECT", "0"), "OK")
        eq(c.rd("SELECT", "1"), "OK")      # served: test_select.py
        eq(c.rd("SELECT", "16"), RespError("ERR DB index is out of range"))
        eq(c.rd("SELECT", "0"), "OK")
        t = c.rd("TIME")
        check(isinstance(t, list) and len(t) == 2 and int(t[0]) > 1600000000, "TIME %r" % t)
        eq(c.rd("CLIENT", "GETNAME"), None)
        eq(c.rd("CLIENT", "SETNAME", "app-1"), "OK")
        eq(c.rd("CLIENT", "GETNAME"), b"app-1")
        h = c.rd("HELLO", "2")
        check(isinstance(h, list) and b"proto" in h, "HELLO 2: %r" % h)
        eq(h[h.index(b"proto") + 1], 2)
        # HELLO 3 switches to RESP3 (a map), HELLO 2 back (test_pubsub.py compares both)
        c.send(resp_encode("HELLO", "3") + resp_encode("HELLO", "2") + resp_encode("PING"))
        raw = c.read_until(lambda b: b.find(b"+PONG\r\n") + 7 if b.find(b"+PONG\r\n") >= 0 else None)
        check(raw.startswith(b"%7\r\n") and b"$5\r\nproto\r\n:3\r\n" in raw and
              b"*14\r\n" in raw and b"$5\r\nproto\r\n:2\r\n" in raw, "HELLO 3 then 2: %r" % raw)


if __name__ == "__main__":
    R.main(Env)
