"""Local backends: ``subprocess`` (OS isolation stack) and ``off`` (pass-through)."""
