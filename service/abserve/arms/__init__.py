"""Arms: starting, watching and proving the vLLM servers under test (processes, compose, URLs)."""
