#!/usr/bin/env bash
# Collects what tools/gpu_session.sh runs on the GPU machine into .device/bundle: the binaries of
# a CUDA build directory and the Debian shared libraries they load that an Ubuntu machine with the
# CUDA toolkit lacks.   tools/make_gpu_bundle.sh BUILD_DIR
set -euo pipefail
build="$1"
out=.device/bundle
rm -rf "$out"
mkdir -p "$out/lib"
for f in ferry "$build"/tests/*_gpu_test bench/ferry_kernel_bench bench/flash_attention_bench bench/cpu_adamw_bench bench/host_dram_contention_bench; do
  f="${f#"$build"/}"
  [ -f "$build/$f" ] && cp "$build/$f" "$out/" && strip "$out/$(basename "$f")"
done
for lib in $(ldd "$out"/* 2>/dev/null | awk '/=> \/(usr\/)?lib\/x86_64-linux-gnu/ {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl*|librt*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
