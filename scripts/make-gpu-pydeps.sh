#!/usr/bin/env bash
# Packs Python load generators for tools/bench_serve_gpu.sh: the GPU machine reaches no package
# registry, so what it lacks travels with the working tree.
#   scripts/make-gpu-pydeps.sh          gpu-pydeps.tar.xz: the `openai` client and those of its
#                                       dependencies the GPU machine's image lacks
#   scripts/make-gpu-pydeps.sh --aiperf gpu-aiperf.tar.xz: NVIDIA's aiperf and the packages its
#                                       `profile` command imports that the image lacks (the image
#                                       has pyarrow, pandas, aiohttp, rich, transformers, ...;
#                                       /work/.library/device/KINDS.md). aiperf's whole dependency
#                                       tree (dashboards, plotting, Kubernetes) is ~230 MB; what
#                                       `profile` imports and the image lacks is ~20 MB.
# The wheels are for the image's Python 3.12; a wheel is a zip of its importable tree, so
# unpacking it is the install.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
download() {
  python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/wheels" "$@"
}
# Unpacks the wheels whose distribution name (normalised: lower case, '-' for '_' and '.') is in
# the list, or every wheel but those in the skip list.
unpack() {
  local mode=$1 list dest=$3 wheel name
  list=" $(echo $2) "  # one space between names, also where the list spans lines
  mkdir -p "$dest"
  for wheel in "$work"/wheels/*.whl; do
    name="$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')"
    if { [ "$mode" = only ] && [[ "$list" == *" $name "* ]]; } ||
       { [ "$mode" = skip ] && [[ "$list" != *" $name "* ]]; }; then
      unzip -q -o "$wheel" -d "$dest"
    fi
  done
}
if [ "${1:-}" = --aiperf ]; then
  download aiperf==0.13.0
  unpack only "aiperf annotated-types brotli crick cyclopts docstring-parser ffmpeg-python future
    msgspec orjson pydantic pydantic-core pydantic-settings python-dotenv pyzmq rich-rst
    ruamel-yaml ruamel-yaml-clib setproctitle typing-inspection zstandard" "$work/gpu-aiperf"
  tar cJf gpu-aiperf.tar.xz -C "$work" gpu-aiperf
  ls -l gpu-aiperf.tar.xz
  exit 0
fi
download openai
# anyio ... typing_extensions: on the image already.
unpack skip "anyio certifi distro h11 httpcore httpx idna tqdm typing-extensions" "$work/gpu-pydeps"
tar cJf gpu-pydeps.tar.xz -C "$work" gpu-pydeps
ls -l gpu-pydeps.tar.xz
