"""The hostile corpus extended to the commands added since it was written: `fleet` over hostile names,
trees and metadata (and its CSV), `compare --fail-if-slower`, `--log`, `run --try` and `run --out`
with hostile names; and every command from an empty HOME (HOME and XDG_* at an empty directory).
Same promise as tests/test_hostile_corpus.py: a sane exit, never a traceback, no raw control or
invisible character in what is printed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLES
from tests.hostile.corpus import CLEAR, NASTY, OSC0, OSC52, Case, _arrow, _rows
from tests.test_hostile_corpus import CONTROL, INVISIBLE, _run
from tests.test_metadata_types import HOSTILE_END, HOSTILE_RUN, HOSTILE_TAGS, _rewrite

pytestmark = pytest.mark.slow

HOSTILE_NAMES = (
    f"run{OSC0}{CLEAR}",
    '=HYPERLINK("evil")',
    "+cmd|' -C calc'!A0",
    "@sum(1)",
    "\tlead",
    "rlo\u202eexe.arrow",
    "tag\U000e0041",
    "[red]markup[bold]",
    "x" * 200,
)
SAMPLE = str(SAMPLES / "cpu_data_loading.arrow")
PY = sys.executable


def _tree(d: Path) -> Path:
    """A fleet of runs with hostile directory names, hostile metadata, a deep branch and a junk file."""
    root = d / "fleet"
    root.mkdir(parents=True)
    for i, name in enumerate(HOSTILE_NAMES):
        run = root / f"{name}{i}"[-240:]  # the name first: a leading =, +, @ or TAB is what a spreadsheet runs
        run.mkdir()
        run_info = {"gpu_name": f"A100{OSC52}", "host": OSC0, "argv": f"train.py --name {NASTY}"}
        _arrow(run / "trace.arrow", _rows(20, **{"gpu_busy_ms": 5.0}), run=run_info)
    meta = root / "hostile_metadata"
    meta.mkdir()
    _rewrite(_arrow(meta / "trace.arrow", _rows(20)), run=HOSTILE_RUN, tags=HOSTILE_TAGS, end=HOSTILE_END)
    deep = root
    for level in range(60):
        deep = deep / f"d{level}"
    deep.mkdir(parents=True)
    _arrow(deep / "trace.arrow", _rows(20))
    (root / "junk").mkdir()
    (root / "junk" / "trace.arrow").write_bytes(b"\x00not a trace" * 10)
    return root


def _cases(d: Path) -> list[Case]:
    fleet = _tree(d)
    before = _arrow(d / f"before{OSC0}.arrow", _rows(30))
    after = _arrow(d / f"after{CLEAR}.arrow", _rows(30, wall_ms=30.0))
    hostile_meta = _rewrite(_arrow(d / "meta.arrow", _rows(30)), run=HOSTILE_RUN, tags=HOSTILE_TAGS, end=HOSTILE_END)
    script = d / f"train{OSC52}.py"
    # nothing on stdout: the child shares the runner's, which carries the results as JSON
    script.write_text("import sys\nprint('hello', file=sys.stderr)\nsys.exit(3)\n")
    cases = [
        Case(
            "fleet_hostile_tree",
            "fleet",
            fleet,
            (
                ("fleet", "{}", "--workers", "1"),
                ("fleet", "{}", "--json", "--workers", "1"),
                ("fleet", "{}", "--workers", "1", "--price-per-gpu-hour", "2", "--steps-per-run", "1e6"),
                ("fleet", "{}", "--width", "40", "--top", "3", "--workers", "1"),
            ),
        ),
        Case(
            "gate_hostile_names",
            "gate",
            before,
            (
                ("compare", "{}", str(after), "--fail-if-slower", "5"),
                ("compare", "{}", str(after), "--fail-if-slower", "5", "--json"),
                ("compare", str(hostile_meta), "{}", "--fail-if-slower", "5"),
                ("compare", "{}", str(hostile_meta), "--fail-if-throughput-drops", "5"),
                ("compare", "{}", "{}", "--fail-if-slower", "nan"),
                ("compare", "{}", "--fail-if-slower", "5"),
            ),
        ),
        Case(
            "run_hostile_out",
            "run",
            script,
            (
                ("run", "--out", f"{{out}}{OSC0}{CLEAR}", "--", PY, "{}"),
                ("run", "--out", f"{{out}}{OSC0}", "--tag", f"k={NASTY}", "--", PY, "{}"),
                ("run", "--try", "--try-time-limit", "30", "--out", f"{{out}}{OSC52}", "--", PY, "{}"),
                ("run", "--try", "--candidates", f"num_workers={OSC0}", "--", PY, "{}"),
            ),
        ),
    ]
    if importlib.util.find_spec("mlflow") is not None:
        cases.append(
            Case(
                "log_hostile_names",
                "log",
                before,
                (("{}", "--log", "mlflow"), (str(hostile_meta), "--log", "mlflow"), ("{}", "--log", f"wandb{OSC0}")),
            )
        )
    return cases


#: Exit statuses a command may end with besides 0 and 2: the gate's verdict, the script's own status.
EXPECTED = {"gate": {0, 1, 2}, "run": {0, 2, 3}, "fleet": {0, 2}, "log": {0, 2}, "home": {0, 1, 2}}


def _problems(case: Case, r: dict[str, Any]) -> list[str]:
    code, out, err, args = r["code"], r["out"], r["err"], r["args"]
    where = f"{case.name} [{' '.join(a[-30:] for a in args)!r}]"
    text = out + err
    found = [] if "seconds" in r else [f"{where}: the runner's results were unreadable: {out[-300:]!r}"]
    if code not in EXPECTED[case.cls]:
        found.append(f"{where}: exit {code}: {err[-400:]}")
    if "Traceback" in text:
        found.append(f"{where}: traceback: {text[-600:]}")
    if CONTROL.search(text.replace("\n", "").replace("\t", "")):
        found.append(f"{where}: raw control character: {CONTROL.findall(text)[:5]}")
    if INVISIBLE.search(text):
        found.append(f"{where}: raw invisible character: {INVISIBLE.findall(text)[:5]}")
    if code == 2 and case.cls != "run":
        lines = [line for line in err.strip().splitlines() if line.startswith("gpuanalyze: error:")]
        if len(lines) != 1:
            found.append(f"{where}: exit 2 without exactly one error line: {err[-300:]!r}")
    if "--json" in args and code == 0:
        try:
            json.loads(out)
        except ValueError as exc:
            found.append(f"{where}: invalid JSON ({exc})")
    return found


def test_the_new_commands_on_hostile_names_trees_and_metadata(tmp_path):
    problems = []
    for case in _cases(tmp_path / "inputs"):
        env = {"MLFLOW_TRACKING_URI": f"file:{tmp_path / 'mlruns'}", "MLFLOW_ALLOW_FILE_STORE": "true"}
        results, _rss, stderr = _run(case, tmp_path, env)
        assert results, f"{case.name}: no results ({stderr[-400:]})"
        for r in results:
            problems += _problems(case, r)
    assert not problems, "\n".join(problems)


def test_every_command_from_an_empty_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "GPUANALYZE_CEILINGS": "", "GPUANALYZE_CACHE": ""}
    env |= {f"XDG_{k}_HOME": "" for k in ("CACHE", "CONFIG", "DATA", "STATE")}
    runs = _arrow(tmp_path / "r.arrow", _rows(20))
    commands = (
        ("{}",),
        ("{}", "--json"),
        ("analyze", "{}"),
        ("report", "{}", "-o", "{out}.html"),
        ("export", "{}", "--chrome-trace", "{out}.json"),
        ("compare", "{}", "{}", "--fail-if-slower", "10"),
        ("fleet", str(SAMPLES), "--workers", "1"),
        ("watch", "{}", "--interval", "0.05"),
        ("import", "{}", "-o", "{import_out}"),
        ("env",),
        ("run", "--print-env"),
        ("run", "--out", "{out}", "--", PY, "-c", "pass"),
        ("bench", "matmul", "--backend", "cpu", "--quick"),
    )
    case = Case("empty_home", "home", runs, commands)
    results, _rss, stderr = _run(case, tmp_path, env)
    problems = [p for r in results for p in _problems(case, r)]
    assert len(results) == len(commands), stderr[-400:]
    assert not problems, "\n".join(problems)
    bench = results[-1]
    assert bench["code"] == 0 and (home / ".cache" / "gpuanalyze" / "ceilings.json").is_file(), bench["err"]
