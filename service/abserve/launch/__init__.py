"""Processes abserve starts: vLLM servers, the tiny model builder, the run orchestrator."""
