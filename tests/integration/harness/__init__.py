"""harness: real memcached/redis-server backends and the proxy on free 127.0.0.1 ports,
for the integration tests.

Every test file is a standalone script (`make check` runs it with /usr/bin/python3):
exit 0 when all its tests pass, 77 when nothing could run, 1 on any failure, and the
last line printed is "N passed, N failed, N skipped".

Environment
  RL_PROXY=ringleader|nutcracker   which proxy to start (default ringleader); tests of
                                   ringleader-only behaviour are skipped under nutcracker
  RL_PROXY_ADDR=host:port          an already-running proxy's memcache pool: nothing is
                                   started, tests that need to see the backends are skipped
  RL_REDIS_PROXY_ADDR=host:port    the same for the redis test files
  top_builddir / top_srcdir        set by `make check`; else build/release under the tree
  RL_TEST_VERBOSE=1                print each test's name and time
  RL_TEST_SLOW=N                   multiply every bound against a hang by N (default 3 for
                                   the sanitizer build, else 1; see patience())

Every process started here is stopped by its PID (SIGTERM, then SIGKILL) in a finally
block and again at exit, whatever happened. Every wait has a timeout.

The package is split by job; every public name is re-exported here, so test files keep
`import harness` / `from harness import X`:
  common    RL_PROXY, the tree and built programs, patience(), Skip, StartError
  procs     free ports, tmpdir(), Proc (stopped by its PID), stop_all (at exit too)
  wire      Raw, the memcached and RESP encoders/parsers, http(), read_stats()
  backends  Memcached, Redis, owners()
  yamlconf  yaml_dump(), ydump(), server_lines()
  env       Proxy, ExternalProxy, Env (the base of every Runner file's setup), PoolEnv,
            ring_owners()
  vectors   the twemproxy placement vectors
  runner    Runner, check(), eq(), unique()
"""

from .common import (SKIP, PROXY_KIND, HERE, TOP_SRCDIR, TOP_BUILDDIR, VECTORS, START_TIMEOUT,
                     IO_TIMEOUT, Skip, StartError, binary, sanitized, slow_factor, patience,
                     parse_addr)  # noqa: F401
from .procs import (_given_ports, free_port, port_is_free, tmpdir, _running, Proc, listener_is,
                    stop_all, _start_with_retry, wait_stopped)  # noqa: F401
from .wire import (Raw, mc_values_len, mc_parse_values, RespError, _b, resp_encode, resp3_end,
                   resp_parse, http, read_stats)  # noqa: F401
from .backends import (Memcached, Redis, owners)  # noqa: F401
from .yamlconf import (yaml_scalar, yaml_dump, ydump, server_lines)  # noqa: F401
from .env import (ring_owners, NAMES, Proxy, Env, PoolEnv, RedisPoolEnv,
                  ExternalProxy)  # noqa: F401
from .vectors import (vector_files, vector_rows, vector_pool)  # noqa: F401
from .runner import (Runner, check, eq, b64, unique)  # noqa: F401
