# Kale's reference trainer (`kale train`: a parameter-server CTR model on a Kafka topic), the
# image of the example workloads in manifests/examples. torch is installed first and pinned
# (TORCH_SPEC; point TORCH_INDEX_URL at a CUDA wheel index for GPU nodes), then the trainer
# extra. Non-root, read-only root filesystem (checkpoints go to a mounted volume).
FROM python:3.11-slim-bookworm AS build
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX_URL="https://download.pytorch.org/whl/cpu"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kale ./kale
COPY scheduler ./scheduler
COPY trainer ./trainer
COPY autoscaler ./autoscaler
COPY kube ./kube
COPY forecasting ./forecasting
COPY throughput ./throughput
COPY placement ./placement
COPY common ./common
RUN python -m venv /opt/kale \
    && /opt/kale/bin/pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC" \
    && /opt/kale/bin/pip install --no-cache-dir ".[trainer]" \
    && /opt/kale/bin/kale train --help >/dev/null

FROM python:3.11-slim-bookworm
# The version label comes from common/version.py through `make images` (and the release job).
ARG VERSION=unknown
LABEL org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.title="kale-trainer" \
      org.opencontainers.image.description="Kale's reference parameter-server trainer (kale train)" \
      org.opencontainers.image.source="https://github.com/kale-dev/kale" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/kale /opt/kale
ENV PATH=/opt/kale/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
ENTRYPOINT ["kale"]
CMD ["train", "--help"]
