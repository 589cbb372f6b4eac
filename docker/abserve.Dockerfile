# abserve's service image: router, Locust master and workers, and the report, all from the
# same `abserve[service]` install (no vLLM, no GPU libraries). Runs as an unprivileged user.
#
# Build arguments (docker-compose.yml passes them; the GPU host needs none of them):
#   PYTHON_IMAGE     the base; python:3.11-slim, or on a machine that cannot pull images the
#                    Debian base scripts/compose-images.sh builds (`make compose-images`)
#   PIP_OPTIONS      extra pip options; `make compose-images` installs from a local wheelhouse,
#                    served on the host's loopback during the build
#   EXTRA_CA_CERTS   PEM certificates pip must trust besides the base's own, for a network
#                    whose proxy re-signs TLS (the usual corporate proxy), e.g.
#                    ABSERVE_EXTRA_CA_CERTS="$(cat /usr/local/share/ca-certificates/*.crt)"
#                    They are used by this build's pip only, never written into the image.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}
ARG PIP_OPTIONS=""
ARG EXTRA_CA_CERTS=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

WORKDIR /app
# The dependencies of abserve[service] (the base ones and the extra's) first, in a layer of
# their own (read from pyproject.toml), so that a change to abserve's code rebuilds only the
# small layer below.
COPY pyproject.toml README.md /app/
# hadolint ignore=SC2086
RUN set -e; \
    if [ -n "$EXTRA_CA_CERTS" ]; then \
      printf '%s\n' "$EXTRA_CA_CERTS" | cat /etc/ssl/certs/ca-certificates.crt - > /tmp/build-ca.pem; \
      export PIP_CERT=/tmp/build-ca.pem; \
    fi; \
    python3 -m venv /opt/venv; \
    python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); \
print("\n".join(p["project"]["dependencies"] + p["project"]["optional-dependencies"]["service"] \
+ ["setuptools", "wheel"]))' > /tmp/service.txt; \
    pip install $PIP_OPTIONS -r /tmp/service.txt; \
    rm -f /tmp/build-ca.pem /tmp/service.txt; \
    useradd --create-home --uid 10001 abserve; \
    mkdir -p /runs /reports; \
    chown abserve:abserve /runs /reports
COPY service /app/service
# The reports' glossary (service/abserve/report/templates/glossary.md links to it): every
# report writes glossary.html beside it.
COPY docs/glossary.md /app/docs/glossary.md
# abserve itself, against the dependencies above, installed in place (editable): abserve finds
# its traffic profiles beside its sources (configs/traffic), which a copy into site-packages
# would lose (every Locust worker failed with "unknown traffic profile" in the first real run).
RUN pip install $PIP_OPTIONS --no-deps --no-build-isolation -e "/app[service]"
# Load profiles and their locustfile; configs are mounted read-only at run time (compose)
# and copied here as well so the image also works on its own.
COPY loadtest /app/loadtest
COPY configs /app/configs
COPY docker/*.sh /app/docker/

USER abserve
ENTRYPOINT ["abserve"]
CMD ["--help"]
