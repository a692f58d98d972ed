"""Run several `gpuanalyze` command lines in this one process, each with its own captured stdout and
stderr, and print their results as JSON: how the hostile-input corpus runs one input's commands
under one memory cap (tests/test_hostile_corpus.py)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback


def main() -> None:
    from analyzer.cli import main as cli

    results = []
    for args in json.loads(sys.argv[1]):
        out, err = io.StringIO(), io.StringIO()
        code = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # noqa: BLE001 - what the promise forbids: report it, do not die
                code = 1
                err.write(traceback.format_exc())
        results.append({"args": args, "code": code, "out": out.getvalue(), "err": err.getvalue()})
    sys.__stdout__.write(json.dumps(results))


if __name__ == "__main__":
    main()
