# The kuzk control-plane image: the operator (`kuzk operator`) and the status server
# (`kuzk status-server`). No CUDA: it never touches a GPU. Build from the repository root:
#   docker build -t kuzk .
# BASE_IMAGE is any Debian-like image with python3 (3.11 or later) and its venv module; the
# test bed builds this same file on a Debian base of its own (tests/testenv/images).
ARG BASE_IMAGE=python:3.12-slim

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/kuzk
ENV PATH=/opt/kuzk/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY prover_image/kuzk_prover ./prover_image/kuzk_prover
RUN pip install --no-cache-dir .

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/kuzk/bin:$PATH
COPY --from=build /opt/kuzk /opt/kuzk
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin kuzk
USER 10001:10001
ENTRYPOINT ["kuzk"]
