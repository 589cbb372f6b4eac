"""Deployment on a GPU host: the experiment config turned into docker compose's environment."""
