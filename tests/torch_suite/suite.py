"""PyTorch's own torch.distributed conformance suite on one backend.

    python3 tests/torch_suite/suite.py --backend chorus|gloo --ranks N --out DIR [-k PAT]...

(tests/torch_suite/run.sh picks the interpreter and PYTHONPATH of a torch line and calls
this.) It runs torch.testing._internal.distributed.distributed_test's
DistributedTest._DistTestBase through TestDistBackend, as pytorch's
test/distributed/test_distributed_spawn.py does (that file is not in the wheel): each test
starts WORLD_SIZE rank processes. --start spawn is that file's way: each rank re-imports
this file as __mp_main__, so everything below the argument parsing runs in it too (import
chorus.torch, which registers the backend; the DistTestCases features, declared before
distributed_test is imported, since its decorators read BACKEND and
DistTestCases.backend_feature when its class body runs). --start fork (the default, what
MultiProcessTestCase._fork_processes did until torch 2.0) forks the parent, which has done
all that already: about 0.3 s a test against 10-15 s on 2 cores, same outcomes.

Environment as pytorch's run_test.py sets it: BACKEND, WORLD_SIZE, INIT_METHOD=env://,
MASTER_ADDR/MASTER_PORT (a free port), TEMP_DIR (TestDistBackend.setUp makes a fresh one
per test, with barrier/ and test_dir/; the ranks' process group itself rendezvous over a
file://, TestDistBackend.init_method). DISTRIBUTED_TESTS_DEFAULT_TIMEOUT / --timeout is the
per-test limit the suite enforces itself (it terminates the ranks: an ERROR "TIMEOUT").

Output: one line per test on stdout (PASS/FAIL/ERROR/SKIP, seconds, reason), then
"N tests, N passed, N failed, N errors, N skipped". In --out: results.tsv (written as the
run goes: test, outcome, seconds, reason), results.json (at the end: meta, with the build
and commit tested, and every test), logs/<test>.rank<r>.log (each rank's stdout and
stderr), logs/<test>.err (the full error), driver.log (the suite's own output).
compare.py compares two such directories.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

# Features a backend can declare in DistTestCases.backend_feature (common_distributed.py):
# "gpu"/"cuda" (tests on CUDA tensors; chorus is CPU only), "ddp" (DistributedDataParallel
# tests), "subgroup" (new_group / new_subgroups tests), "plugin" (a third-party backend
# registered with Backend.register_backend: require_backend_is_available accepts it).
DEFAULT_FEATURES = {"chorus": "plugin,ddp,subgroup"}


def _free_port():
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parse_args():
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True, help="chorus, gloo (or any registered)")
    p.add_argument("--ranks", type=int, default=3, help="WORLD_SIZE (default 3)")
    p.add_argument("--out", default=None, help="result directory (default: a new one in /tmp)")
    p.add_argument("-k", dest="patterns", action="append", default=[],
                   help="run only tests whose name contains PAT (or matches it as a glob "
                        "when it has * ? or [); repeatable, a test matching any runs")
    p.add_argument("--timeout", type=int, default=int(os.environ.get("TORCH_SUITE_TIMEOUT", 180)),
                   help="per-test limit in seconds (the suite's own; default 180, and it "
                        "caps the suite's longer overrides too)")
    p.add_argument("--features", default=None,
                   help="comma-separated DistTestCases.backend_feature sets to declare the "
                        "backend in (default: %s for chorus, none for others); '' for none"
                        % DEFAULT_FEATURES["chorus"])
    p.add_argument("--line", default=os.environ.get("TORCH_LINE", ""),
                   help="torch line label recorded in results.json (run.sh sets it)")
    p.add_argument("--start", choices=("fork", "spawn"),
                   default=os.environ.get("TORCH_SUITE_START", "fork"),
                   help="how ranks start: fork (default: about 1 s a test; the ranks inherit "
                        "the parent's imports, chorus.torch included) or spawn (as pytorch's "
                        "test_distributed_spawn.py: each rank re-imports torch and this file, "
                        "10-15 s a test on 2 cores)")
    p.add_argument("--force", metavar="REGEX", default=None,
                   help="run the selected tests that the suite skips up front (a skip "
                        "decorator such as require_backend_is_available({'gloo'})) when the "
                        "skip reason matches REGEX: to see what a restriction to named "
                        "backends hides; results say 'forced past: <reason>'. Decorators "
                        "stacked on one test share one reason, so an inner condition (say, "
                        "a GPU) may be forced past too: read the failures")
    p.add_argument("--list", action="store_true", help="list the selected tests and exit")
    return p.parse_args()


if __name__ == "__main__":
    _ARGS = _parse_args()
    if _ARGS.out is None:
        import tempfile
        _ARGS.out = tempfile.mkdtemp(prefix=f"torch_suite-{_ARGS.backend}-{_ARGS.ranks}-")
    _ARGS.out = os.path.abspath(_ARGS.out)
    os.makedirs(os.path.join(_ARGS.out, "logs"), exist_ok=True)
    features = _ARGS.features
    if features is None:
        features = DEFAULT_FEATURES.get(_ARGS.backend, "")
    os.environ.update({
        "BACKEND": _ARGS.backend,
        "WORLD_SIZE": str(_ARGS.ranks),
        "INIT_METHOD": "env://",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "TEMP_DIR": os.environ.get("TMPDIR", "/tmp"),   # replaced per test by setUp
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(_ARGS.timeout),
        "TORCH_SUITE_FEATURES": features,
        "TORCH_SUITE_LOGDIR": os.path.join(_ARGS.out, "logs"),
        "TORCH_SUITE_START": _ARGS.start,
    })
    # common_utils parses sys.argv (at import on torch 1.13; in run_tests/parse_cmd_line_args
    # on 2.x), and spawned ranks get this sys.argv too: hide ours from it.
    sys.argv = sys.argv[:1]

# ---- from here on: the parent and every spawned rank ----------------------------------
BACKEND = os.environ["BACKEND"]
_LOGDIR = os.environ.get("TORCH_SUITE_LOGDIR")
_FEATURES = [f for f in os.environ.get("TORCH_SUITE_FEATURES", "").split(",") if f]

if BACKEND == "chorus":
    import chorus.torch  # noqa: F401  registers "chorus" with torch.distributed

import unittest  # noqa: E402

import torch  # noqa: E402
from torch.testing._internal import common_distributed, common_utils  # noqa: E402

for _f in _FEATURES:
    common_distributed.DistTestCases.backend_feature.setdefault(_f, set()).add(BACKEND)

# torch 1.13's TestDistBackend._run turns on "DDP + ReplicatedTensor", which makes every
# DistributedDataParallel import torch.distributed._shard; Debian's torch 1.13 on Python
# 3.11 cannot import that (dataclasses: "mutable default ... TensorProperties"), so each
# DDP test on CPU died there, on gloo as on chorus. Where that import fails, keep DDP's
# default (ReplicatedTensor off) instead.
WORKAROUNDS = []
if torch.__version__.split(".")[0] == "1":
    try:
        import torch.distributed._shard  # noqa: F401
    except Exception as _e:  # noqa: BLE001
        from torch.nn.parallel import _replicated_tensor_ddp_utils as _rt
        _rt._set_ddp_with_replicated_tensor = lambda value: None
        WORKAROUNDS.append("DDP+ReplicatedTensor left off: torch.distributed._shard does not "
                           f"import ({type(_e).__name__}: {str(_e)[:80]})")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """test/distributed/test_distributed_spawn.py's class, plus per-rank logs and the
    reason of a skip decided inside a rank (which the suite reports only as 'generic')."""

    def setUp(self):
        super().setUp()
        if os.environ.get("TORCH_SUITE_START", "spawn") == "fork":
            # MultiProcessTestCase had _fork_processes until torch 2.0; this is what it did.
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        if _LOGDIR:
            fd = os.open(os.path.join(_LOGDIR, f"{test_name}.rank{rank}.log"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        super()._run(rank, test_name, file_name, pipe, **kwargs)

    def run_test(self, test_name, parent_pipe):
        fn = getattr(self, test_name)

        def recorded():
            try:
                return fn()
            except unittest.SkipTest as e:
                if _LOGDIR:
                    with open(os.path.join(_LOGDIR, f"{test_name}.skip.rank{self.rank}"), "w") as f:
                        f.write(str(e))
                raise

        setattr(self, test_name, recorded)
        super().run_test(test_name, parent_pipe)


# ---- the parent: run, record, report ----------------------------------------------------

def _exc_line(tb):
    """The exception line ('RuntimeError: ...') of a formatted traceback."""
    lines = tb.rstrip().splitlines()
    if not lines:
        return ""
    last = max((i for i, line in enumerate(lines) if line.startswith('  File "')), default=-1)
    j = last + 1
    while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()
                              or set(lines[j].strip()) <= set("^~ ")):
        j += 1
    line = lines[j].strip() if j < len(lines) else lines[-1].strip()
    return line[:400]


def _log_error_line(test, rank):
    """The last exception-looking line in a rank's log."""
    import re
    path = os.path.join(_LOGDIR or "", f"{test}.rank{rank}.log")
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    pat = re.compile(r"^\s*([A-Za-z_.]*(Error|Exception|Abort|terminate)\w*\b.*)$")
    found = [m.group(1) for m in map(pat.match, text.splitlines()) if m]
    return found[-1][:300] if found else ""


