"""abserve: serving-level A/B comparison of two vLLM builds.

One package per area, one module per concept; ``.importlinter`` holds the layers (a package
imports only from its own layer and those below), top to bottom:

- ``cli``: the Typer commands, thin;
- ``runs`` (one experiment end to end) | ``deploy`` (the GPU host's compose environment);
- ``ledger`` (the release ledger, sign-offs) | ``saved`` (judging runs saved by other tools);
- ``report``: the judgment rendered (HTML, Markdown, JSON, JUnit);
- ``arms``: starting, watching and proving the vLLM servers under test;
- ``config``: an experiment's config file;
- ``loadtest``: the Locust process;
- ``traffic`` (profiles, files, the load generator) | ``router`` (the A/B router);
- ``store`` (SQLite/PostgreSQL) | ``compare`` (the judgment: pure statistics) |
  ``vllm_plugin`` (what runs inside vLLM: the plugin, the lookups, the test-only mutants) |
  ``openai_request`` (an OpenAI request's checks);
- ``model``: the record model (exchanges, token columns, provenance, telemetry, roles);
- ``base``: small helpers (units, packaged files, YAML, limits, exit codes).

``docs/how-it-works.md`` ("Pieces") says where each piece lives.
"""

__version__ = "0.1.0"
