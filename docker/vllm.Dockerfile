# vLLM server image for one arm: the official vLLM OpenAI image, unchanged, plus abserve's
# vLLM plugin. Nothing else is installed or upgraded, so an arm runs exactly the vLLM build
# it names.
#
# The base is pinned by tag (VLLM_IMAGE below); to pin by digest as well, build with
#   --build-arg VLLM_IMAGE=vllm/vllm-openai:v0.33.0@sha256:<digest>
# (`docker buildx imagetools inspect vllm/vllm-openai:v0.33.0` prints the digest).
#
# abserve's core install (no extras) is the plugin alone: stdlib only, no dependencies,
# so `--no-deps` cannot move any of vLLM's pins. Which lookup the plugin selects is decided
# per container at run time by ABSERVE_MM_LOOKUP (see docker-compose.yml).
ARG VLLM_IMAGE=vllm/vllm-openai:v0.33.0
FROM ${VLLM_IMAGE}

COPY pyproject.toml README.md /opt/abserve/
COPY service /opt/abserve/service
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --no-deps /opt/abserve \
 && python3 -c "import importlib.metadata as md; \
names = [ep.name for ep in md.entry_points(group='vllm.general_plugins')]; \
assert 'abserve' in names, names; \
import abserve.vllm_plugin; print('abserve plugin registered:', names)"

# The base image's entrypoint (`vllm serve`) and user are kept as they are.
