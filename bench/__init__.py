"""Benchmarks: each compares the project against a named peer in one run and prints the ratio."""
