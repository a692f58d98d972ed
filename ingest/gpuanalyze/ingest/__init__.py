"""The trace format and everything that reads or writes it: schema, writer, readers, importers.

Import the module you need (``gpuanalyze.ingest.trace.reader`` ...); this package imports nothing.
"""
