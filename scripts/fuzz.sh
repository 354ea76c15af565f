#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (ASan + UBSan) into build-fuzz/, assembles
# their seed corpora from the test fixtures, and runs each target in turn:
#   scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]   default 60 s, all six; 0 = build only
# Crashes land in build-fuzz/crashes/; the growing corpora in build-fuzz/corpus/. Not part of CI
# (the normal build needs no clang); results are recorded in docs/hostile-input.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
missing=()
for p in clang libclang-rt-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-fuzz -j"$(nproc)"
rm -rf build-fuzz/seeds
python3 fuzz/make_seeds.py build-fuzz/seeds

seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors_header config_reader tokenizer_json jinja_template openai_request
  image_decode)
[ "$seconds" -eq 0 ] && exit 0
mkdir -p build-fuzz/crashes
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "== fuzz_$t for ${seconds}s"
  # One process, one job: the machine is shared. -timeout: a single input running longer than
  # this is a finding (a render limit that does not hold).
  /usr/bin/time -f "fuzz_$t: %U s user, %S s system, %M KiB max RSS" \
    "build-fuzz/fuzz_$t" "build-fuzz/corpus/$t" "build-fuzz/seeds/$t" \
    -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -max_len=65536 \
    -artifact_prefix="build-fuzz/crashes/$t-" -print_final_stats=1
done
