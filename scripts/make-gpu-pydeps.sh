#!/usr/bin/env bash
# Packs the `openai` client and those of its dependencies that the GPU machine's image lacks
# (/work/.library/device/KINDS.md lists what it has: anyio, httpx, typing-extensions, ...) into
# gpu-pydeps.tar.xz for tools/bench_serve_gpu.sh: the GPU machine reaches no package registry,
# and the whole of aiperf with its dependencies is too large to travel with the working tree.
# The wheels are for the image's Python 3.12; a wheel is a zip of its importable tree, so
# unpacking it is the install.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/wheels" openai
mkdir "$work/gpu-pydeps"
for wheel in "$work"/wheels/*.whl; do
  case "$(basename "$wheel")" in
    # On the image already.
    anyio-*|certifi-*|distro-*|h11-*|httpcore-*|httpx-*|idna-*|tqdm-*|typing_extensions-*) ;;
    *) unzip -q -o "$wheel" -d "$work/gpu-pydeps" ;;
  esac
done
tar cJf gpu-pydeps.tar.xz -C "$work" gpu-pydeps
ls -l gpu-pydeps.tar.xz
