# The app image: the `conductor` command (workers, beat, CLI) and Flower, on CPU-only torch.
# GPU work (serving the Conductor) happens in the vLLM image; see docker-compose.yml.
#   docker build -t conductor .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    CONDUCTOR_HOME=/data

# torch first and from the CPU wheel index: the default PyPI wheel bundles CUDA (gigabytes
# this image never uses). Its own layer, so code changes do not reinstall it.
# Keep TORCH_VERSION in step with the pin in pyproject.toml.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --index-url ${TORCH_INDEX} torch==${TORCH_VERSION}

WORKDIR /app
COPY . .
RUN pip install . \
    && useradd --create-home --uid 10001 conductor \
    && mkdir -p /data \
    && chown conductor /data

# Not root: workers run model output through verifiers and a code sandbox.
USER conductor
VOLUME ["/data"]
CMD ["conductor", "--help"]
