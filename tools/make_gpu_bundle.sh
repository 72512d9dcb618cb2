#!/usr/bin/env bash
# Collects what tools/gpu_session.sh runs on the GPU machine into .device/bundle: the binaries of
# a CUDA build directory and the Debian shared libraries they load that an Ubuntu machine with the
# CUDA toolkit lacks.
#   tools/make_gpu_bundle.sh BUILD_DIR [BINARY...]
# BINARY names binaries of BUILD_DIR (ferry, tests/ops_cuda_parity_gpu_test,
# bench/ferry_kernel_bench, ...) to bundle instead of the default set (ferry, the benches and
# every GPU test: ~100 MB, ~35 MB packed, of the device's 64 MiB carry): one kernel bench with
# its libraries is ~7 MB, ~2.5 MB packed.
set -euo pipefail
build="$1"
shift
out=.device/bundle
rm -rf "$out"
mkdir -p "$out/lib"
if [ $# -gt 0 ]; then
  for f in "$@"; do
    [ -f "$build/$f" ] || { echo "make_gpu_bundle: $build/$f does not exist (build it first)" >&2; exit 1; }
  done
  binaries=("$@")
else
  binaries=(ferry bench/ferry_kernel_bench bench/flash_attention_bench bench/cpu_adamw_bench
            bench/host_dram_contention_bench)
  for f in "$build"/tests/*_gpu_test; do binaries+=("${f#"$build"/}"); done
fi
for f in "${binaries[@]}"; do
  [ -f "$build/$f" ] && cp "$build/$f" "$out/" && strip "$out/$(basename "$f")"
done
for lib in $(ldd "$out"/* 2>/dev/null | awk '/=> \/(usr\/)?lib\/x86_64-linux-gnu/ {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl*|librt*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
