"""The gpuanalyze trace format: its Arrow schema, row rules, and the guarded readers and writers of its files."""
