"""The one redaction of every command line gpuanalyze shows or stores (RunInfo.argv however made, an Nsight Systems
capture's command, the ``sys.argv`` a tracker records): traces and reports are shared.

Hidden as ``***``: the value of an option or ``NAME=value`` whose name ends in a secret word (``--hf-token X``,
``--api-key=X``, ``WANDB_API_KEY=X``; not ``--tokenizer`` or ``--max-new-tokens``), a URL's password and secret
query parameters, a bearer or basic credential, and token-shaped values anywhere (``hf_``, ``sk-``, ``ghp_``,
``github_pat_``, ``glpat-``, ``xox?-``, AWS access key ids, Google API keys, JWTs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

REDACTED = "***"
_SECRET_PART = re.compile(r"(?:token|keys?|secrets?|passw(?:or)?d|passphrase|auth|credentials?)$")
_OPTION = re.compile(r"^(?P<name>--?[A-Za-z0-9][\w.\-]*)(?P<eq>=)?(?P<value>.*)$", re.DOTALL)
_ASSIGN = re.compile(r"^(?P<name>[+~]?[A-Za-z_][\w.\-/]*)=(?P<value>.*)$", re.DOTALL)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][\w+.\-]*://[^/\s:@]*):[^/\s@]*@")
_QUERY = re.compile(r"(?P<head>[?&;](?P<name>[\w.\-]{1,64})=)(?P<value>[^&;#\s]*)")
_SCHEME = re.compile(r"(?P<head>\b(?:[Bb]earer|BEARER|[Bb]asic|BASIC)\s+)[\w.~+/=\-]{8,}")
_TOKEN = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[\w\-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w\-]{20,}"
    r"|xox[abeprs]-[\w\-]{10,}|(?:AKIA|ASIA)[A-Z0-9]{16}|AIza[\w\-]{35}|eyJ[\w\-]{8,}\.[\w\-]{8,}\.[\w\-]{8,})"
)


def secret_name(name: str) -> bool:
    """Whether a name names a secret: one of its parts (letters and digits) ends in a secret word."""
    return any(_SECRET_PART.search(part) for part in re.split(r"[^a-z0-9]+", name.lower()) if part)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with its secrets replaced by ``***``; an argument that is a whole command (``bash -c "..."``) is
    redacted word by word."""
    out: list[str] = []
    hide = False
    for arg in argv:
        option, assign = _OPTION.match(arg), _ASSIGN.match(arg)
        secret = option is not None and secret_name(option["name"]) and not any(c.isspace() for c in arg)
        if hide and not arg.startswith("--"):
            out.append(REDACTED)
            secret = False
        elif any(c.isspace() for c in arg):
            out.append(redact_command(arg))
        elif secret and option:
            out.append(f"{option['name']}={REDACTED}" if option["eq"] else arg)
        elif assign and secret_name(assign["name"]):
            out.append(f"{assign['name']}={REDACTED}")
        else:
            arg = _URL_PASSWORD.sub(rf"\g<head>:{REDACTED}@", _SCHEME.sub(rf"\g<head>{REDACTED}", arg))
            arg = _QUERY.sub(lambda m: m["head"] + REDACTED if secret_name(m["name"]) and m["value"] else m[0], arg)
            out.append(_TOKEN.sub(REDACTED, arg))
        hide = secret and option is not None and not option["eq"]
    return out


def redact_command(text: str) -> str:
    """A command line as one string, redacted as ``redact_argv`` (its white space kept)."""
    parts = re.split(r"(\s+)", _SCHEME.sub(rf"\g<head>{REDACTED}", text))
    parts[0::2] = redact_argv(parts[0::2])
    return "".join(parts)
