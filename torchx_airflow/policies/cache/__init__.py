"""Lineage-based caching: the key of a task's inputs, file fingerprints, records, and the cache policy."""
