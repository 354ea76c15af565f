#!/usr/bin/env bash
# Long fuzzing runs on a machine with many cores (the GPU machine's 16), which cannot build them:
#   scripts/fuzz-farm.sh pack                 here, after scripts/fuzz.sh 0: fuzz-pack.tar.xz with
#                                             the five targets, their seeds, the corpora grown so
#                                             far and the two shared libraries they need
#   scripts/fuzz-farm.sh run SECONDS FORKS    there: every target at once, each as libFuzzer's
#                                             -fork=FORKS for SECONDS, into $OUT: per-target log
#                                             with the final stats line and the CPU time
#                                             (user + sys of the target and its forks), the
#                                             grown corpora and any crash (fuzz-results.tgz)
#   scripts/fuzz-farm.sh unpack DIR           here: the corpora of a run's fuzz-results.tgz in
#                                             DIR merged into build-fuzz/corpus, crashes listed
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(safetensors_header config_reader tokenizer_json jinja_template openai_request)
case "${1:?usage: fuzz-farm.sh pack | run SECONDS FORKS | unpack DIR}" in
  pack)
    rm -rf fuzz-pack && mkdir -p fuzz-pack/bin fuzz-pack/lib
    for t in "${targets[@]}"; do cp "build-fuzz/fuzz_$t" fuzz-pack/bin/; done
    strip --strip-debug fuzz-pack/bin/*  # the carried tree is size-limited
    for lib in $(ldd fuzz-pack/bin/* | awk '/pcre2|utf8proc/ {print $3}' | sort -u); do
      cp -L "$lib" fuzz-pack/lib/
    done
    cp -r build-fuzz/seeds fuzz-pack/seeds
    mkdir -p build-fuzz/corpus && cp -r build-fuzz/corpus fuzz-pack/corpus
    XZ_OPT=-9 tar cJf fuzz-pack.tar.xz fuzz-pack && rm -rf fuzz-pack
    ls -l fuzz-pack.tar.xz ;;
  run)
    seconds="${2:?SECONDS}" forks="${3:?FORKS}" out="${OUT:?set OUT}"
    tar xJf fuzz-pack.tar.xz
    export LD_LIBRARY_PATH=$PWD/fuzz-pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    mkdir -p "$out/fuzz/crashes"
    for t in "${targets[@]}"; do
      mkdir -p "fuzz-pack/corpus/$t"
      (
        TIMEFORMAT="fuzz_$t: %U s user, %S s system, %R s wall"
        time "fuzz-pack/bin/fuzz_$t" -fork="$forks" "fuzz-pack/corpus/$t" "fuzz-pack/seeds/$t" \
          -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -max_len=65536 \
          -artifact_prefix="$out/fuzz/crashes/$t-" -print_final_stats=1
      ) >"$out/fuzz/$t.log" 2>&1 &
    done
    wait || true
    for t in "${targets[@]}"; do
      echo "== fuzz_$t"
      grep -E "^#[0-9]+" "$out/fuzz/$t.log" | tail -1
      grep -E "^fuzz_$t:|ERROR|SUMMARY|crash-|timeout-" "$out/fuzz/$t.log" | head -5
    done
    echo "crash artifacts: $(ls "$out/fuzz/crashes" | wc -l)"
    tar czf "$out/fuzz-results.tgz" -C fuzz-pack corpus -C "$out" fuzz ;;
  unpack)
    dir="${2:?DIR}"
    tmp="$(mktemp -d)" && tar xzf "$dir/fuzz-results.tgz" -C "$tmp"
    mkdir -p build-fuzz/corpus
    cp -rn "$tmp"/corpus/. build-fuzz/corpus/
    ls "$tmp/fuzz/crashes" ;;
esac
