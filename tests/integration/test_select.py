"""test_select.py: SELECT n through the proxy serves database n on every server of the pool
(per-database shared connections opened on demand), across requests, multi-key requests,
transactions, blocking commands; pub/sub stays database-independent; errors as a real
redis-server 7 gives them. redis-py's Redis(db=2), redis-cli -n, and phpredis's session
handler with ?database=2 when php-redis is installed.

3 redis-servers behind pool "rd" (redis_db 0) and pool "rd1" (redis_db 1, the same
servers), a 4th asked directly for reference; a proxy with 2 workers.
"""

import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Proxy, Redis, RespError, Runner, Skip, check, eq,  # noqa: E402
                     patience, server_lines, unique)

R = Runner("test_select", per_test_timeout=60, total_timeout=150)


class Env(harness.Env):
    def __init__(self):
        self.need_own_proxy("checks the databases of the servers behind a proxy it starts",
                            "documents ringleader's SELECT")
        self.backends = [Redis.start() for _ in range(3)]
        self.direct = Redis.start()
        self.few = Redis.start(extra=("--databases", "4"))
        self.more_backends = [self.direct, self.few]
        base = {"redis": True, "hash": "md5", "distribution": "ketama", "timeout": 10000,
                "auto_eject_hosts": False,
                "servers": server_lines(self.backends, ["a", "b", "c"])}
        # verbosity 6: the log says when every worker runs a reloaded configuration
        few = dict(base, auto_eject_hosts=True, server_failure_limit=1,
                   servers=server_lines([self.few], ["f"]))
        self.proxy = Proxy({"rd": dict(base), "rd1": dict(base, redis_db=1), "rd4": few},
                           workers=2, verbosity=6)

    def where(self, db, keys):
        """{key: [index of each server holding it in database db]}."""
        out = {k: [] for k in keys}
        for i, b in enumerate(self.backends):
            with b.client() as c:
                eq(c.rd("SELECT", str(db)), "OK")
                for k in keys:
                    if c.rd("EXISTS", k) == 1:
                        out[k].append(i)
        return out


def one_each(env, db, keys, spread=True):
    """Every key in database db of exactly one server (and, with spread, the keys over more
    than one server: every server is served in that database, not one)."""
    held = env.where(db, keys)
    check(all(len(v) == 1 for v in held.values()), "each key on one server in db %d: %s"
          % (db, held))
    if spread:
        check(len({v[0] for v in held.values()}) >= 2, "keys over several servers in db %d" % db)
    return held


@R.test
def redis_py_db_2(env):
    """redis-py's Redis(db=2) (SELECT 2 on each connection) writes database 2 of the key's
    owner, reads it back, and database 0 holds none of it."""
    try:
        import redis
    except ImportError:
        raise Skip("python3-redis not installed")
    host, port = env.proxy.addr("rd")
    p = unique().decode()
    keys = ["%s:%d" % (p, i) for i in range(40)]
    r2 = redis.Redis(host=host, port=port, db=2, socket_timeout=10)
    r0 = redis.Redis(host=host, port=port, socket_timeout=10)
    try:
        for i, k in enumerate(keys):
            check(r2.set(k, "v%d" % i), "set")
        eq(r2.mget(keys), [b"v%d" % i for i in range(40)], "MGET over the servers in db 2")
        eq(r0.mget(keys), [None] * 40, "db 0 through the proxy has none")
        one_each(env, 2, keys)
        eq(sum(len(v) for v in env.where(0, keys).values()), 0, "nothing written to db 0")
        pipe = r2.pipeline(transaction=False)
        for k in keys:
            pipe.incr(k + ":n")
        eq(pipe.execute(), [1] * 40)
        one_each(env, 2, [k + ":n" for k in keys])
        eq(r2.delete(*keys), 40, "DEL over the servers in db 2")
    finally:
        r2.close()
        r0.close()


@R.test
def redis_cli_n(env):
    """redis-cli -n 3 (SELECT at connect, as every later command of it)."""
    cli = shutil.which("redis-cli")
    if not cli:
        raise Skip("redis-cli not installed")
    host, port = env.proxy.addr("rd")
    k = unique().decode() + ":cli"
    out = subprocess.run([cli, "-h", host, "-p", str(port), "-n", "3", "SET", k, "x"],
                         capture_output=True, text=True, timeout=20)
    eq(out.stdout.strip(), "OK", out.stderr)
    held = env.where(3, [k])
    eq(len(held[k]), 1, "in db 3 of its owner")
    out = subprocess.run([cli, "-h", host, "-p", str(port), "-n", "3", "GET", k],
                         capture_output=True, text=True, timeout=20)
    eq(out.stdout.strip(), "x")


