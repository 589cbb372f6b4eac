# PostgreSQL for scripts/compose-check.sh's PostgreSQL variant only (docker/compose-check.postgres.yml):
# Debian's postgresql on the locally built Debian base (no image can be pulled here). A GPU
# host points ABSERVE_DATABASE_URL at its own server instead.
ARG PYTHON_IMAGE=abserve/python-base:bookworm
FROM ${PYTHON_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY docker/postgres-check.sh /usr/local/bin/postgres-check.sh
USER postgres
ENTRYPOINT ["/usr/local/bin/postgres-check.sh"]
