# PR Cockpit: `cockpit serve` in a slim image with git, as a non-root user, state in /data.
# scripts/container_check.py builds and runs this image and checks what the README promises.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY templates ./templates
# A regular (not editable) install: the image gets exactly what a wheel ships.
RUN pip install . \
    && rm -rf /src/build /src/*.egg-info \
    && useradd --create-home --uid 10001 cockpit \
    && mkdir -p /data && chown cockpit:cockpit /data

USER cockpit
WORKDIR /home/cockpit
ENV COCKPIT_DATA_DIR=/data \
    COCKPIT_HOST=0.0.0.0 \
    COCKPIT_PORT=8080 \
    PYTHONUNBUFFERED=1
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('COCKPIT_PORT', '8080') + '/healthz', timeout=4)"

CMD ["cockpit", "serve"]