@R.test
def select_back_and_forth(env):
    """One connection moving between databases: each request goes where it was asked, in
    order (pipelined across SELECTs too)."""
    k = unique() + b":bf"
    with env.proxy.client("rd") as c:
        eq(c.rd("SELECT", "2"), "OK")
        eq(c.rd("SET", k, "two"), "OK")
        eq(c.rd("SELECT", "0"), "OK")
        eq(c.rd("GET", k), None)
        eq(c.rd("SET", k, "zero"), "OK")
        # pipelined: replies in order, each request in its database
        c.send(harness.resp_encode("SELECT", "2") + harness.resp_encode("GET", k) +
               harness.resp_encode("SELECT", "5") + harness.resp_encode("GET", k) +
               harness.resp_encode("SET", k, "five") + harness.resp_encode("SELECT", "0") +
               harness.resp_encode("GET", k))
        eq([c.read_resp() for _ in range(7)], ["OK", b"two", "OK", None, "OK", "OK", b"zero"])
        info = dict(kv.split("=", 1) for kv in c.rd("CLIENT", "INFO").decode().split())
        eq(info["db"], "0")
    for db, want in ((0, b"zero"), (2, b"two"), (5, b"five")):
        held = env.where(db, [k.decode()])
        eq(len(held[k.decode()]), 1, "db %d" % db)
        with env.backends[held[k.decode()][0]].client() as d:
            d.rd("SELECT", str(db))
            eq(d.rd("GET", k), want)


@R.test
def transactions_and_blocking_in_the_database(env):
    """MULTI/EXEC, WATCH and a blocking BLPOP run on pinned connections in the client's
    database; SELECT inside a transaction is refused (it would not move the pin)."""
    p = unique()
    with env.proxy.client("rd") as c, env.proxy.client("rd") as b, \
            env.proxy.client("rd") as w:
        eq(c.rd("SELECT", "4"), "OK")
        eq(c.rd("MULTI"), "OK")
        eq(c.rd("SET", p + b":t", "1"), "QUEUED")
        eq(c.rd("INCR", p + b":t"), "QUEUED")
        eq(c.rd("EXEC"), ["OK", 2])
        eq(c.rd("MULTI"), "OK")
        check(isinstance(c.rd("SELECT", "1"), RespError), "SELECT inside MULTI refused")
        eq(c.rd("DISCARD"), "OK")
        eq(c.rd("WATCH", p + b":t"), "OK")
        eq(c.rd("SELECT", "1"), RespError("ERR SELECT after WATCH is not supported by "
                                          "ringleader: SELECT before WATCH"))
        eq(c.rd("MULTI"), "OK")
        eq(c.rd("INCR", p + b":t"), "QUEUED")
        eq(c.rd("EXEC"), [3])
        one_each(env, 4, [(p + b":t").decode()], spread=False)
        eq(b.rd("SELECT", "4"), "OK")
        b.send(harness.resp_encode("BLPOP", p + b":q", "0"))
        eq(w.rd("SELECT", "4"), "OK")
        # the push must come after the BLPOP reached its server: retry until it is popped
        deadline = time.monotonic() + patience(10)
        got = None
        while got is None and time.monotonic() < deadline:
            w.rd("RPUSH", p + b":q", "job")
            try:
                got = b.read_resp(timeout=0.2)
            except TimeoutError:
                pass
        eq(got, [p + b":q", b"job"], "BLPOP in db 4 woke")
        w.rd("DEL", p + b":q")
        eq(c.rd("GET", p + b":t"), b"3")


@R.test
def pubsub_is_database_independent(env):
    """A subscriber in database 0 gets what a client in database 5 publishes, as on Redis."""
    ch = unique() + b":ch"
    with env.proxy.client("rd") as s, env.proxy.client("rd") as pub:
        eq(s.rd("SUBSCRIBE", ch), [b"subscribe", ch, 1])
        eq(pub.rd("SELECT", "5"), "OK")
        eq(pub.rd("PUBLISH", ch, "hi"), 1)
        eq(s.read_resp(), [b"message", ch, b"hi"])


