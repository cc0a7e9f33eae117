"""The settings every part of the harness reads: which proxy, where the tree and the
built programs are, the bounds against a hang (patience), and the two exceptions."""

import os
import sys

SKIP = 77
PROXY_KIND = os.environ.get("RL_PROXY", "ringleader")
if PROXY_KIND not in ("ringleader", "nutcracker"):
    sys.stderr.write("RL_PROXY must be ringleader or nutcracker\n")
    sys.exit(1)

# tests/integration/harness/ -> tests/integration (where the test files are) -> the tree
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP_SRCDIR = os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))
TOP_BUILDDIR = os.environ.get("top_builddir") or os.path.join(TOP_SRCDIR, "build", "release")
VECTORS = os.path.join(TOP_SRCDIR, "tests", "vectors", "twemproxy")

START_TIMEOUT = 10.0   # seconds for a process to accept connections
IO_TIMEOUT = 10.0      # default seconds for one socket read


class Skip(Exception):
    """Raised by a test (or a fixture) that cannot run here; counted as skipped."""


class StartError(Exception):
    """A process did not come up; carries the tail of its log."""


def binary(name):
    """Path of one of our built programs (ringleader, ringleader-ring), or raise Skip."""
    for d in (TOP_BUILDDIR, os.path.join(TOP_BUILDDIR, "src")):
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise Skip("%s not built in %s" % (name, TOP_BUILDDIR))


_sanitized = []


def sanitized():
    """Whether the ringleader under test is the ASan/UBSan build (slower, and its RSS is
    mostly the sanitizer's own)."""
    if not _sanitized:
        try:
            with open(binary("ringleader"), "rb") as f:
                _sanitized.append(b"__asan_init" in f.read())
        except (OSError, Skip):
            _sanitized.append(False)
    return _sanitized[0]


def slow_factor():
    """How much slower than an idle machine this run may be: RL_TEST_SLOW when set, else 3
    for the sanitizer build (ASan+UBSan on a loaded 2-core machine), else 1."""
    v = os.environ.get("RL_TEST_SLOW")
    if v:
        try:
            return max(1.0, float(v))
        except ValueError:
            pass
    return 3.0 if sanitized() else 1.0


def patience(seconds):
    """A bound against a hang, scaled by slow_factor(). Tests assert on outcomes (bytes,
    counts, order); a wall-clock bound only says the work did not hang, so it must hold on
    the slowest machine the suite runs on."""
    return seconds * slow_factor()


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1", int(port))
