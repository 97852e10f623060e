# PR Cockpit: `cockpit serve` in a slim image with git, as a non-root user, state in /data.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY templates ./templates
RUN pip install --no-cache-dir . \
    && useradd --create-home --uid 10001 cockpit \
    && mkdir -p /data && chown cockpit:cockpit /data

USER cockpit
ENV COCKPIT_DATA_DIR=/data \
    COCKPIT_HOST=0.0.0.0 \
    COCKPIT_PORT=8080 \
    PYTHONUNBUFFERED=1
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('COCKPIT_PORT', '8080') + '/healthz', timeout=4)"

CMD ["cockpit", "serve"]
