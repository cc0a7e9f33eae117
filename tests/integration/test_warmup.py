"""test_warmup.py: after a reload adds a server, moved keys are found on their previous owner and copied."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Memcached, Proxy, Runner, check, eq, server_lines,  # noqa: E402
                     unique, yaml_dump)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_warmup", per_test_timeout=60, total_timeout=120)


class Env(harness.Env):
    def __init__(self):
        self.backends = [Memcached.start() for _ in range(3)]

    def proxy(self, warmup):
        pool = {"hash": "md5", "distribution": "ketama", "timeout": 2000,
                "servers": server_lines(self.backends[:2], NAMES[:2])}
        if warmup:
            pool["warmup"] = warmup
        return Proxy({"mc": pool})


def add_third_server(env, proxy):
    """Rewrite the proxy's file with a third server and reload; wait for the new epoch."""
    before = proxy.stats()["mc"]["epoch"]
    pool = proxy.pools["mc"]
    pool["servers"] = server_lines(env.backends, NAMES[:3])
    with open(proxy.conf_path, "w") as f:
        f.write(yaml_dump(proxy.pools))
    os.kill(proxy.proc.popen.pid, signal.SIGHUP)
    deadline = time.monotonic() + patience(5)
    while proxy.stats()["mc"]["epoch"] == before:
        check(time.monotonic() < deadline, "no reload within 5 s")
        time.sleep(0.05)


def fill(c, keys):
    for i, k in enumerate(keys):
        eq(c.mc_store(b"set", k, b"v" + k, flags=i % 7, exptime=3600), b"STORED\r\n")


@R.test(ringleader=True, nutcracker_reason="warm-up is ringleader's")
def moved_keys_are_found_and_copied(env):
    keys = [b"%d:%s" % (i, unique()) for i in range(300)]
    proxy = env.proxy(warmup=60)
    try:
        with proxy.client() as c:
            fill(c, keys)
            add_third_server(env, proxy)
            # every key, moved or not, is still a hit, with its flags
            for i, k in enumerate(keys):
                eq(c.mc_get(b"get", k), [(k, i % 7, b"v" + k, None)], "get %r" % k)
            # gets of a moved key carries a cas unique
            got = c.mc_get(b"gets", keys[0])
            check(len(got) == 1 and got[0][3] is not None, "gets returns a cas: %r", got)
        st = proxy.stats()["mc"]
        moved = [k for k in keys if k in env.backends[2].get_many(keys)]
        check(len(moved) > 30, "the new server owns a share of the keys: %d", len(moved))
        eq(st["warm_hits"], len(moved), "every moved key was found on its previous owner")
        check(st["warm_retries"] >= len(moved), "retries %d < moved %d", st["warm_retries"], len(moved))
        eq(st["misses"], 0, "no miss seen by the client")
        # the copies kept flags and TTL: ask the new owner directly with meta get
        with env.backends[2].client() as d:
            for k in moved[:20]:
                d.send(b"mg " + k + b" f t v\r\n")
                head, val = d.read_meta()
                toks = head.split()
                eq(toks[0], b"VA")
                check(any(t.startswith(b"f") and int(t[1:]) == keys.index(k) % 7 for t in toks),
                      "flags copied: %r", head)
                check(any(t.startswith(b"t") and 3000 < int(t[1:]) <= 3600 for t in toks),
                      "TTL copied: %r", head)
                eq(val, b"v" + k)
    finally:
        proxy.stop()


@R.test(ringleader=True, nutcracker_reason="warm-up is ringleader's")
def without_warmup_moved_keys_miss(env):
    keys = [b"%d:%s" % (i, unique()) for i in range(300)]
    proxy = env.proxy(warmup=None)
    try:
        with proxy.client() as c:
            fill(c, keys)
            add_third_server(env, proxy)
            misses = sum(1 for k in keys if c.mc_get(b"get", k) == [])
        check(misses > 30, "moved keys miss without warm-up: %d", misses)
        st = proxy.stats()["mc"]
        eq(st["warm_retries"], 0)
        eq(st["misses"], misses)
    finally:
        proxy.stop()


if __name__ == "__main__":
    R.main(Env)
