# One image for every Omnistage service (web, orchestrator, worker pools).
# CPU build by default; pass --build-arg EXTRAS=gpu,demo on a CUDA base for GPU pools.
ARG BASE=python:3.12-slim
FROM ${BASE}
ARG EXTRAS=cpu,demo
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 DJANGO_SETTINGS_MODULE=control_plane.settings
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends build-essential libsndfile1 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY scripts/install.sh scripts/install.sh
COPY control_plane control_plane
COPY stages stages
COPY workers workers
COPY console console
COPY client client
COPY migrations migrations
COPY manage.py ./
# the install step scripts/setup.sh runs too (the PyTorch CPU index for the cpu extra);
# tests/test_dockerfile.py checks that it resolves
RUN bash scripts/install.sh --python python --extras "${EXTRAS}"
EXPOSE 8000
# the web tier: OMNISTAGE_WEB_PROCESSES daphne processes (default: the cores) on one port
CMD ["python", "manage.py", "web", "--host", "0.0.0.0", "--port", "8000"]