def _signal_name(code):
    import signal
    try:
        return signal.Signals(-code).name if code < 0 else ""
    except ValueError:
        return ""


def _reason(test, err_text):
    import re
    m = re.split(r"Process (\d+) exited with error code \d+ and exception:\n", err_text)
    if len(m) > 1:
        ranks = m[1::2]
        first = _exc_line(m[2])
        return f"rank {','.join(ranks)}: {first}"
    m = re.search(r"Process (\d+) terminated or timed out after ([\d.]+) seconds", err_text)
    if m:
        return f"TIMEOUT after {float(m.group(2)):.0f}s (rank {m.group(1)} still running)"
    m = re.search(r"Expected exit code (-?\d+) but got (-?\d+)", err_text)
    if m:
        code = int(m.group(2))
        sig = _signal_name(code)
        extra = _log_error_line(test, 0)
        return (f"rank 0 exit code {code}{' (' + sig + ')' if sig else ''}"
                + (f": {extra}" if extra else ""))
    return _exc_line(err_text)


class _Recorder(unittest.TestResult):
    def __init__(self, out, console, meta):
        super().__init__()
        self.out, self.console, self.meta = out, console, meta
        self.records = {}
        self.tsv = open(os.path.join(out, "results.tsv"), "w")
        self.tsv.write("test\toutcome\tseconds\treason\n")
        self.tsv.flush()
        self._t0 = None

    @staticmethod
    def _name(test):
        return test.id().split(".")[-1]

    def startTest(self, test):
        import time
        super().startTest(test)
        self._t0 = time.time()

    def _record(self, test, outcome, reason="", detail=None):
        import time
        name = self._name(test)
        secs = time.time() - (self._t0 or time.time())
        if name in getattr(self, "forced", {}):
            reason = f"[forced past: {self.forced[name]}] {reason}"
        reason = " ".join(str(reason).split())
        self.records[name] = {"outcome": outcome, "seconds": round(secs, 2), "reason": reason}
        if detail and _LOGDIR:
            with open(os.path.join(_LOGDIR, f"{name}.err"), "w") as f:
                f.write(detail)
        self.tsv.write(f"{name}\t{outcome}\t{secs:.2f}\t{reason}\n")
        self.tsv.flush()
        line = f"{outcome:<5} {name} ({secs:.1f}s)" + (f"  {reason}" if reason else "")
        print(line, file=self.console, flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "PASS")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        text = self._exc_info_to_string(err, test)
        self._record(test, "FAIL", _reason(self._name(test), text), text)

    def addError(self, test, err):
        super().addError(test, err)
        text = self._exc_info_to_string(err, test)
        self._record(test, "ERROR", _reason(self._name(test), text), text)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        name = self._name(test)
        if reason == common_distributed.TEST_SKIPS["generic"].message and _LOGDIR:
            for r in range(int(os.environ["WORLD_SIZE"])):
                try:
                    with open(os.path.join(_LOGDIR, f"{name}.skip.rank{r}")) as f:
                        reason = f"(in rank {r}) {f.read()}"
                    break
                except OSError:
                    pass
        self._record(test, "SKIP", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "PASS", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "FAIL", "unexpected success")

    def summary(self):
        n = {k: sum(1 for r in self.records.values() if r["outcome"] == k)
             for k in ("PASS", "FAIL", "ERROR", "SKIP")}
        return (f"{len(self.records)} tests, {n['PASS']} passed, {n['FAIL']} failed, "
                f"{n['ERROR']} errors, {n['SKIP']} skipped")


