"""test_node_clients.py: ioredis and node-redis 4 (npm, pinned in tests/clients/package.json) through the proxy and at one redis-server.

tests/clients/clients.js runs each client as an application would — multi(), the WATCH retry
loop, scan streams and iterators, a BLPOP worker queue — once through the proxy (4
redis-servers, hash_tag {}) and once straight at a lone redis-server, and requires the same
results; a transaction whose keys are on two servers must be refused. Skipped when node or
the packages (scripts/deps runs `npm ci` in tests/clients) are missing.
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (TOP_SRCDIR, Proxy, Redis, Runner, Skip, check,  # noqa: E402
                     server_lines)

R = Runner("test_node_clients", per_test_timeout=120, total_timeout=150)
NODE_DIR = os.path.join(TOP_SRCDIR, "tests", "clients")


class Env(harness.Env):
    def __init__(self):
        if os.environ.get("RL_PROXY_ADDR") or os.environ.get("RL_REDIS_PROXY_ADDR"):
            raise Skip("compares the proxy's backends with a server of its own")
        if os.environ.get("RL_PROXY", "ringleader") != "ringleader":
            raise Skip("documents ringleader's behaviour")
        self.node = shutil.which("node") or shutil.which("nodejs")
        if not self.node:
            raise Skip("node not installed (scripts/deps)")
        for pkg in ("ioredis", "redis4"):   # redis4: node-redis 4 under an npm alias
            if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", pkg)):
                raise Skip("npm package %s not installed: npm ci in tests/clients (scripts/deps)" % pkg)
        self.backends = [Redis.start() for _ in range(4)]
        self.direct = Redis.start()
        self.more_backends = [self.direct]
        self.proxy = Proxy({"rd": {"redis": True, "hash": "fnv1a_64", "distribution": "ketama",
                                   "hash_tag": "{}", "timeout": 2000, "auto_eject_hosts": False,
                                   "servers": server_lines(self.backends, ["a", "b", "c", "d"])}})


@R.test
def ioredis_and_node_redis(env):
    out = subprocess.run([env.node, os.path.join(NODE_DIR, "clients.js"),
                          str(env.proxy.addr()[1]), str(env.direct.port)],
                         capture_output=True, text=True, timeout=100, cwd=NODE_DIR,
                         stdin=subprocess.DEVNULL)
    print(out.stdout.rstrip())
    if out.stderr.strip():
        print(out.stderr.rstrip()[-2000:])
    check(out.returncode == 0 and " 0 failed" in out.stdout, "node clients failed (exit %d)" % out.returncode)


if __name__ == "__main__":
    R.main(Env)
