# abserve's service image: router, Locust master and workers, and the report, all from the
# same `abserve[service]` install (no vLLM, no GPU libraries). Runs as an unprivileged user.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md /app/
COPY service /app/service
RUN python -m pip install "/app[service]" \
 && useradd --create-home --uid 10001 abserve \
 && mkdir -p /runs /reports \
 && chown abserve:abserve /runs /reports
# Load profiles and their locustfile; configs are mounted read-only at run time (compose)
# and copied here as well so the image also works on its own.
COPY loadtest /app/loadtest
COPY configs /app/configs
COPY docker/run-router.sh docker/run-load.sh docker/prepare-run.sh docker/run-report.sh /app/docker/

USER abserve
ENTRYPOINT ["abserve"]
CMD ["--help"]
