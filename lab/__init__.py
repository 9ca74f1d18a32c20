"""Namespace lab: multi-location hosts on one machine (see lab/README.md)."""
