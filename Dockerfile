# Image for the compose stack: pairsieve with Prefect and Dask. Set TORCH_INDEX_URL to a CPU-only
# wheel index to avoid the multi-GB CUDA build of torch.
FROM python:3.11-slim
ARG TORCH_INDEX_URL=""
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
COPY flows ./flows
RUN if [ -n "$TORCH_INDEX_URL" ]; then pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" "torch>=2.2,<2.14"; fi \
 && pip install --no-cache-dir .
ENV HF_HUB_OFFLINE=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
