"""Every printed or rendered string goes through the one sanitiser: `watch`
and `import DIR` print trace-supplied text only through analyzer.render.safe, invisible format
characters are escaped, and no f-string in the render or CLI code sends an untrusted value to the
terminal without it (an AST scan: a new output path that bypasses clean() fails here)."""

from __future__ import annotations

import ast
import sys
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.render.safe import clean, html, shorten
from tests import kineto_fixtures as kf
from tests.conftest import ROOT, make_row, write_trace

runner = CliRunner()

OSC52 = "\x1b]52;c;cHduZWQ=\x07"
OSC0 = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
INVISIBLE = "\U000e0068\U000e0069\xad\u3164\u115f\u1160\uffa0\u2062\u180e\ufe0f\u034f"


def _unsafe_chars(text: str) -> set[str]:
    """Characters that must never reach the terminal raw: controls but newline, and every format
    (Cf), separator (Zl/Zp) or surrogate character, plus the invisible letters of INVISIBLE."""
    return {
        ch
        for ch in text
        if ch != "\n" and (unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") or ch in INVISIBLE)
    }


def test_every_format_and_control_character_is_escaped():
    every = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp")]
    assert len(every) > 150
    assert not _unsafe_chars(clean("".join(every)))
    assert not _unsafe_chars(clean(INVISIBLE))
    assert clean("a\U000e0041b") == "a\\U000e0041b"  # the TAG block that hides text
    assert clean("soft\xadhyphen") == "soft\\xadhyphen"
    assert clean("\u3164") == "\\u3164"  # Hangul filler
    assert not _unsafe_chars(shorten(INVISIBLE * 40, 30))
    assert "\U000e0068" not in html(INVISIBLE)
    assert clean("plain ünïcode 名前 é") == "plain ünïcode 名前 é"


@pytest.fixture
def hostile_finished_trace(tmp_path):
    d = tmp_path / f"run{OSC0}{CLEAR}"
    d.mkdir()
    rows = [make_row(i, wall=20.0, data=15.0) for i in range(30)]
    rows[3]["wall_ms"] = -1.0  # one skipped row: a note
    run = {"gpu_name": f"A100{OSC52}{INVISIBLE}", "host": OSC0}
    return write_trace(d / f"t{OSC52}{INVISIBLE}.arrow", rows, run=run)


def test_watch_prints_path_status_notes_and_verdict_through_the_sanitiser(hostile_finished_trace):
    result = runner.invoke(app, ["watch", str(hostile_finished_trace), "--interval", "0.05"])
    assert result.exit_code == 0, result.output
    assert "finished (ok)" in result.output
    assert not _unsafe_chars(result.output), sorted(_unsafe_chars(result.output))
    assert "\\x1b]52;c;" in "".join(result.output.split())


def test_watch_of_a_directory_shows_hostile_names_escaped(hostile_finished_trace):
    (hostile_finished_trace.parent / f"junk{CLEAR}.arrow").write_text("not a trace")
    result = runner.invoke(app, ["watch", str(hostile_finished_trace.parent), "--interval", "0.05"])
    assert result.exit_code == 0, result.output
    assert not _unsafe_chars(result.output), sorted(_unsafe_chars(result.output))
    assert "skipped junk" in result.output  # item 8: a junk .arrow is skipped, as `gpuanalyze DIR` does


def test_watch_directory_with_a_junk_arrow_file_skips_it(tmp_path):
    write_trace(tmp_path / "t.arrow", [make_row(i, wall=20.0, data=15.0) for i in range(30)])
    junk = tmp_path / "zz-newest.arrow"
    junk.write_text("not a trace")
    result = runner.invoke(app, ["watch", str(tmp_path), "--interval", "0.05"])
    assert result.exit_code == 0, result.output
    assert "skipped zz-newest.arrow" in " ".join(result.output.split())
    assert runner.invoke(app, [str(tmp_path)]).exit_code == 0


def test_import_dir_prints_shared_file_names_escaped(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    kf.write(src / f"rank0{OSC52}{INVISIBLE}.json", kf.two_step_trace(rank=0, world=2))
    kf.write(src / "rank1.json", kf.two_step_trace(rank=1, world=2))
    (src / f"notes{OSC0}{CLEAR}.json").write_text('{"hello": "world"}')
    result = runner.invoke(app, ["import", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "note: skipped notes" in result.output
    assert not _unsafe_chars(result.output), sorted(_unsafe_chars(result.output))
    assert "\\x1b]52;c;" in result.output


def test_single_import_prints_the_names_escaped(tmp_path):
    src = kf.write(tmp_path / f"in{OSC52}.json", kf.two_step_trace())
    result = runner.invoke(app, ["import", str(src), "-o", str(tmp_path / f"out{OSC0}.arrow")])
    assert result.exit_code == 0, result.output
    assert not _unsafe_chars(result.output)


# ---- the scan ------------------------------------------------------------------------------------

#: Calls that put text on the terminal or into a rendered document.
SINKS = {"echo", "secho", "print", "Text", "append", "add_row", "Panel", "Table", "write"}
#: Calls whose result is display-safe (the sanitiser, its HTML form, the error exit).
SAFE_CALLS = {"clean", "shorten", "text", "html", "h", "fail"}
#: Values formatted into output strings that are not text from a trace, config or path: numbers,
#: counts, and the project's own fixed vocabulary. Anything else must go through clean().
TRUSTED = {
    "__version__",
    "shot.steps",
    "b.steps",
    "a.steps",
    "shot.ranks",
    "state",
    "_duration(shot.elapsed_s)",
    "ROLLING_STEPS",
    "d.index",
    "width",
    "', '.join(dropped)",
    "_usd(c.saving_usd)",
    "i",
    "f.severity",
    "d.ranks",
    "km.kernel_count",
    "r.rank",
    "' *' if r.rank in stragglers else ''",
    "count",
    "key",
    "shlex.quote(value)",
    "shlex.quote(str(env_vars.bootstrap_dir()))",
    "'; the run goes on' if still else ''",
    "len(report.results)",
    "r.variant",
    "num(r.value)",
    "self.unit",
    "c.gpus",
    "usd",
}


def _name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _bypasses(node: ast.expr) -> list[str]:
    """Formatted values of an f-string (or concatenation of them) that are neither trusted nor cleaned."""
    if isinstance(node, ast.JoinedStr):
        found = []
        for v in node.values:
            if not isinstance(v, ast.FormattedValue) or v.format_spec is not None:
                continue  # literal text, or a number formatted with a spec
            if isinstance(v.value, ast.Call) and _name(v.value.func) in SAFE_CALLS:
                continue
            if ast.unparse(v.value) not in TRUSTED:
                found.append(ast.unparse(v.value))
        return found
    if isinstance(node, ast.BinOp):
        return _bypasses(node.left) + _bypasses(node.right)
    return []


def test_no_output_path_in_render_or_cli_bypasses_the_sanitiser():
    files = sorted((ROOT / "analyzer" / "cli").glob("*.py")) + sorted((ROOT / "analyzer" / "render").glob("*.py"))
    assert len(files) > 20
    problems = []
    for path in files:
        tree = ast.parse(path.read_text())
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call) or _name(call.func) not in SINKS:
                continue
            for arg in [*call.args, *(k.value for k in call.keywords if k.arg == "title")]:
                problems += [f"{Path(path).relative_to(ROOT)}:{call.lineno}: {{{b}}}" for b in _bypasses(arg)]
    assert not problems, "untrusted values printed without analyzer.render.safe.clean:\n" + "\n".join(problems)


def test_the_scan_finds_a_bypass():
    tree = ast.parse('typer.echo(f"{res.arrow}: {n:,} from {clean(res.source)}")')
    call = tree.body[0].value  # type: ignore[attr-defined]
    assert _bypasses(call.args[0]) == ["res.arrow"]
