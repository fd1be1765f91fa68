"""Reproducible measurements of what users feel: ``make bench`` (``python -m benchmarks``)."""