def _selected(names, patterns):
    import fnmatch
    if not patterns:
        return names
    out = []
    for n in names:
        for p in patterns:
            if (any(c in p for c in "*?[") and fnmatch.fnmatchcase(n, p)) or p in n:
                out.append(n)
                break
    return out


def _build_info():
    """What was tested: chorus's build and extension, and the checkout's commit."""
    import subprocess
    import time
    info = {}
    try:
        root = os.path.dirname(os.path.dirname(_HERE))
        info["git"] = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"],
                                     capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    if BACKEND == "chorus":
        ext = chorus.torch._torch_ext
        info["chorus"] = ext.build_info() if callable(ext.build_info) else str(ext.build_info)
        info["extension"] = ext.__file__
        info["extension_mtime"] = time.strftime("%Y-%m-%d %H:%M:%S",
                                                time.localtime(os.path.getmtime(ext.__file__)))
    return info


def main(args):
    import json
    import platform
    import time

    if hasattr(common_utils, "parse_cmd_line_args"):  # torch 2.x: its globals (seed, ...)
        common_utils.parse_cmd_line_args()
    # The per-test limit: the suite's default (read at import from the env) and its
    # longer overrides (test_ddp_uneven_inputs 400 s, test_DistributedDataParallel 500 s).
    common_distributed.TIMEOUT_DEFAULT = args.timeout
    for k in list(common_distributed.TIMEOUT_OVERRIDE):
        common_distributed.TIMEOUT_OVERRIDE[k] = min(common_distributed.TIMEOUT_OVERRIDE[k],
                                                     args.timeout)

    loader = unittest.TestLoader()
    names = _selected(loader.getTestCaseNames(TestDistBackendWithSpawn), args.patterns)
    forced = {}
    if args.force is not None:
        import re
        for n in names:
            fn = getattr(TestDistBackendWithSpawn, n)
            why = getattr(fn, "__unittest_skip_why__", "")
            if getattr(fn, "__unittest_skip__", False) and re.search(args.force, why):
                fn.__unittest_skip__ = False
                forced[n] = why
    if args.list:
        for n in names:
            fn = getattr(TestDistBackendWithSpawn, n)
            why = getattr(fn, "__unittest_skip_why__", "") if getattr(
                fn, "__unittest_skip__", False) else ""
            print(n + (f"\tskip: {why}" if why else "")
                  + (f"\tforced past: {forced[n]}" if n in forced else ""))
        return 0

    meta = {
        "build": _build_info(),
        "backend": BACKEND, "world_size": int(os.environ["WORLD_SIZE"]), "line": args.line,
        "torch": torch.__version__, "python": platform.python_version(),
        "interpreter": sys.executable, "features": _FEATURES,
        "per_test_timeout_s": args.timeout, "patterns": args.patterns, "start": args.start,
        "workarounds": WORKAROUNDS, "force": args.force, "forced": forced,
        "init_method": os.environ["INIT_METHOD"], "host": platform.node(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    # A clean stdout: our lines go to a copy of it; the suite's own prints and logging (and
    # the ranks until they open their logs) go to driver.log.
    console = os.fdopen(os.dup(1), "w", buffering=1)
    drv = os.open(os.path.join(args.out, "driver.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(drv, 1)
    os.dup2(drv, 2)
    os.close(drv)

    print(f"# {BACKEND} on {meta['world_size']} ranks, torch {meta['torch']} "
          f"(python {meta['python']}), features {','.join(_FEATURES) or '-'}, "
          f"{len(names)} tests, ranks by {args.start}, per-test timeout {args.timeout}s, "
          f"out {args.out}",
          file=console, flush=True)
    print("# build: " + ", ".join(f"{k} {v}" for k, v in meta["build"].items()),
          file=console, flush=True)
    for w in WORKAROUNDS:
        print(f"# workaround: {w}", file=console, flush=True)
    result = _Recorder(args.out, console, meta)
    result.forced = forced
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    t0 = time.time()
    try:
        suite.run(result)
    except KeyboardInterrupt:
        print("# interrupted", file=console, flush=True)
    meta["seconds"] = round(time.time() - t0, 1)
    meta["summary"] = result.summary()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "tests": result.records}, f, indent=1, sort_keys=True)
    print(result.summary(), file=console)
    print(f"# {meta['seconds']:.0f}s; results in {args.out}", file=console, flush=True)
    bad = any(r["outcome"] in ("FAIL", "ERROR") for r in result.records.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(_ARGS))
