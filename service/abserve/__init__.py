"""abserve: serving-level A/B comparison of two vLLM builds.

The package is split one module per concept (see ``docs`` in the README):
``lookup`` (pure window lookups), ``vllm_plugin`` (the only module importing vLLM),
``records`` (the exchange record shared by router, store and judgment),
``router/``, ``store/``, ``compare/``, ``report/``, ``launch/`` and the thin ``cli``.
"""

__version__ = "0.1.0"
