import io

from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from analyzer.render.safe import ELLIPSIS, clean, html, shorten, text
from tests.report_helpers import HOSTILE, raw_controls


def printed(renderable) -> str:
    out = io.StringIO()
    Console(file=out, width=200, force_terminal=True, color_system=None, highlight=False).print(renderable)
    return out.getvalue()


def test_controls_are_escaped_visibly():
    assert clean("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert clean("\x1b]52;c;ZQ==\x07") == "\\x1b]52;c;ZQ==\\x07"
    assert clean("c1\x9bcsi") == "c1\\x9bcsi"
    assert clean("line\nbreak\ttab\x00nul\x7f") == "line\\x0abreak\\x09tab\\x00nul\\x7f"
    assert clean("abc\u202edcba") == "abc\\u202edcba"
    assert clean("bytes\udcff") == "bytes\\xff"  # an undecodable byte of a file name
    assert clean("plain ünïcode 名前 [red]") == "plain ünïcode 名前 [red]"
    assert not raw_controls(clean(HOSTILE))


def test_rich_never_reads_markup_nor_links():
    for value in ("x[/bad]y", "[link=file:///etc/passwd]click[/link]", "[red]r.arrow"):
        assert printed(text(value)).strip() == value  # no MarkupError, no style, name kept
    assert "\x1b]8;" not in printed(text("[link=file:///etc/passwd]click[/link]"))  # no OSC 8 hyperlink
    out = printed(text(HOSTILE))
    assert "\x1b]52" not in out and "\x1b]0" not in out and "\x1b[2J" not in out and "\x9b" not in out


def test_html_escapes_markup_after_cleaning():
    assert html('<script>alert("x")</script>\x1b') == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;\\x1b"


def test_shorten_keeps_both_ends():
    path = "/home/user/experiments/2024-06-01/run-42/checkpoints/trace.rank0.arrow"
    short = shorten(path, 30)
    assert cell_len(short) <= 30 and ELLIPSIS in short
    assert short.startswith("/home/") and short.endswith("rank0.arrow")
    assert shorten("short", 30) == "short"


@given(st.text(alphabet=st.sampled_from(list("ab名\x1b\x07\x9b\u202e\n[]")), max_size=60), st.integers(1, 40))
def test_shorten_never_cuts_an_escape(value, width):
    short = shorten(value, width)
    assert cell_len(short) <= width
    assert not raw_controls(short)
    if ELLIPSIS not in short or short == clean(value):
        assert short == clean(value) or width < 2
        return
    head, tail = short.split(ELLIPSIS, 1) if short.count(ELLIPSIS) == 1 else (short, "")
    full = clean(value)
    assert full.startswith(head) and full.endswith(tail)
    for part in (head, tail):  # every backslash starts a whole escape: \xNN or \uNNNN
        i = part.find("\\")
        while i != -1:
            assert part[i + 1] in "xu"
            n = 4 if part[i + 1] == "x" else 6
            assert len(part) >= i + n
            i = part.find("\\", i + n)