@R.test
def errors_as_redis(env):
    """Out of range, negative, not a number: a redis-server's errors (it has 16 databases,
    the proxy serves 0..15)."""
    with env.proxy.client("rd") as p, env.direct.client() as d:
        for db in ("16", "-1", "x", "99999999999999999999", "15"):
            eq(p.rd("SELECT", db), d.rd("SELECT", db), "SELECT %s" % db)


@R.test
def pool_with_its_own_db(env):
    """A pool with redis_db: 1: its clients start in 1, SELECT 0 reaches database 0 (the
    connection's hello selects nothing there), RESET goes back to the pool's."""
    k = unique() + b":p1"
    with env.proxy.client("rd1") as c:
        eq(c.rd("SET", k, "one"), "OK")
        eq(c.rd("SELECT", "0"), "OK")
        eq(c.rd("SET", k, "zero"), "OK")
        eq(c.rd("RESET"), "RESET")
        eq(c.rd("GET", k), b"one")
    for db, want in ((1, b"one"), (0, b"zero")):
        held = env.where(db, [k.decode()])
        eq(len(held[k.decode()]), 1, "db %d" % db)
        with env.backends[held[k.decode()][0]].client() as d:
            d.rd("SELECT", str(db))
            eq(d.rd("GET", k), want)


@R.test
def reload_keeps_the_database(env):
    """A reload (the pool's settings refreshed in every client) keeps a client's SELECT."""
    import signal
    k = unique() + b":rl"
    with env.proxy.client("rd") as c:
        eq(c.rd("SELECT", "7"), "OK")
        env.proxy.pools["rd"]["timeout"] = 9000
        env.proxy.rewrite()
        done = b"every worker runs the new configuration"
        with open(env.proxy.log_file, "rb") as f:
            seen = f.read().count(done)
        os.kill(env.proxy.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + patience(10)
        while time.monotonic() < deadline:
            with open(env.proxy.log_file, "rb") as f:
                if f.read().count(done) > seen:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("no reload in the log")
        eq(c.rd("PING"), "PONG")
        eq(c.rd("SET", k, "seven"), "OK")
        info = dict(kv.split("=", 1) for kv in c.rd("CLIENT", "INFO").decode().split())
        eq(info["db"], "7")
    eq(len(env.where(7, [k.decode()])[k.decode()]), 1, "written in db 7 after the reload")


@R.test
def a_server_without_the_database(env):
    """A server with 4 databases refuses the connection's SELECT 8: the client's requests
    get an error, and the server is not taken for down (it ejected a server that every
    other client could use)."""
    k = unique() + b":few"
    with env.proxy.client("rd4") as c, env.proxy.client("rd4") as other:
        eq(c.rd("SELECT", "8"), "OK")     # the proxy serves 0..15; this server has 4
        for _ in range(3):
            r = c.rd("GET", k)
            check(isinstance(r, RespError) and "refused SELECT" in str(r), "GET: %r" % r)
        eq(other.rd("SET", k, "v"), "OK")
        eq(other.rd("GET", k), b"v")
    eq(env.proxy.stats()["rd4"]["server_ejects"], 0, "server_ejects")


PHP_SESSION = r"""<?php
ini_set('session.save_handler', 'redis');
ini_set('session.save_path', 'tcp://127.0.0.1:%PORT%?database=2');
session_id('%SID%');
session_start();
$_SESSION['n'] = 42;
session_write_close();
echo "written\n";
"""


@R.test
def phpredis_session_database_2(env):
    """phpredis's session handler with ?database=2 (it SELECTs and took the refusal as a
    silent false, writing database 0): the session lands in database 2."""
    php = shutil.which("php")
    if not php:
        raise Skip("php-cli not installed")
    mods = subprocess.run([php, "-m"], capture_output=True, text=True, timeout=20).stdout
    if "redis" not in mods.split():
        raise Skip("php-redis not installed (scripts/deps)")
    sid = "rlsel" + unique().decode().replace(":", "")[-20:]
    code = PHP_SESSION.replace("%PORT%", str(env.proxy.addr("rd")[1])).replace("%SID%", sid)
    out = subprocess.run([php, "-r", code[len("<?php"):]], capture_output=True, text=True,
                         timeout=30)
    eq(out.stdout.strip(), "written", out.stderr[-500:])
    key = "PHPREDIS_SESSION:" + sid
    held = env.where(2, [key])
    eq(len(held[key]), 1, "the session in db 2")
    eq(sum(len(v) for v in env.where(0, [key]).values()), 0, "not in db 0")


if __name__ == "__main__":
    R.main(Env)
