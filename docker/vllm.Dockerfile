# vLLM server image for one arm: the official vLLM OpenAI image, unchanged, plus abserve's
# vLLM plugin. Nothing else is installed or upgraded, so an arm runs exactly the vLLM build
# it names.
#
# The base is pinned by tag (VLLM_IMAGE below); to pin by digest as well, build with
#   --build-arg VLLM_IMAGE=vllm/vllm-openai:v0.33.0@sha256:<digest>
# (`docker buildx imagetools inspect vllm/vllm-openai:v0.33.0` prints the digest).
#
# abserve goes in with `--no-deps`: the plugin imports only the standard library, so the
# install cannot move any of vLLM's pins. Which lookup the plugin selects is decided
# per container at run time by ABSERVE_MM_LOOKUP (see docker-compose.yml).
#
# EXTRA_CA_CERTS (build argument, as for docker/abserve.Dockerfile; docker-compose.yml passes
# ABSERVE_EXTRA_CA_CERTS to every arm's build): PEM certificates pip must trust besides the
# base's own, for a network whose proxy re-signs TLS (pip fetches the build backend of
# abserve's install). Used by this build's pip only, never written into the image.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.33.0
FROM ${VLLM_IMAGE}
ARG EXTRA_CA_CERTS=""
# The install needs root, whatever user the base runs as; the arm itself runs as the host user
# (docker-compose.yml: user ABSERVE_UID:ABSERVE_GID), never as this image's user.
USER root

COPY pyproject.toml README.md /opt/abserve/
COPY service /opt/abserve/service
RUN set -e; \
    if [ -n "$EXTRA_CA_CERTS" ]; then \
      { cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null || true; printf '%s\n' "$EXTRA_CA_CERTS"; } > /tmp/build-ca.pem; \
      export PIP_CERT=/tmp/build-ca.pem; \
    fi; \
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --no-deps /opt/abserve; \
    rm -f /tmp/build-ca.pem; \
    python3 -c "import importlib.metadata as md; \
names = [ep.name for ep in md.entry_points(group='vllm.general_plugins')]; \
assert 'abserve' in names, names; \
import abserve.vllm_plugin; print('abserve plugin registered:', names)"
# vLLM's cache (VLLM_CACHE_ROOT, each arm's named volume): a new volume takes this folder's owner
# and mode, so the arm writes there as any user.
RUN mkdir -p /vllm-cache && chmod 1777 /vllm-cache

# The base image's entrypoint (`vllm serve`) is kept as it is.
