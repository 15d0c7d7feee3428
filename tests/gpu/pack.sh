#!/usr/bin/env bash
# pack.sh BUILD KIT TESTS... -- the GPU machine's kit, made here by `make gpu-carry`: that machine
# has the CUDA toolkit, NVIDIA's libraries (in PyTorch's wheels too) and python3 with torch, but
# none of our Debian libraries. KIT/kit.tar.xz holds:
#   bin/        ddpdbg-train and ddpdbg of BUILD (a CUDA=1 build), debug info stripped
#   tests/      the test binaries named TESTS (test_NAME), stripped likewise
#   lib/        every shared library they load that is neither glibc's nor NVIDIA's, and
#               OpenBLAS (loaded at run time by kernels/cpu/blas.c) with its own
#   lib/probe/  libddpdbg_probe.so (the attach's probe, loaded into python) and the libraries it
#               loads that are not glibc's (SQLite): found beside it ($ORIGIN), so python
#               itself needs no LD_LIBRARY_PATH
#   lib/cxx/    libstdc++ and libgcc_s, for a machine whose own are older than ours (check.sh
#               adds them only then: a newer system one must win, python's torch needs it)
# xz because OpenBLAS alone is 36 MB and the device tool carries 64 MiB in all.
# tests/gpu/check.sh unpacks it and sets LD_LIBRARY_PATH for our binaries only.
set -euo pipefail
build=$1 kit=$2; shift 2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/tests" "$stage/lib/cxx" "$stage/lib/probe"
for b in ddpdbg-train ddpdbg; do
    [ -x "$build/bin/$b" ] || { echo "pack.sh: $build/bin/$b is missing (make CUDA=1)" >&2; exit 1; }
    strip --strip-debug -o "$stage/bin/$b" "$build/bin/$b"
done
for t in "$@"; do
    [ -x "$build/tests/test_$t" ] || { echo "pack.sh: $build/tests/test_$t is missing" >&2; exit 1; }
    strip --strip-debug -o "$stage/tests/test_$t" "$build/tests/test_$t"
done

probe_so=$build/lib/libddpdbg_probe.so
[ -f "$probe_so" ] || { echo "pack.sh: $probe_so is missing (make CUDA=1)" >&2; exit 1; }
cp "$probe_so" "$stage/lib/probe/"
ldd "$probe_so" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ ^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt)\.so ]] || cp -L "$path" "$stage/lib/probe/$name"
done
openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0
[ -e "$openblas" ] || openblas=$(ldconfig -p | awk '/libopenblas.so.0 /{print $NF; exit}')
[ -e "$openblas" ] || { echo "pack.sh: no libopenblas.so.0 (make deps)" >&2; exit 1; }

# glibc and the loader are the system's; NVIDIA's come from that machine's toolkit or wheels.
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv)\.so'
nvidia='^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libcupti|libnvidia)'
ldd "$stage"/bin/* "$stage"/tests/* "$openblas" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    sort -u | while read -r name path; do
        [[ $name =~ $system || $name =~ $nvidia ]] && continue
        case $name in
        libstdc++.so.*|libgcc_s.so.*) cp -L "$path" "$stage/lib/cxx/$name";;
        *) cp -L "$path" "$stage/lib/$name";;
        esac
    done
cp -L "$openblas" "$stage/lib/libopenblas.so.0"

mkdir -p "$kit"
tar -C "$stage" -cf - bin tests lib | xz -T2 -6 >"$kit/kit.tar.xz.part"
mv "$kit/kit.tar.xz.part" "$kit/kit.tar.xz"
git rev-parse HEAD >"$kit/revision" 2>/dev/null || echo unknown >"$kit/revision"
echo "pack.sh: $kit/kit.tar.xz: $(du -h "$kit/kit.tar.xz" | cut -f1)" \
    "($(find "$stage/lib" -name '*.so*' | wc -l) libraries, $# tests)"
