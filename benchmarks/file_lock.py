"""The ceilings file's lock (``ceilings_store._locked``: flock on the file's directory) against filelock.

    python benchmarks/file_lock.py [--rounds 5] [--iters 2000] [--procs 2 4 8] [--increments 50]

Side by side in one run, alternating the order each round (the machine is shared; the load
average is printed): uncontended acquire+release latency; N processes each doing K
read-modify-write increments of one JSON file under the lock, as ``merge_runs`` merges a
measurement (total time, and whether the count is N x K: no lost update; ``none`` is the
unlocked control, showing the check can fail); what each leaves in the directory; and the
functional cases: a read-only directory, a lock file left by another user in a directory both may write,
a holder killed without releasing, and a file system without flock (simulated: ``fcntl.flock``
raising ENOSYS / ENOLCK). filelock locks ``ceilings.json.lock`` beside the file, with the same
timeout and poll interval; each acquire makes a new lock object, as a bench process would.
Our lock is kept only where this says it wins.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from multiprocessing.synchronize import Event
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

try:
    import filelock
except ImportError:  # the dev group has it (and torch needs it)
    print("filelock is not installed: pip install filelock")
    raise SystemExit(2) from None

from analyzer.machine import ceilings_store as CS  # noqa: E402

POLL_S = 0.02  # ours polls every 20 ms (filelock's default is 50 ms)
Lock = Callable[[Path], AbstractContextManager[object]]
NOBODY = 65534


def ours(d: Path) -> AbstractContextManager[object]:
    return CS._locked(d)


def beside(cls: type[filelock.BaseFileLock], timeout: float | None = None) -> Lock:
    """filelock's ``cls`` on ``ceilings.json.lock`` beside the file, our timeout and poll interval."""

    def lock(d: Path) -> AbstractContextManager[object]:
        wait = CS.LOCK_TIMEOUT_S if timeout is None else timeout
        return cls(d / "ceilings.json.lock", timeout=wait, poll_interval=POLL_S)

    return lock


def unlocked(_: Path) -> AbstractContextManager[object]:
    return contextlib.nullcontext()


LOCKS: dict[str, Lock] = {
    "ours": ours,
    "FileLock": beside(filelock.FileLock),
    "SoftFileLock": beside(filelock.SoftFileLock),
}
CONTROL: dict[str, Lock] = {"none": unlocked}


def fresh(base: Path, name: str) -> Path:
    d = base / name
    d.mkdir()
    (d / "ceilings.json").write_text(json.dumps({"count": 0}))
    return d


def latencies(lock: Lock, d: Path, iters: int) -> list[float]:
    out = []
    for _ in range(iters):
        t = time.perf_counter_ns()
        with lock(d):
            pass
        out.append((time.perf_counter_ns() - t) / 1000)
    return out


def increment(lock: Lock, d: Path, k: int, go: Event) -> None:
    """K read-modify-write merges of the shared file, each replaced through a temporary file."""
    go.wait()
    target, tmp = d / "ceilings.json", d / f".tmp-{os.getpid()}"
    for _ in range(k):
        with lock(d):
            data = json.loads(target.read_text())
            data["count"] += 1
            tmp.write_text(json.dumps(data))
            tmp.replace(target)


def merges(_: Lock, d: Path, k: int, go: Event) -> None:
    """K ``merge_runs`` (our lock and its re-read) of distinct suites for this process's own host."""
    fp = CS.Fingerprint(backend="cpu", device="CPU", host=f"h{os.getpid()}")
    run = CS.SuiteRun(measured_unix_s=1, quick=False, fingerprint=fp, results=[])
    go.wait()
    for i in range(k):
        CS.merge_runs(d / "ceilings.json", {f"s{i}": run}, fp)


Work = Callable[[Lock, Path, int, Event], None]


def contended(
    lock: Lock, d: Path, n: int, k: int, flock_errno: int | None = None, work: Work = increment
) -> tuple[float, bool]:
    """N processes doing K increments each, started together: the wall time and whether all exited 0."""
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    target = without_flock if flock_errno is not None else work
    extra = (flock_errno, work) if flock_errno is not None else ()
    procs = [ctx.Process(target=target, args=(lock, d, k, go, *extra)) for _ in range(n)]
    for p in procs:
        p.start()
    t = time.perf_counter()
    go.set()
    for p in procs:
        p.join(timeout=120)
    elapsed = time.perf_counter() - t
    ok = all(p.exitcode == 0 for p in procs)
    return elapsed, ok


def without_flock(lock: Lock, d: Path, k: int, go: Event, code: int, work: Work) -> None:
    """``work`` on a file system without flock: ``fcntl.flock`` raises ``code``; errors and warnings noted."""
    import fcntl

    def refuse(*_: object) -> None:
        raise OSError(code, os.strerror(code))

    fcntl.flock = refuse
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            work(lock, d, k, go)
        except Exception as exc:  # noqa: BLE001 - any failure is the outcome to print
            (d / f"error-{os.getpid()}").write_text(f"{type(exc).__name__}: {str(exc)[:90]}")
            raise SystemExit(1) from None
    if caught:
        (d / f"warned-{os.getpid()}").write_text(str(caught[0].message))


def outcome(d: Path) -> tuple[int, str]:
    """The final count in ``d`` (suites kept, for merge_runs) and the children's notes, removed."""
    notes = {p.read_text() for p in sorted(d.iterdir()) if p.name.startswith(("error-", "warned-"))}
    for p in d.iterdir():
        if p.name.startswith(("error-", "warned-")):
            p.unlink()
    data = json.loads((d / "ceilings.json").read_text())
    count = data["count"] if "count" in data else sum(len(m["suites"]) for m in data["machines"].values())
    return count, "; ".join(sorted(notes))


