"""The timeline both importers fill (events, the sink, the model) and the pass that reduces it to per-step rows."""
