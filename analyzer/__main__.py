"""`python -m analyzer` runs the gpuanalyze CLI."""

from analyzer.cli import main

main()
