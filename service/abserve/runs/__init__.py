"""Runs: one experiment end to end (rounds, looks, families, blocks, the run's provenance and watch)."""
