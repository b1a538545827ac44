# syntax=docker/dockerfile:1
# The load generator's image (compose service `loadgen`): the runtime and the dev-tools
# distribution (`pip install . ./tools`, no extras: no torch, no embedded broker), a non-root
# user, `loadgen` as PID 1. The production image (deploy/Dockerfile) holds the runtime only.
#
#   docker build -f deploy/loadgen.Dockerfile -t chat-moderator-loadgen:0.1.0 .   (repository root)
#   docker run --rm chat-moderator-loadgen:0.1.0 --bootstrap kafka:9092 --rate 200 --duration 60
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# -- build: a virtualenv with both distributions and their pinned dependencies ------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/loadgen
# What `pip install . ./tools` reads (loadgen.Dockerfile.dockerignore): tools/pyproject.toml maps
# the top-level console/, devstack/, loadgen/ and models/ into the chat-moderator-tools wheel.
COPY pyproject.toml constraints.txt README.md LICENSE THIRD_PARTY.md ./
COPY moderator/ moderator/
COPY tools/ tools/
COPY console/ console/
COPY devstack/ devstack/
COPY loadgen/ loadgen/
COPY models/ models/
RUN /opt/loadgen/bin/pip install --no-cache-dir --constraint constraints.txt . ./tools \
 && /opt/loadgen/bin/loadgen --help >/dev/null

# -- runtime ------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="chat-moderator-loadgen" \
      org.opencontainers.image.description="Open-loop chat traffic and latency report for chat-moderator" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 loadgen \
 && useradd --system --uid 10001 --gid loadgen --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin loadgen
COPY --from=build /opt/loadgen /opt/loadgen
ENV PATH=/opt/loadgen/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
# A run of fixed length, then its report: no port to serve and nothing to health-check.
ENTRYPOINT ["loadgen"]
CMD ["--help"]
