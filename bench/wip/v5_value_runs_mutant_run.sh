#!/bin/sh
# /tmp/c8mut/run.sh NAME OLD NEW : a planted bug in kvq_cuda.cu must fail test_gpu's mma group
cd /work/main
name=$1; dir=build/c8/mut/$name; mkdir -p $dir
OLD=$2 NEW=$3 python3 - kvq_cuda.cu $dir/kvq_cuda.cu <<'PY' || exit 1
import os, sys
src = open(sys.argv[1]).read(); old, new = os.environ["OLD"], os.environ["NEW"]
n = src.count(old)
if n != 1: sys.exit("occurs %d times: %r" % (n, old))
open(sys.argv[2], "w").write(src.replace(old, new))
PY
g++ -std=c++17 -g -Wno-unknown-pragmas -fno-strict-aliasing -Itests/emu -I. -Itests -O1 -x c++ -c $dir/kvq_cuda.cu -o $dir/kvq_cuda.o 2>$dir/build.log &&
g++ -o $dir/test_gpu build/c8/emu/test_gpu.o $dir/kvq_cuda.o build/c8/emu/kvq_emu.o -lm 2>>$dir/build.log || { echo "$name: build failed"; tail -5 $dir/build.log; exit 1; }
KVQ_TEST_QUICK=1 KVQ_TEST_ONLY=mma $dir/test_gpu --kernels > $dir/run.log 2>&1; rc=$?
if [ $rc -eq 0 ]; then echo "NOT CAUGHT $name"; else echo "caught $name: $(grep -m1 FAIL $dir/run.log | cut -c1-200) ($(grep -c FAIL $dir/run.log) FAILs)"; fi
