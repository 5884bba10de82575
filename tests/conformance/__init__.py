"""Conformance suites that every backend runs by subclassing (one fixture per backend)."""
