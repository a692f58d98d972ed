"""The Nsight Systems importer: an export's SQLite tables read a batch at a time into the timeline."""
