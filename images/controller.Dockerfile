# The Kale controller image: the core install only (the controller and the statistical
# forecasters; no torch, plotly, matplotlib, fastapi or the embedded broker). It runs as a
# non-root user on a read-only root filesystem: nothing is written outside the volumes the
# Deployment mounts (/var/lib/kale for state, /tmp). Build: `make images`.
FROM python:3.11-slim-bookworm AS build
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
    && /opt/kale/bin/pip install --no-cache-dir . \
    && /opt/kale/bin/kale --version

FROM python:3.11-slim-bookworm
# The version label comes from common/version.py through `make images` (and the release job).
ARG VERSION=unknown
LABEL org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.title="kale" \
      org.opencontainers.image.description="Kale: forecast-driven elastic GPU autoscaler for online training on Kafka" \
      org.opencontainers.image.source="https://github.com/kale-dev/kale" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/kale /opt/kale
ENV PATH=/opt/kale/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# 65532: the "nonroot" user of distroless images; the Deployment sets the same ids.
USER 65532:65532
EXPOSE 9100
ENTRYPOINT ["kale"]
CMD ["controller", "--config", "/etc/kale/config/controller.yaml"]
