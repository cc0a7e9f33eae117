"""test_routes.py: `routes` send keys with a prefix to another pool, whichever listener they came in on."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Memcached, Proxy, Runner, check, eq, server_lines, unique  # noqa: E402

R = Runner("test_routes", per_test_timeout=60, total_timeout=90)


def dump(doc):
    """The harness's YAML plus the routes list, which is a list of mappings."""
    out = []
    for name, pool in doc.items():
        out.append("%s:" % name)
        for k, v in pool.items():
            if k == "routes":
                out.append("  routes:")
                out.extend('    - {prefix: "%s", pool: %s}' % (p, t) for p, t in v)
            elif isinstance(v, list):
                out.append("  %s:" % k)
                out.extend("   - %s" % x for x in v)
            else:
                out.append("  %s: %s" % (k, v))
    return "\n".join(out) + "\n"


class Env(harness.Env):
    def __init__(self):
        self.main = [Memcached.start() for _ in range(2)]
        self.users = [Memcached.start() for _ in range(2)]
        self.proxy = Proxy({
            "main": {"hash": "md5", "distribution": "ketama",
                     "servers": server_lines(self.main, ["m1", "m2"]),
                     "routes": [("user:", "users")]},
            "users": {"hash": "md5", "distribution": "ketama",
                      "servers": server_lines(self.users, ["u1", "u2"])},
        }, dump=dump)
        self.backends = self.main + self.users


def held_by(backends, keys):
    return {k for b in backends for k in b.get_many(keys)}


@R.test(ringleader=True, nutcracker_reason="routes are ringleader's")
def prefixed_keys_go_to_the_routed_pool(env):
    tag = unique()
    routed = [b"user:%s:%d" % (tag, i) for i in range(50)]
    plain = [b"item:%s:%d" % (tag, i) for i in range(50)]
    with env.proxy.client("main") as c:
        for k in routed + plain:
            eq(c.mc_store(b"set", k, b"v" + k), b"STORED\r\n")
        got = c.mc_get(b"get", *routed[:10])           # a multi-get, all routed
        eq([g[0] for g in got], routed[:10])
        got = c.mc_get(b"get", *plain[:10])
        eq([g[0] for g in got], plain[:10])
        # one request whose keys belong to two pools is refused, and nothing is sent
        r = c.mc(b"get " + routed[0] + b" " + plain[0])
        check(r.startswith(b"SERVER_ERROR"), "mixed pools: %r", r)
        eq(c.mc_get(b"get", plain[1]), [(plain[1], 0, b"v" + plain[1], None)], "usable after")
    eq(held_by(env.users, routed), set(routed), "routed keys live on the users pool")
    eq(held_by(env.main, routed), set(), "and not on the main pool")
    eq(held_by(env.main, plain), set(plain), "other keys stay on the main pool")
    eq(held_by(env.users, plain), set(), "and never reach the users pool")
    # the users pool's own listener places them the same way
    with env.proxy.client("users") as c:
        eq(c.mc_get(b"get", routed[0]), [(routed[0], 0, b"v" + routed[0], None)])


if __name__ == "__main__":
    R.main(Env)