def as_nobody(lock: Lock, d: Path) -> str:
    """``try_lock`` in a child with uid nobody (root ignores permissions)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            msg = try_lock(lock, d)
        except BaseException as exc:  # noqa: BLE001 - the child reports everything
            msg = f"{type(exc).__name__}: {exc}"
        os.write(w, msg.encode()[:300])
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        msg = fh.read().decode()
    os.waitpid(pid, 0)
    return msg


def try_lock(lock: Lock, d: Path) -> str:
    try:
        with lock(d):
            return "acquired"
    except Exception as exc:  # noqa: BLE001 - any failure is the outcome to print
        return f"{type(exc).__name__}: {str(exc)[:110]}"


def killed_holder(lock: Lock, d: Path) -> str:
    """A child takes the lock and dies without releasing (kill -9 alike); how long the next waits."""
    pid = os.fork()
    if pid == 0:
        lock(d).__enter__()
        os._exit(0)
    os.waitpid(pid, 0)
    t = time.perf_counter()
    got = try_lock(lock, d)
    return f"{got} after {time.perf_counter() - t:.2f} s"


def functional(base: Path) -> None:
    print("\nread-only directory (uid nobody, directory 0755 root):")
    for name, lock in LOCKS.items():
        d = fresh(base, f"ro-{name}")
        d.chmod(0o755)
        print(f"  {name:13} {as_nobody(lock, d)}")

    print("\ndirectory both may write (0777, umask 022): root locked first, then uid nobody locks:")
    for name, lock in LOCKS.items():
        d = fresh(base, f"shared-{name}")
        d.chmod(0o777)
        umask = os.umask(0o022)
        try_lock(lock, d)
        os.umask(umask)
        left = sorted(p.name for p in d.iterdir())
        print(f"  {name:13} left {left}; nobody: {as_nobody(lock, d)}")

    print("\nholder killed without releasing (timeout set to 2 s for this case):")
    saved = CS.LOCK_TIMEOUT_S
    CS.LOCK_TIMEOUT_S = 2.0
    killed = {
        "ours": ours,
        "FileLock": beside(filelock.FileLock, 2.0),
        "SoftFileLock": beside(filelock.SoftFileLock, 2.0),
    }
    for name, lock in killed.items():
        print(f"  {name:13} {killed_holder(lock, fresh(base, f'killed-{name}'))}")
    CS.LOCK_TIMEOUT_S = saved

    n, k = 4, 25
    rows: dict[str, tuple[Lock, Work]] = {name: (lock, increment) for name, lock in LOCKS.items()}
    rows["merge_runs"] = (ours, merges)
    for code in (errno.ENOSYS, errno.ENOLCK):
        print(f"\nno flock (fcntl.flock raises {errno.errorcode[code]}), {n} processes x {k} increments:")
        for name, (lock, work) in rows.items():
            d = fresh(base, f"noflock-{errno.errorcode[code]}-{name}")
            if work is merges:
                (d / "ceilings.json").unlink()
            s, ok = contended(lock, d, n, k, code, work)
            count, notes = outcome(d)
            left = sorted(p.name for p in d.iterdir())
            failed = "" if ok else " (a process failed)"
            print(f"  {name:13} count {count:>3}/{n * k}{failed} {s:.2f} s, left {left}{'; ' + notes if notes else ''}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--procs", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--increments", type=int, default=50)
    args = parser.parse_args()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"filelock {filelock.__version__}; {os.cpu_count()} cores; {uptime}")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        samples: dict[str, list[float]] = {name: [] for name in LOCKS}
        dirs = {name: fresh(base, f"lat-{name}") for name in LOCKS}
        names = list(LOCKS)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                samples[name] += latencies(LOCKS[name], dirs[name], args.iters)
        print(f"\nuncontended acquire+release, {args.rounds} alternating rounds x {args.iters}:")
        print(f"  {'lock':13} {'median us':>10} {'p90 us':>8} {'/ours':>6}")
        ours = statistics.median(samples["ours"])
        for name, xs in samples.items():
            p90 = statistics.quantiles(xs, n=10)[-1]
            print(f"  {name:13} {statistics.median(xs):>10.1f} {p90:>8.1f} {statistics.median(xs) / ours:>6.2f}")

        every = {**LOCKS, **CONTROL}
        print(
            f"\ncontended: N processes x {args.increments} read-modify-write increments;"
            f" best time of {args.rounds} alternating rounds, lowest final count of any round (! a process failed):"
        )
        print(f"  {'lock':13} " + " ".join(f"{f'N={n} s':>8} {'count':>10}" for n in args.procs))
        times: dict[tuple[str, int], list[float]] = {}
        counts: dict[tuple[str, int], list[int]] = {}
        failed: set[tuple[str, int]] = set()
        for n in args.procs:
            for r in range(args.rounds):
                for name in list(every) if r % 2 == 0 else list(every)[::-1]:
                    d = fresh(base, f"c{n}-{r}-{name}")
                    s, ok = contended(every[name], d, n, args.increments)
                    count = outcome(d)[0]
                    times.setdefault((name, n), []).append(s)
                    counts.setdefault((name, n), []).append(count)
                    if not ok:
                        failed.add((name, n))
        for name in every:
            cells = []
            for n in args.procs:
                worst = min(counts[(name, n)])  # the lowest count of any round: a lost update shows
                mark = "!" if (name, n) in failed else " "
                cells.append(f"{min(times[(name, n)]):>8.3f} {f'{worst}/{n * args.increments}':>10}{mark}")
            print(f"  {name:13} " + " ".join(cells))
        print("  left in the directory afterwards:")
        for name in every:
            print(f"  {name:13} {sorted(p.name for p in (base / f'c{args.procs[-1]}-0-{name}').iterdir())}")

        functional(base)
    print(f"\n{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
