"""An OpenAI request checked the way the router and vLLM read it, below everything that sends one.

The router refuses a request before any arm sees it; a traffic file is refused line by line
before a run starts (``traffic.sources.prepare``); a saved run's requests are keyed the way the
router fingerprints them (``saved.keys``). All three read a request with these modules, so they
sit below ``router``, ``traffic`` and ``saved`` in the import contract:

- ``errors``: ``RouterError`` and its OpenAI-style JSON body;
- ``parts``: chat content parts as vLLM reads them, every media URL a part carries;
- ``media_urls``: the media-URL policy (``data:``, or allowed public hosts only);
- ``body_json``: parsing a body without running the JSON parser over its data URLs;
- ``validation``: the body cap, the schema, the depth, the image count, the fingerprint.

Plain Python, orjson, numpy, pydantic and blake3: no web framework (the router's HTTP answer
is ``router.errors``).
"""
