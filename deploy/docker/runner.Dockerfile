# The GPU runner image: `replayscope run` on CUDA graphs, streaming to a collector.
# Build from the repository root:
#   docker build -f deploy/docker/runner.Dockerfile -t replayscope-runner .
# Needs the NVIDIA Container Toolkit on the host (docker run --gpus all ...).
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /src
COPY pyproject.toml setup.py ./
COPY replayscope ./replayscope
COPY runner ./runner
COPY collector ./collector
COPY app ./app
COPY migrations ./migrations
# The [runner] extra adds torch; the base image's CUDA build satisfies torch>=2.4, so pip keeps it.
RUN pip install ".[runner]" \
    && python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

# The spool (events kept while the collector is unreachable) lives in the working directory.
WORKDIR /spool
VOLUME ["/spool"]

CMD ["replayscope", "run", "--backend", "cuda", "--preset", "136m", "--workload", "mixed", "--duration", "600"]
