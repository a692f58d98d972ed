"""The one display boundary for untrusted text.

Traces are shared files: kernel names, GPU names, exception messages, paths and the names in a
cost config can hold terminal escape sequences (OSC 52 writes the clipboard, OSC 0 retitles the
window, CSI 2J clears the screen), bidirectional overrides, or text that Rich would parse as
markup (``[link=file:///etc/passwd]``). Every renderer shows such a string only through
``clean`` (the terminal through ``text``/``shorten``, HTML through ``html``): control and
invisible formatting characters become visible escapes (``\\x1b``, ``\\u202e``), nothing is ever
parsed as markup, and shortening cuts between whole characters of the escaped form, so an escape
is never cut in half.
"""

from __future__ import annotations

import html as _html
import re

from rich.cells import cell_len
from rich.text import Text

#: Characters that never reach a terminal or a page raw: C0 and C1 controls, DEL, every format (Cf)
#: character of Unicode 14 (soft hyphen, ALM, zero-width marks, bidi embeddings/overrides/isolates,
#: invisible operators, BOM, interlinear annotations, the TAG block that hides text), line and
#: paragraph separators, lone surrogates (undecodable bytes of a file name), and the characters that
#: render as nothing although they are letters or marks: Hangul fillers, the combining grapheme
#: joiner, Khmer invisible vowels, Mongolian variation selectors, variation selectors, and the whole
#: tag/variation-selector plane region U+E0000-U+E0FFF. ``tests/test_safe.py`` checks that every Cf
#: character of the running Python's Unicode database is in it.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\u3164\ud800-\udfff\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]"
)
ELLIPSIS = "…"


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's surrogateescape: show the original byte
        return f"\\x{code - 0xDC00:02x}"
    if code > 0xFFFF:
        return f"\\U{code:08x}"
    return f"\\u{code:04x}"


def clean(value: object) -> str:
    """``value`` as display-safe text: every control or invisible format character escaped visibly."""
    return _UNSAFE.sub(lambda m: _escape(m.group()), str(value))


def _tokens(value: object) -> list[str]:
    """The display form of ``value`` split into one token per original character."""
    return [_escape(ch) if _UNSAFE.match(ch) else ch for ch in str(value)]


def shorten(value: object, width: int) -> str:
    """``clean(value)``, shortened in the middle with an ellipsis to at most ``width`` terminal cells.

    Both ends survive (a path's directory and file name, a kernel's namespace and template
    tail); the cut falls between whole escapes."""
    tokens = _tokens(value)
    full = "".join(tokens)
    if cell_len(full) <= width:
        return full
    if width <= 1:
        return ELLIPSIS[:width]
    budget = width - 1
    head: list[str] = []
    tail: list[str] = []
    used = 0
    i, j = 0, len(tokens) - 1
    take_head = True
    while i <= j:
        tok = tokens[i] if take_head else tokens[j]
        if used + cell_len(tok) > budget:
            break
        used += cell_len(tok)
        if take_head:
            head.append(tok)
            i += 1
        else:
            tail.append(tok)
            j -= 1
        take_head = not take_head
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


def text(value: object, style: str = "") -> Text:
    """A Rich Text of ``clean(value)``: never parsed as markup, never a link."""
    return Text(clean(value), style=style)


def html(value: object) -> str:
    """``clean(value)`` escaped for HTML text and attribute values (also what plotly labels need:
    plotly.js reads ``<b>``, ``<a href>`` and entities in its strings)."""
    return _html.escape(clean(value), quote=True)
