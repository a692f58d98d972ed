"""Analysis: step metrics -> rules (one per bottleneck) -> projections -> one ranked Report. Pure functions."""
