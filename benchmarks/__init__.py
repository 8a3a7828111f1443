"""Measurement harness: latency, load, scale, seed comparison, relevance, indexing, fan-out."""
