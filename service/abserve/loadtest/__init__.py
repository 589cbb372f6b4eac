"""The packaged locustfile (``locustfile.py``), alone in its folder: Locust puts the folder of
the file it is given on ``sys.path``, so nothing else here may be importable from there."""
