# syntax=docker/dockerfile:1
# opsbot: one image for every process (web, worker, sweeper, migrate); the command picks one.
#   docker build -t opsbot .
#   docker run --rm opsbot --help
# Checked by tests/test_deploy.py (no Docker needed): stages, pinned bases, non-root user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the locked dependencies, then opsbot itself, into /app/.venv -----------------
FROM ghcr.io/astral-sh/uv:0.13.9 AS uv
FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /bin/uv
# Bytecode compiled at build time (fast start-up); copies, not links, out of the cache;
# the image's Python, never a downloaded one.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/app/.venv
WORKDIR /src
# Dependencies first: this layer is rebuilt only when the lock file changes. The Teams
# adapter (extra `teams`: the Microsoft 365 Agents SDK) is included: `opsbot serve` needs it.
RUN --mount=type=cache,target=/root/.cache/uv \
    --mount=type=bind,source=uv.lock,target=uv.lock \
    --mount=type=bind,source=pyproject.toml,target=pyproject.toml \
    uv sync --locked --no-dev --extra teams --no-install-project
COPY . /src
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --extra teams --no-editable
# The model provider's LangChain integration is the operator's choice, not an opsbot
# dependency: docker build --build-arg MODEL_PACKAGES="langchain-openai" . (empty: demo only).
ARG MODEL_PACKAGES=""
RUN --mount=type=cache,target=/root/.cache/uv \
    if [ -n "$MODEL_PACKAGES" ]; then uv pip install --python /app/.venv/bin/python $MODEL_PACKAGES; fi

# --- runtime: the virtual environment only, run as an unprivileged user -------------------
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 opsbot \
    && useradd --system --uid 10001 --gid opsbot --home-dir /var/lib/opsbot --no-create-home \
        --shell /usr/sbin/nologin opsbot \
    && install -d -o opsbot -g opsbot -m 0700 /var/lib/opsbot
COPY --from=build /app/.venv /app/.venv
ENV PATH="/app/.venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OPSBOT_DATA_DIR=/var/lib/opsbot \
    OPSBOT_LOG_FORMAT=json \
    PORT=3000
WORKDIR /var/lib/opsbot
USER 10001:10001
EXPOSE 3000
ENTRYPOINT ["opsbot"]
CMD ["slack"]
