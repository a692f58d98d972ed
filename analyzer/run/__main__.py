"""``python -m analyzer.run [OPTIONS] -- COMMAND ...``: the same as ``gpuanalyze run``."""

import sys

from analyzer.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
