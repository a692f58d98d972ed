"""Every command that reads input, on every hostile input of tests/hostile/corpus.py: exit 0 with a
sane report or exit 2 with one line; never a traceback; no raw control character in what is
printed; peak memory and CPU time bounded (each run in its own process, with an address-space cap so a
bomb cannot take the machine, its peak RSS checked, and each command's CPU time: unlike wall time it
does not grow with the machine's load, so the bound holds on a busy 2-core machine)."""

from __future__ import annotations

import json
import os
import pickle
import re
import resource
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from analyzer.analysis.findings import BOTTLENECKS
from tests.conftest import ROOT
from tests.hostile.arrow_cases import SECRET
from tests.hostile.corpus import Case
from tests.hostile.run_case import PEAK_PREFIX

#: A run may not use more than this (real content here is a few KiB to 2 MiB).
MAX_RSS_BYTES = 600 * 2**20
#: The address-space cap: a catastrophe guard, high enough for polars' thread arenas.
ADDRESS_SPACE = 6 * 2**30
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Format (Cf), separator and invisible-letter characters: hidden text must not reach the terminal either.
INVISIBLE = re.compile(
    "[\xad\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\uffa0\U000e0000-\U000e0fff]"
)
#: Most CPU time one command may take on an input under 10 MB (its threads and the worker processes it reaped).
MAX_COMMAND_CPU_S = 10.0
#: Inputs this large or larger are exempt from the time bound (the directory of 3,000 ranks is too).
TIMED_BELOW_BYTES = 10 * 2**20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Case]:
    """Built in a child process: building holds large arrays for a moment, and a child forked from a
    process that did would inherit its peak RSS (ru_maxrss survives fork and exec)."""
    d = tmp_path_factory.mktemp("hostile")
    code = "import pickle, sys; from pathlib import Path; from tests.hostile.corpus import build; "
    code += "sys.stdout.buffer.write(pickle.dumps(build(Path(sys.argv[1]))))"
    done = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, cwd=ROOT, check=True)
    cases: list[Case] = pickle.loads(done.stdout)
    return cases


def _run(case: Case, cwd: Path, env_extra: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], int, str]:
    """The results of one input's commands, run in one process (killed after 300 s), and its peak RSS.
    ``env_extra``: variables set (a value of None-like "" removes one: an empty HOME's run)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    commands = [[a.replace("{}", str(case.path)) for a in cmd] for cmd in case.commands]
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "TERM": "dumb",
        "COLUMNS": "100",
        "GPUANALYZE_CEILINGS": str(cwd / "no-ceilings.json"),
        "GPUANALYZE_CACHE": str(cwd / "import-cache" / case.name.encode("ascii", "replace").hex()[:40]),
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("", "ingest", "kernels")),  # this checkout's
    }
    for name, value in (env_extra or {}).items():
        if value:
            env[name] = value
        else:
            env.pop(name, None)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.hostile.run_case", json.dumps(commands)],
            stdout=out,
            stderr=err,
            cwd=cwd,
            env=env,
            preexec_fn=limit,
        )
        timer = threading.Timer(1800, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        raw, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    try:
        results = json.loads(raw)
    except ValueError:
        results = [{"args": c, "code": proc.returncode, "out": raw, "err": stderr} for c in commands]
    # ru_maxrss carries the peak of the process it was forked from (this pytest process, which may have held
    # much more for an earlier test); the child's own VmHWM since exec, when it says it, does not
    peaks = [int(line.removeprefix(PEAK_PREFIX)) for line in stderr.splitlines() if line.startswith(PEAK_PREFIX)]
    return results, (peaks[-1] if peaks else usage.ru_maxrss) * 1024, stderr


def test_the_corpus_covers_every_class_with_sixty_inputs_or_more(corpus):
    assert len(corpus) >= 90
    assert {c.cls for c in corpus} == {"terminal", "memory", "traceback", "absurd", "arrow", "names", "scale"}
    reading = {
        c[0] if c[0] != "{}" else ("--json" if "--json" in c else "analyze") for case in corpus for c in case.commands
    }
    assert {"analyze", "--json", "report", "export", "compare", "watch", "import"} <= reading


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.iterdir())
    except OSError:
        return 0


def _reject_constant(token: str) -> float:
    raise ValueError(f"bare JSON token {token}")


#: The corpus is checked in this many parts (each input in one), so that pytest-xdist's workers share it.
SHARDS = 4


@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_command_on_every_hostile_input_ends_cleanly(corpus, tmp_path, shard):
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(lambda c: (c, *_run(c, tmp_path)), corpus[shard::SHARDS]))
    problems = []
    for case, results, rss, _stderr in runs:
        if rss > MAX_RSS_BYTES:
            problems.append(f"{case.name}: peak RSS {rss / 2**20:.0f} MiB")
        cpu = max((r.get("cpu_seconds", 0.0) for r in results), default=0.0)
        if cpu > MAX_COMMAND_CPU_S and _size(case.path) < TIMED_BELOW_BYTES and case.cls != "scale":
            problems.append(f"{case.name}: a command took {cpu:.1f} s of CPU")
        for r in results:
            problems += _problems(case, r)
    assert not problems, "\n".join(problems)


def _problems(case: Case, r: dict[str, Any]) -> list[str]:
    code, out, err, args = r["code"], r["out"], r["err"], r["args"]
    where = f"{case.name} [{' '.join(a[-30:] for a in args)}]"
    text = out + err
    # `watch` is stopped as Ctrl-C would stop it: before its first view (a slow read on a busy machine) that is 130
    if code not in (0, 2) and not (code == 130 and args[0] == "watch" and not err.strip()):
        return [f"{where}: exit {code}: {err[-400:]}"]
    found = []
    if "Traceback" in text:
        found.append(f"{where}: traceback")
    if CONTROL.search(text.replace("\n", "").replace("\t", "")):
        found.append(f"{where}: raw control character in the output: {CONTROL.findall(text)[:5]}")
    if SECRET[:12] in text:
        found.append(f"{where}: a secret of a recorded command line in clear")
    if INVISIBLE.search(text):
        found.append(f"{where}: raw format or invisible character in the output: {INVISIBLE.findall(text)[:5]}")
    if code == 124:
        found.append(f"{where}: did not finish in time")
    if code == 2:
        lines = err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("gpuanalyze: error:") or out.strip():
            found.append(f"{where}: exit 2 without exactly one error line: {err[-300:]!r}")
    elif "--json" in args:
        try:
            data = json.loads(out, parse_constant=_reject_constant)
        except ValueError as exc:
            return [*found, f"{where}: invalid JSON ({exc})"]
        if data.get("bottleneck") not in BOTTLENECKS:
            found.append(f"{where}: bottleneck {data.get('bottleneck')!r}")
        shares = [v for v in (data.get("share") or {}).values() if v is not None]
        if any(not 0 <= v <= 1 for v in shares) or any(not 0 <= f["share"] <= 1 for f in data["findings"]):
            found.append(f"{where}: a share outside [0, 1]")
    return found
