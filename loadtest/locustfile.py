"""Locust entry point for abserve traffic: ``locust -f loadtest/locustfile.py --host URL``.

Works with the web UI and ``--headless``, locally or as ``--master`` plus ``--worker``s. The
traffic knobs are the ``--abserve-*`` options (``locust -f loadtest/locustfile.py --help``);
the logic lives in ``abserve.traffic`` so it can be tested without Locust.
"""

from abserve.traffic.locust_user import ChatUser

__all__ = ["ChatUser"]
