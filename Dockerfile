# kuzk's two images, from one build of the project into a venv. Build from the repository root:
#
#   docker build -t kuzk .
#       the control-plane image (the default, last target): the operator (`kuzk operator`), the
#       status server (`kuzk status-server`) and the uninstall hook; no CUDA, it never touches
#       a GPU
#   docker build --target prover -t kuzk-prover \
#       --build-arg BASE_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04 --build-arg EXTRAS=gpu .
#       the partition prover (`kuzk-prover`) on a CUDA runtime with CuPy; without those two
#       arguments, a CPU-only prover (NumPy) on the default base. Both carry the real prover,
#       `kuzk-fil-prover` (Rust, filecoin-proofs on the CPU), built from its locked sources in
#       RUST_IMAGE (any image with cargo and a C linker whose glibc is not newer than the
#       base's)
#   docker build --target prover -t kuzk-prover-cuda --build-arg FIL_PROVER_FEATURES=cuda \
#       --build-arg BASE_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04 --build-arg EXTRAS=gpu .
#       the same with `kuzk-fil-prover` built with its `cuda` feature: Groth16 proving on the
#       GPU (CUDA 13: the node needs an NVIDIA driver of the 580 series or newer, whose
#       libcuda.so.1 the NVIDIA container toolkit mounts; no GPU is needed to build). nvcc
#       comes from NVIDIA's CUDA 13.0 compiler wheels (stage cuda-toolchain, pip on the base);
#       RUST_IMAGE must then also have a C++ compiler (nvcc's host compiler). CUDA_ARCHS
#       names the GPUs' compute capabilities (default "80 86 89 90", prover_image/fil_prover/
#       cuda/nvcc_args.sh)
#
# BASE_IMAGE is any Debian or Ubuntu image (python3 3.11 or later and its venv module are
# installed when missing); EXTRAS names more extras of the prover to install (`gpu`: CuPy). The test
# bed builds both targets on a Debian base of its own, without extras (testenv/images).
# CuPy compiles the kernels on first use and keeps them under CUPY_CACHE_DIR; mount a writable
# volume (an emptyDir) at /var/cache/kuzk when the root filesystem is read-only.
ARG BASE_IMAGE=python:3.12-slim
ARG RUST_IMAGE=rust:1-bookworm
# kuzk-fil-prover's cargo features: empty (CPU only) or `cuda`; it also picks the stage the
# Rust build runs in (fil-prover-builder-cpu or fil-prover-builder-cuda), so the default build
# never makes the CUDA toolchain.
ARG FIL_PROVER_FEATURES=

FROM ${BASE_IMAGE} AS base
ENV DEBIAN_FRONTEND=noninteractive
# The distribution's python3 follows the release; pinning its exact build would break every
# rebuild.
# hadolint ignore=DL3008
RUN if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi

# nvcc for the CUDA build: NVIDIA's CUDA 13.0 compiler wheels (nvcc, its NVVM, the C runtime's
# and the runtime's headers), unpacked to /opt/cuda. The binary links none of their libraries.
FROM base AS cuda-toolchain
ARG CUDA_VERSION=13.0.88
ARG CUDA_RUNTIME_VERSION=13.0.96
RUN python3 -m venv /tmp/pip \
    && /tmp/pip/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps \
        --target /tmp/wheels "nvidia-cuda-nvcc==${CUDA_VERSION}" "nvidia-nvvm==${CUDA_VERSION}" \
        "nvidia-cuda-crt==${CUDA_VERSION}" "nvidia-cuda-runtime==${CUDA_RUNTIME_VERSION}" \
    && mv /tmp/wheels/nvidia/cu13 /opt/cuda \
    && rm -rf /tmp/pip /tmp/wheels

# Never leave this stage empty: podman 4.3 building with --layers=false (the test bed) deletes
# the image an instruction-less stage starts from, here RUST_IMAGE itself.
FROM ${RUST_IMAGE} AS fil-prover-builder-cpu
WORKDIR /src/fil_prover

FROM fil-prover-builder-cpu AS fil-prover-builder-cuda
COPY --from=cuda-toolchain /opt/cuda /opt/cuda
ENV PATH=/opt/cuda/bin:$PATH

# hadolint ignore=DL3006
FROM fil-prover-builder-${FIL_PROVER_FEATURES:-cpu} AS build-fil-prover
ARG FIL_PROVER_FEATURES
WORKDIR /src/fil_prover
ARG CUDA_ARCHS=
COPY prover_image/fil_prover ./
# The target directory is a build cache: a rebuild compiles only what changed. The CUDA build
# keeps its own (target/cuda), links against a stub of the driver's libcuda.so.1 (the binary
# needs the real one at run time) and compiles the kernels for CUDA_ARCHS.
RUN --mount=type=cache,target=/src/fil_prover/target \
    if [ -n "${FIL_PROVER_FEATURES}" ]; then \
        cuda/libcuda_stub.sh /tmp/libcuda-stub \
        && EC_GPU_CUDA_NVCC_ARGS="$(cuda/nvcc_args.sh ${CUDA_ARCHS})" \
        && export CUDA_LIBRARY_PATH=/tmp/libcuda-stub CARGO_TARGET_DIR=target/cuda EC_GPU_CUDA_NVCC_ARGS; \
    fi \
    && cargo build --release --locked --features "${FIL_PROVER_FEATURES}" \
    && install -D -m 0755 "${CARGO_TARGET_DIR:-target}/release/kuzk-fil-prover" /out/kuzk-fil-prover

FROM base AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/kuzk
ENV PATH=/opt/kuzk/bin:$PATH
WORKDIR /src
# pyproject.toml names README.md as the package's readme; the images get a one-line one, so
# that a change of the docs rebuilds neither image (README.md is not among their inputs).
COPY pyproject.toml constraints.txt ./
RUN echo 'kuzk: see the project README.' > README.md
COPY operator ./operator
COPY prover_image/kuzk_prover ./prover_image/kuzk_prover

# Each image gets the project with its own extra, at the versions the suite runs
# (constraints.txt): the operator's carries no NumPy, the prover's no Kopf or prometheus-client.
FROM build AS build-prover
ARG EXTRAS=
RUN pip install --no-cache-dir -c constraints.txt ".[prover${EXTRAS:+,${EXTRAS}}]"

FROM build AS build-operator
RUN pip install --no-cache-dir -c constraints.txt ".[operator]"

FROM base AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/kuzk/bin:$PATH
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin kuzk

FROM runtime AS prover
COPY --from=build-prover /opt/kuzk /opt/kuzk
COPY --from=build-fil-prover /out/kuzk-fil-prover /opt/kuzk/bin/kuzk-fil-prover
ENV CUPY_CACHE_DIR=/var/cache/kuzk/cupy
RUN mkdir -p /var/cache/kuzk/cupy && chown -R 10001:10001 /var/cache/kuzk
VOLUME /var/cache/kuzk
USER 10001:10001
ENTRYPOINT ["kuzk-prover"]

FROM runtime AS operator
COPY --from=build-operator /opt/kuzk /opt/kuzk
USER 10001:10001
ENTRYPOINT ["kuzk"]
