"""The runner of a test file (in declared order, each test bounded, exit 0/1/77) and the
assertion helpers."""

import base64
import os
import signal
import sys
import time
import traceback

from .common import PROXY_KIND, SKIP, Skip, StartError, patience
from . import procs
from .procs import stop_all
from .wire import _b


class Runner:
    """A tiny deterministic runner: tests run in the order they were declared.

    @runner.test                     runs everywhere
    @runner.test(ringleader=True)    ringleader-only behaviour: skipped under nutcracker
    @runner.test(external=True)      also runs against RL_PROXY_ADDR (talks only to the proxy)
    """

    def __init__(self, name, per_test_timeout=45, total_timeout=240):
        self.name = name
        self.tests = []
        self.per_test_timeout = per_test_timeout
        self.total_timeout = total_timeout
        self.verbose = bool(os.environ.get("RL_TEST_VERBOSE"))

    def test(self, fn=None, ringleader=False, external=False, nutcracker_reason=None,
             timeout=None):
        """timeout: this test's own budget in seconds instead of per_test_timeout (a test
        that moves a lot of bytes); scaled by patience() like the rest."""
        def deco(f):
            self.tests.append((f, ringleader, external, nutcracker_reason))
            if timeout:
                f.rl_timeout = timeout
            return f
        return deco(fn) if fn is not None else deco

    def run(self, setup, argv=None):
        """setup() returns the environment object passed to every test (or raises Skip).
        Exits the process with 0, 1 or 77."""
        argv = sys.argv[1:] if argv is None else argv
        passed = failed = skipped = 0
        # Both budgets are bounds against a hang, not speed targets: scaled by patience().
        total_timeout = int(patience(self.total_timeout))
        budget = [0]

        def on_alarm(signum, frame):
            raise TimeoutError("test took longer than %ds" % budget[0])
        signal.signal(signal.SIGALRM, on_alarm)
        env = None
        try:
            try:
                env = setup()
            except (StartError, OSError) as e:
                print("FAIL %s: setup: %s" % (self.name, e))
                print("0 passed, %d failed, 0 skipped" % len(self.tests))
                sys.stdout.flush()
                return 1
            except Skip as e:
                print("SKIP %s: %s" % (self.name, e))
                print("0 passed, 0 failed, %d skipped" % len(self.tests))
                sys.stdout.flush()
                return SKIP
            # the budget is the tests' (setup is bounded by its own waits, and may queue
            # for a resource another program holds)
            deadline = time.monotonic() + total_timeout
            for f, rl_only, ext_ok, why in self.tests:
                tname = f.__name__
                if argv and not any(a in tname for a in argv):
                    continue
                if rl_only and PROXY_KIND == "nutcracker" and not getattr(env, "external", False):
                    skipped += 1
                    print("skip %s (ringleader-only%s)" % (tname, ": " + why if why else ""))
                    continue
                if getattr(env, "external", False) and not ext_ok:
                    skipped += 1
                    print("skip %s (needs the harness's own backends)" % tname)
                    continue
                if time.monotonic() > deadline:
                    failed += 1
                    print("FAIL %s: file time budget of %ds spent" % (tname, total_timeout))
                    continue
                t0 = time.monotonic()
                budget[0] = int(patience(getattr(f, "rl_timeout", self.per_test_timeout)))
                signal.alarm(budget[0])
                try:
                    f(env)
                    passed += 1
                    if self.verbose:
                        print("ok   %s (%.2fs)" % (tname, time.monotonic() - t0))
                except Skip as e:
                    skipped += 1
                    print("skip %s (%s)" % (tname, e))
                except BaseException as e:   # noqa: B036 - a test must never stop the run
                    if isinstance(e, (KeyboardInterrupt, SystemExit)):
                        raise
                    failed += 1
                    print("FAIL %s (%.2fs)" % (tname, time.monotonic() - t0))
                    traceback.print_exc(file=sys.stdout)
                    if env is not None and hasattr(env, "diagnostics"):
                        print(env.diagnostics())
                finally:
                    signal.alarm(0)
                sys.stdout.flush()
        finally:
            if env is not None and hasattr(env, "close"):
                env.close()
            stop_all()
        for name, why, tail in procs.bad_exits:
            failed += 1
            print("FAIL %s: %s ended badly: %s\n%s" % (self.name, name, why, tail))
        print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
        sys.stdout.flush()
        if failed:
            return 1
        return 0 if passed else SKIP

    def main(self, setup):
        sys.exit(self.run(setup))


def check(cond, msg="check failed", *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


def eq(got, want, what=""):
    if got != want:
        if isinstance(got, list) and isinstance(want, list):
            for i, (a, b) in enumerate(zip(got, want)):
                if a != b:
                    raise AssertionError("%sitem %d of %d/%d: %r != %r" % (
                        what + ": " if what else "", i, len(got), len(want),
                        repr(a)[:300], repr(b)[:300]))
        g, w = repr(got), repr(want)
        raise AssertionError("%s%s != %s" % (what + ": " if what else "",
                                             g[:300], w[:300]))


def b64(key):
    return base64.b64encode(_b(key))


_seq = [0]


def unique(prefix="k"):
    """A key prefix no earlier test in this process used."""
    _seq[0] += 1
    return ("%s%d-%d" % (prefix, os.getpid(), _seq[0])).encode()
