# One image for every Omnistage service (web, orchestrator, worker pools).
# CPU build by default; pass --build-arg EXTRAS=gpu,dev on a CUDA base for GPU pools.
ARG BASE=python:3.12-slim
FROM ${BASE}
ARG EXTRAS=cpu
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 DJANGO_SETTINGS_MODULE=control_plane.settings
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends build-essential libsndfile1 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY control_plane control_plane
COPY stages stages
COPY workers workers
COPY console console
COPY migrations migrations
COPY manage.py ./
RUN pip install ".[${EXTRAS}]" \
 && for m in torchvision torchaudio torchcodec; do python -c "import $m" 2>/dev/null || pip uninstall -y $m || true; done
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "--websocket-max-message-size", "16777216", "--websocket-max-frame-size", "16777216", "control_plane.asgi:application"]
