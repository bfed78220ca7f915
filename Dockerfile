# strategist: one image for the API, the migration step and the workers (docker-compose.yml).
# On a GPU host the default PyPI torch wheel (CUDA build) is what the gpu pool needs.
FROM python:3.11-slim

# iproute2: the testbed's network namespaces and tc shaping (testbed pool; needs NET_ADMIN).
RUN apt-get update \
    && apt-get install -y --no-install-recommends iproute2 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY simulator ./simulator
COPY search ./search
COPY runtime ./runtime
COPY service ./service
COPY datasets ./datasets
RUN pip install --no-cache-dir -e .

# Data (embedded database, simulator versions) lives here unless URLs point elsewhere.
ENV STRATEGIST_DATA_DIR=/var/lib/strategist \
    STRATEGIST_DATASETS=/app/datasets
VOLUME /var/lib/strategist
EXPOSE 8000
CMD ["strategist", "serve", "--host", "0.0.0.0", "--port", "8000"]
