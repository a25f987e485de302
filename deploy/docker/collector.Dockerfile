# The collector + dashboard image (CPU): `replayscope serve`, `replayscope db upgrade`,
# the importers. Build from the repository root:
#   docker build -f deploy/docker/collector.Dockerfile -t replayscope .
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# No torch: the collector, dashboard and importers never run a model (torch comes only
# with the [runner] extra, which the runner image installs).
WORKDIR /src
COPY pyproject.toml setup.py ./
COPY replayscope ./replayscope
COPY runner ./runner
COPY collector ./collector
COPY app ./app
COPY migrations ./migrations
RUN pip install ".[postgres]" \
    && useradd --system --uid 10001 --home-dir /data --create-home replayscope

USER replayscope
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8300

HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8300/healthz', timeout=4)"]

CMD ["replayscope", "serve", "--host", "0.0.0.0", "--port", "8300"]
