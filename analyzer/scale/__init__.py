"""Analysis at scale: per-rank work on a process pool or Ray, bounded-memory combination, the import cache."""
