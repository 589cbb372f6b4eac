"""``python -m abserve``: the same CLI as the ``abserve`` console script."""

from abserve.cli import app

app(prog_name="abserve")
