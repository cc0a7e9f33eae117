"""The proxy under test and the environments the test files set up around it."""

import os
import subprocess

from .backends import Redis
from .common import IO_TIMEOUT, PROXY_KIND, StartError, Skip, binary, parse_addr
from .procs import Proc, free_port, tmpdir
from .runner import eq
from .wire import Raw, read_stats
from .yamlconf import server_lines, yaml_dump


def ring_owners(conf, pool, keys, timeout=60):
    """{key: owner label} for keys (bytes) from `ringleader-ring --tsv` on a config file:
    the placement the proxy must follow. Every key must be answered."""
    r = subprocess.run([binary("ringleader-ring"), "-c", conf, "-p", pool, "--tsv"],
                       input=b"".join(k + b"\n" for k in keys), capture_output=True,
                       timeout=timeout)
    eq(r.returncode, 0, "ringleader-ring --tsv exit (%s)" % r.stderr[-300:])
    out = {}
    for line in r.stdout.splitlines():
        k, _, owner = line.rpartition(b"\t")
        out[k] = owner.decode()
    eq(sorted(out), sorted(keys), "ringleader-ring --tsv answers every key")
    return out


NAMES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


class Proxy:
    """The proxy under test (RL_PROXY) started on a generated YAML, or an external one.

    pools: {name: {...pool keys...}}; a pool's `listen` is filled in with a free port
    when absent. addr(pool) is where that pool listens."""

    def __init__(self, pools, kind=PROXY_KIND, workers=2, verbosity=5, glob=None, dump=None,
                 env=None, admin=False, args=()):
        """glob: the top-level `ringleader:` section (not a pool: it gets no listen);
        dump: the YAML writer (default yaml_dump; mapping-form servers need their own);
        env: the process's environment (default ours); admin: the admin endpoint on a free
        port (admin_port), a new one at each try like the pools' and waited for too."""
        self.kind = kind
        self.pools = pools
        self.glob = dict(glob or {})
        self.dump = dump or yaml_dump
        self.env = env
        self.admin = admin
        self.args = list(args)
        self.proc = None
        last = None
        for _ in range(3):
            try:
                self._start(workers, verbosity)
                return
            except StartError as e:
                last = e
                for p in self.pools.values():
                    p.pop("listen", None)
        raise last

    def _start(self, workers, verbosity):
        d = tmpdir()
        for p in self.pools.values():
            p.setdefault("listen", "127.0.0.1:%d" % free_port())
        self.stats_port = free_port()
        ports = [parse_addr(p["listen"])[1] for p in self.pools.values()] + [self.stats_port]
        if self.admin:
            self.admin_port = free_port()
            self.glob["admin"] = "127.0.0.1:%d" % self.admin_port
            ports.append(self.admin_port)
        n = len(os.listdir(d))
        self.conf_path = os.path.join(d, "proxy-%d.yml" % n)
        self._write_conf()
        pid = os.path.join(d, "proxy-%d.pid" % n)
        log = os.path.join(d, "proxy-%d.out" % n)
        if self.kind == "nutcracker":
            argv = ["nutcracker", "-c", self.conf_path, "-s", str(self.stats_port),
                    "-a", "127.0.0.1", "-i", "1000", "-p", pid, "-o", log,
                    "-v", str(verbosity)]
        else:
            argv = [binary("ringleader"), "-c", self.conf_path, "-s", str(self.stats_port),
                    "-a", "127.0.0.1", "-p", pid, "-o", log, "-v", str(verbosity),
                    "--workers", str(workers)] + self.args
        self.log_file = log
        self.proc = Proc(self.kind, argv, env=self.env)
        try:
            for port in ports:
                self.proc.wait_listening(port)
        except StartError as e:
            self.proc.stop()
            raise StartError("%s\n--- %s log:\n%s" % (e, self.kind, self.log_tail()))

    def _write_conf(self):
        """The file from pools and glob, written whole then renamed over the old one: a
        reload never reads half a file."""
        doc = dict(self.pools)
        if self.glob:
            doc["ringleader"] = self.glob
        tmp = self.conf_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(self.dump(doc))
        os.rename(tmp, self.conf_path)

    def rewrite(self, pools=None, glob=None):
        """Write the configuration file again from pools and glob (default: the current
        ones, which a test may have changed in place) for a reload the caller triggers. A
        pool of the running file keeps its listen address unless pools give one; a new
        pool gets a free port."""
        if pools is not None:
            for name, p in pools.items():
                if "listen" not in p:
                    old = self.pools.get(name)
                    p["listen"] = old["listen"] if old else "127.0.0.1:%d" % free_port()
            self.pools = pools
        if glob is not None:
            self.glob = dict(glob)
        self._write_conf()

    def addr(self, pool=None):
        if pool is None:
            pool = next(iter(self.pools))
        return parse_addr(self.pools[pool]["listen"])

    def client(self, pool=None, timeout=IO_TIMEOUT):
        return Raw(self.addr(pool), timeout)

    def log_tail(self, n=30):
        try:
            with open(self.log_file, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except (OSError, AttributeError):
            return self.proc.log_tail(n) if self.proc else ""

    def stats(self):
        """The stats port's JSON document."""
        return read_stats(self.stats_port)

    def stop(self):
        if self.proc:
            return self.proc.stop()
        return None


class Env:
    """The base of every test file's setup (what its Runner's setup() returns): what it
    started, stopped by close() (each process by its PID), and diagnostics(), the proxy's
    log tail the Runner prints after a failure.

    A subclass's __init__ starts what it needs and records it:
      self.proxy          the proxy the tests talk to (an instance attribute; a subclass may
                          name a method `proxy` instead, then it records none here)
      self.proxies        more proxies it started: a list, or a dict (a cache by pool keys)
      self.backends       the servers of its pools
      self.more_backends  other servers it started (a reference server, a cluster, one a
                          test adds): stopped with the rest
    LOG_LINES is how many lines of the proxy's log diagnostics() prints."""
    external = False
    proxy = None
    proxies = ()
    backends = ()
    more_backends = ()
    LOG_LINES = 30

    @staticmethod
    def need_own_proxy(why, ringleader_why=None):
        """Skip(why) when RL_PROXY_ADDR or RL_REDIS_PROXY_ADDR names a running proxy (for a
        file that starts its own, to see, reload or kill what is behind it); and, when
        ringleader_why is given, Skip(ringleader_why) under RL_PROXY=nutcracker."""
        if os.environ.get("RL_PROXY_ADDR") or os.environ.get("RL_REDIS_PROXY_ADDR"):
            raise Skip(why)
        if ringleader_why is not None and PROXY_KIND != "ringleader":
            raise Skip(ringleader_why)

    def _proxy(self):
        p = self.proxy
        return p if hasattr(p, "stop") and hasattr(p, "log_tail") else None   # not a method

    def diagnostics(self):
        p = self._proxy()
        return "--- proxy log tail:\n" + p.log_tail(self.LOG_LINES) if p is not None else ""

    def close(self):
        """Proxies first (the one tests talk to, then the others), then every server."""
        started = list(self.proxies.values() if isinstance(self.proxies, dict) else self.proxies)
        p = self._proxy()
        if p is not None and not any(p is q for q in started):
            started.insert(0, p)
        for p in started:
            p.stop()
        for b in list(self.backends) + list(self.more_backends):
            b.stop()


class PoolEnv(Env):
    """One test file's setup: backends it starts itself and a proxy in front of them, one
    proxy per distinct pool (cached), or the running proxy an environment variable names.

    A subclass sets POOL (the pool's name), BASE (pool keys of every proxy it starts),
    EXTERNAL (the variable naming a running proxy of its protocol), OTHER and OTHER_WHY
    (the other protocol's variable, which makes the file skip) and start_backends()."""
    POOL = None
    BASE = {}
    EXTERNAL = None
    OTHER = None
    OTHER_WHY = ""

    def __init__(self):
        self.external = False
        self.backends = []
        self.more_backends = []      # started later by a test; stopped with the rest
        self.proxies = {}
        ext = os.environ.get(self.EXTERNAL)
        if ext:
            self.external = True
            self.proxy = ExternalProxy(ext)
            return
        if os.environ.get(self.OTHER):
            raise Skip(self.OTHER_WHY)
        self.backends = self.start_backends()
        self.proxy = self.with_pool()

    def start_backends(self):
        raise NotImplementedError

    def pool(self, backends=None, **extra):
        backends = backends or self.backends
        # timeout: the pool's answer deadline, a bound against a hung server. These files
        # never test it (test_limits and test_faults do, with their own); under a loaded
        # sanitizer run a real server can sit 2 s on a 16 MiB value, so it is generous.
        p = {"hash": "md5", "distribution": "ketama", "timeout": 10000, **self.BASE,
             "auto_eject_hosts": False, "servers": server_lines(backends, NAMES[:len(backends)])}
        p.update(extra)
        return p

    def with_pool(self, backends=None, **extra):
        """A proxy on backends (default: the file's) with extra pool keys."""
        backends = backends or self.backends
        key = (tuple(b.port for b in backends), tuple(sorted(extra.items())))
        if key not in self.proxies:
            self.proxies[key] = Proxy({self.POOL: self.pool(backends, **extra)})
        return self.proxies[key]

    def client(self, **extra):
        return (self.with_pool(**extra) if extra else self.proxy).client()


class RedisPoolEnv(PoolEnv):
    """The setup of a Redis test file: 4 redis-servers behind pool "rd"."""
    POOL = "rd"
    BASE = {"redis": True}
    EXTERNAL = "RL_REDIS_PROXY_ADDR"
    OTHER = "RL_PROXY_ADDR"
    OTHER_WHY = "RL_PROXY_ADDR names a running memcache proxy; set RL_REDIS_PROXY_ADDR"

    def start_backends(self):
        return [Redis.start() for _ in range(4)]


class ExternalProxy:
    """An already-running proxy named by RL_PROXY_ADDR / RL_REDIS_PROXY_ADDR."""

    def __init__(self, addr):
        self.kind = "external"
        self._addr = parse_addr(addr)

    def addr(self, pool=None):
        return self._addr

    def client(self, pool=None, timeout=IO_TIMEOUT):
        return Raw(self._addr, timeout)

    def log_tail(self, n=30):
        return ""

    def stop(self):
        return None
