"""Helpers for testing meTile kernels and backends."""
