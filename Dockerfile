# context-window: MCP server giving small local models an external context buffer.
#
#   docker build -t context-window .
#   podman build --format docker -t context-window .   (OCI format drops HEALTHCHECK)
#   stdio (default; the MCP host runs this command):
#     docker run -i --rm -v ctx:/data context-window
#   Streamable HTTP (bind 0.0.0.0 inside the container, so set a token):
#     docker run --rm -p 127.0.0.1:3001:3001 -v ctx:/data -e CTX_HTTP_TOKEN=change-me \
#       context-window --http --host 0.0.0.0
#
# See examples/docker.md for ingest roots, Linux host.docker.internal and more.
#
# Plain Dockerfile syntax only (no "# syntax=" frontend, no RUN --mount), so the classic
# builder, BuildKit without a registry, and podman all build it; once the base image is
# local, the only network it needs is the package index.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY context_window ./context_window
# The package, its fast extra (numba: the compiled scan of large ingests) and every
# dependency in a venv; the runtime stage copies only the venv, without pip and
# setuptools (about 23 MB nothing at run time uses). dumb-init (a 9 kB wheel) is the
# container's process 1: see ENTRYPOINT.
RUN python -m venv /opt/context-window \
    && /opt/context-window/bin/pip install --no-cache-dir --disable-pip-version-check \
       '.[fast]' 'dumb-init>=1.2.5' \
    && /opt/context-window/bin/python -m pip uninstall --yes --quiet pip setuptools

FROM python:3.11-slim
# The MCP registry matches the image to server.json by this label.
LABEL io.modelcontextprotocol.server.name="io.github.context-window/context-window" \
      org.opencontainers.image.source="https://github.com/context-window/context-window" \
      org.opencontainers.image.licenses="MIT"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CTX_DATA_DIR=/data \
    CTX_LLM_BASE_URL=http://host.docker.internal:1234/v1 \
    PATH=/opt/context-window/bin:$PATH
COPY --from=build /opt/context-window /opt/context-window
# A fixed numeric non-root user, so runAsNonRoot checks can verify it; /data is
# created owned by it, and a new named volume copies that ownership.
RUN groupadd --system --gid 10001 ctx \
    && useradd --system --uid 10001 --gid ctx --home-dir /home/ctx --create-home ctx \
    && mkdir -p /data && chown ctx:ctx /data
USER 10001:10001
WORKDIR /home/ctx
# Compile the word scan of large ingests once, here, into this user's cache, so a new
# container does not spend its first large ingest's first seconds compiling.
# (tune_process is what the server's entry point runs first: it places numba's cache.)
RUN python -c "from context_window.cli.main import tune_process; tune_process(); \
from context_window.retrieval import wordscan; assert wordscan.available()"
VOLUME /data
# Used only with --http; stdio needs no port.
EXPOSE 3001
# With --http, GET /health on the server's port (read from the flags on process 1's
# command line and the CTX_* variables); a stdio server has nothing to probe and
# always passes.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 CMD ["context-window", "health"]
# dumb-init is process 1 and passes SIGTERM and SIGINT to the server alone
# (--single-child): the kernel drops a signal to a process 1 that has no handler, and
# the interpreter has none while it starts, so a `docker stop` sent at once with
# `docker run` would wait docker's 10 s.
ENTRYPOINT ["dumb-init", "--single-child", "--", "context-window"]
