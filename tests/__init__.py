"""The test suite. It writes bytecode even where PYTHONDONTWRITEBYTECODE is set (to ``__pycache__``, which git
ignores): without it every xdist worker rewrote the asserts of ~270 test modules and compiled the product's
modules again on every run, 4-5 s of CPU per worker (collect-only on this project's 2-core machine)."""

import sys

sys.dont_write_bytecode = False
