"""The record model: what the router records, the store keeps and the judgment reads (pure data, no I/O)."""
