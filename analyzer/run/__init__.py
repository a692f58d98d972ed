"""`gpuanalyze run` / ``python -m analyzer.run``: profile a command without changing it.

``launch`` runs the command (the parent side); ``child`` arms profiling in each Python process
it starts (via ``bootstrap/sitecustomize.py`` on PYTHONPATH); ``config`` is the GPUANALYZE_*
variables both sides agree on. Kept free of imports so that every child process starts cheaply.
"""
