"""The one redaction of command lines: every command line gpuanalyze shows or stores goes through it, whatever
its source (our traces' ``RunInfo.argv``, an Nsight Systems capture's ``META_DATA_CAPTURE``, the ``sys.argv`` a
tracker records). Traces and reports are shared (bug reports, colleagues' clusters, tracker servers).

Hidden (``***``): the value of an option whose name ends in a secret word (``--hf-token X``, ``--api-key=X``,
``--db-password X``, ``--client_secret``, ``--oauth``; not ``--tokenizer`` or ``--max-new-tokens``), of a
``NAME=value`` argument named so (``WANDB_API_KEY=X``, ``model.api_key=X``), a URL's password
(``s3://user:***@host``) and secret query parameters (``?token=***``), a bearer or basic credential, and values
shaped like the tokens services issue wherever they appear (``hf_``, ``sk-``, ``ghp_``/``github_pat_``,
``glpat-``, ``xox?-``, AWS access key ids, Google API keys, JWTs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

REDACTED = "***"
#: A name part (letters and digits between separators) that names a secret when it ends with one of these.
_SECRET_PART = re.compile(r"(?:token|keys?|secrets?|passw(?:or)?d|passphrase|auth|credentials?)$")
_PARTS = re.compile(r"[^a-z0-9]+")
_OPTION = re.compile(r"^(?P<name>--?[A-Za-z0-9][\w.\-]*)(?P<eq>=)?(?P<value>.*)$", re.DOTALL)
_ASSIGN = re.compile(r"^(?P<name>[+~]?[A-Za-z_][\w.\-/]*)=(?P<value>.*)$", re.DOTALL)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][\w+.\-]*://[^/\s:@]*):[^/\s@]*@")
_QUERY = re.compile(r"(?P<head>[?&;](?P<name>[\w.\-]{1,64})=)(?P<value>[^&;#\s]*)")
_SCHEME = re.compile(r"(?P<head>\b(?:[Bb]earer|BEARER|[Bb]asic|BASIC)\s+)[\w.~+/=\-]{8,}")
_TOKEN = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[\w\-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w\-]{20,}"
    r"|xox[abeprs]-[\w\-]{10,}|(?:AKIA|ASIA)[A-Z0-9]{16}|AIza[\w\-]{35}"
    r"|eyJ[\w\-]{8,}\.[\w\-]{8,}\.[\w\-]{8,})"
)


def secret_name(name: str) -> bool:
    """Whether an option or variable name names a secret (one of its parts ends in a secret word)."""
    return any(_SECRET_PART.search(part) for part in _PARTS.split(name.lower()) if part)


def _in_text(arg: str) -> str:
    """Secrets inside one argument: URL passwords and query parameters, credentials, token-shaped values."""
    arg = _URL_PASSWORD.sub(rf"\g<head>:{REDACTED}@", arg)
    arg = _QUERY.sub(lambda m: m["head"] + REDACTED if secret_name(m["name"]) and m["value"] else m[0], arg)
    arg = _SCHEME.sub(rf"\g<head>{REDACTED}", arg)
    return _TOKEN.sub(REDACTED, arg)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with its secrets replaced by ``***`` (the module docstring says which); an argument holding a whole
    command (``bash -c "..."``) is redacted word by word."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("--"):
                out.append(REDACTED)
                continue
        if any(c.isspace() for c in arg):
            out.append(redact_command(arg))
            continue
        option = _OPTION.match(arg)
        if option and secret_name(option["name"]):
            out.append(f"{option['name']}={REDACTED}" if option["eq"] else arg)
            hide_next = not option["eq"]
            continue
        assign = _ASSIGN.match(arg)
        if assign and secret_name(assign["name"]):
            out.append(f"{assign['name']}={REDACTED}")
            continue
        out.append(_in_text(arg))
    return out


def redact_command(text: str) -> str:
    """A command line as one string (words separated by white space, which is kept), redacted as ``redact_argv``."""
    parts = re.split(r"(\s+)", _SCHEME.sub(rf"\g<head>{REDACTED}", text))
    parts[0::2] = redact_argv(parts[0::2])
    return "".join(parts)
