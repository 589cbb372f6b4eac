"""The locustfile ``abserve load`` and ``abserve run`` hand to Locust (``locust -f FILE``).

It ships inside the package so an installed abserve sends load from any directory; the
repository's ``loadtest/locustfile.py`` is the same entry point for ``locust`` run by hand and
for the compose images. The logic lives in ``abserve.traffic.locust_user``.
"""

from abserve.traffic.locust_user import ChatUser

__all__ = ["ChatUser"]
