"""A store URL as it may be shown: in logs, reports and error messages, never with its password.

``postgresql+psycopg://user:secret@host/db`` is printed as ``postgresql+psycopg://user:***@host/db``
(SQLAlchemy's own rendering); a URL SQLAlchemy cannot parse has anything between ``://`` and
``@`` hidden instead, so a malformed URL with a password in it does not leak either.
"""

from __future__ import annotations

import re

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

_CREDENTIALS = re.compile(r"(?<=://)[^/@]*@")


def shown_url(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _CREDENTIALS.sub("***@", url)
