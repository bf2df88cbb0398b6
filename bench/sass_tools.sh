#!/usr/bin/env bash
# Print the folder that holds cuobjdump and nvdisasm (the SASS of a cubin,
# no GPU needed), getting them first if they are missing:
#   1. PATH, then the CUDA Toolkit's bin folders;
#   2. build/tools/cu13/bin, from an earlier run;
#   3. the PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm
#      (SASS_TOOLS_VERSION, default 13.5.37: ~6 MB), downloaded with pip and
#      unpacked into build/tools/cu13/bin.
# Exit status 1, with the reason on stderr, when none of these works.
#   PATH="$(bash bench/sass_tools.sh):$PATH"; cuobjdump -sass x.cubin
set -eu
cd "$(dirname "$0")/.."
version=${SASS_TOOLS_VERSION:-13.5.37}
have() { [ -x "$1/cuobjdump" ] && [ -x "$1/nvdisasm" ]; }

if command -v cuobjdump >/dev/null 2>&1 && command -v nvdisasm >/dev/null 2>&1; then
    dirname "$(command -v cuobjdump)"; exit 0
fi
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin build/tools/cu13/bin; do
    if have "$d"; then (cd "$d" && pwd); exit 0; fi
done
command -v python3 >/dev/null 2>&1 || { echo "sass_tools: cuobjdump/nvdisasm not found and no python3 to fetch them" >&2; exit 1; }
dl=build/tools/download
mkdir -p "$dl" build/tools/cu13/bin
echo "sass_tools: cuobjdump/nvdisasm not found; fetching the PyPI wheels (version $version)" >&2
if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$dl" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        "nvidia-cuda-cuobjdump==$version" "nvidia-cuda-nvdisasm==$version" >&2; then
    echo "sass_tools: pip could not download nvidia-cuda-cuobjdump/nvidia-cuda-nvdisasm==$version" >&2
    echo "            (no network? install the CUDA Toolkit's cuobjdump and nvdisasm instead)" >&2
    exit 1
fi
python3 - "$dl" build/tools/cu13/bin <<'PY'
import glob, os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
for tool in ("cuobjdump", "nvdisasm"):
    wheels = sorted(glob.glob(os.path.join(src, f"nvidia_cuda_{tool}-*.whl")))
    if not wheels:
        sys.exit(f"sass_tools: no {tool} wheel in {src}")
    with zipfile.ZipFile(wheels[-1]) as z:
        member = [n for n in z.namelist() if n.endswith("/bin/" + tool)]
        if not member:
            sys.exit(f"sass_tools: {wheels[-1]} has no bin/{tool}")
        with z.open(member[0]) as f, open(os.path.join(dst, tool), "wb") as g:
            g.write(f.read())
    os.chmod(os.path.join(dst, tool), 0o755)
PY
have build/tools/cu13/bin || { echo "sass_tools: unpacking the wheels failed" >&2; exit 1; }
(cd build/tools/cu13/bin && pwd)
