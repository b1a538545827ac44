# syntax=docker/dockerfile:1
# The review console's image (`moderator console`, compose service `console`, deploy/k8s/console):
# the runtime and the dev-tools distribution with its console extra (Starlette, uvicorn; no torch,
# no embedded broker), a non-root user, the console as PID 1 on port 8080.
#
#   docker build -f deploy/console.Dockerfile -t chat-moderator-console:0.1.0 .   (repository root)
#   docker run --rm -p 127.0.0.1:8080:8080 -e MODERATOR_KAFKA_BOOTSTRAP=kafka:9092 \
#     -e MODERATOR_CONSOLE_TOKENS=alice:a-long-random-token chat-moderator-console:0.1.0
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# -- build: a virtualenv with both distributions and their pinned dependencies ------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/console
# What `pip install . './tools[console]'` reads (console.Dockerfile.dockerignore): tools/pyproject.toml
# maps the top-level console/, devstack/, loadgen/ and models/ into the chat-moderator-tools wheel.
COPY pyproject.toml constraints.txt README.md LICENSE THIRD_PARTY.md ./
COPY moderator/ moderator/
COPY tools/ tools/
COPY console/ console/
COPY devstack/ devstack/
COPY loadgen/ loadgen/
COPY models/ models/
RUN /opt/console/bin/pip install --no-cache-dir --constraint constraints.txt . './tools[console]' \
 && /opt/console/bin/moderator console --help >/dev/null

# -- runtime ------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="chat-moderator-console" \
      org.opencontainers.image.description="The review console of chat-moderator, for human moderators" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 console \
 && useradd --system --uid 10001 --gid console --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin console
COPY --from=build /opt/console /opt/console
# All interfaces, for `docker run -p 127.0.0.1:8080:8080` with token logins; deploy/k8s/console
# sets 127.0.0.1 instead, where oauth2-proxy in the same pod is the console's only client.
ENV PATH=/opt/console/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MODERATOR_CONSOLE_HOST=0.0.0.0 \
    MODERATOR_CONSOLE_PORT=8080
USER 10001:10001
EXPOSE 8080
# /healthz answers while the console serves, broker or not (the page says when it is away).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MODERATOR_CONSOLE_PORT', '8080'), timeout=3)"]
ENTRYPOINT ["moderator", "console"]
