"""Every command that reads input, on every hostile input of tests/hostile/corpus.py: exit 0 with a
sane report or exit 2 with one line; never a traceback; no raw control character in what is
printed; peak memory bounded (each run in its own process, with an address-space cap so a bomb
cannot take the machine, and its peak RSS checked)."""

from __future__ import annotations

import json
import os
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
from tests.hostile.corpus import Case, build

#: A run may not use more than this (real content here is a few KiB to 2 MiB).
MAX_RSS_BYTES = 600 * 2**20
#: The address-space cap: a catastrophe guard, high enough for polars' thread arenas.
ADDRESS_SPACE = 6 * 2**30
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Case]:
    return build(tmp_path_factory.mktemp("hostile"))


def _run(case: Case, cwd: Path) -> tuple[list[dict[str, Any]], int, str]:
    """The results of one input's commands, run in one process (killed after 300 s), and its peak RSS."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    commands = [[a.replace("{}", str(case.path)) for a in cmd] for cmd in case.commands]
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "TERM": "dumb",
        "COLUMNS": "100",
        "GPUANALYZE_CEILINGS": str(cwd / "no-ceilings.json"),
        "PYTHONPATH": str(ROOT),
    }
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.hostile.run_case", json.dumps(commands)],
            stdout=out,
            stderr=err,
            cwd=cwd,
            env=env,
            preexec_fn=limit,
        )
        timer = threading.Timer(300, proc.kill)
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
    return results, usage.ru_maxrss * 1024, stderr


def test_the_corpus_covers_every_class_with_sixty_inputs_or_more(corpus):
    assert len(corpus) >= 60
    assert {c.cls for c in corpus} == {"terminal", "memory", "traceback", "absurd"}


def _reject_constant(token: str) -> float:
    raise ValueError(f"bare JSON token {token}")


def test_every_command_on_every_hostile_input_ends_cleanly(corpus, tmp_path):
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(lambda c: (c, *_run(c, tmp_path)), corpus))
    problems = []
    for case, results, rss, _stderr in runs:
        if rss > MAX_RSS_BYTES:
            problems.append(f"{case.name}: peak RSS {rss / 2**20:.0f} MiB")
        for r in results:
            problems += _problems(case, r)
    assert not problems, "\n".join(problems)


def _problems(case: Case, r: dict[str, Any]) -> list[str]:
    code, out, err, args = r["code"], r["out"], r["err"], r["args"]
    where = f"{case.name} [{' '.join(a[-30:] for a in args)}]"
    text = out + err
    if code not in (0, 2):
        return [f"{where}: exit {code}: {err[-400:]}"]
    found = []
    if "Traceback" in text:
        found.append(f"{where}: traceback")
    if CONTROL.search(text.replace("\n", "").replace("\t", "")):
        found.append(f"{where}: raw control character in the output: {CONTROL.findall(text)[:5]}")
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
