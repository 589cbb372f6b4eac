"""What runs inside a vLLM server: the multimodal lookups and the mutants (entry: abserve.vllm_plugin)."""
