#!/usr/bin/env python3
"""Compile-time gates of kvq_cuda.cu (make cuda-gates; no GPU needed).

1. RESOURCES, from `ptxas -v`, for every kernel instantiation and each
   architecture given (sm_80 and sm_90 in make cuda-gates): registers per
   thread, spill stores / loads, stack frame, static shared memory, and the
   CTAs per SM that the registers allow. The attention kernels are gated,
   and a failure fails the build (exit 1):
     kvq_attend_kernel<D, B, NH>, kvq_attend_mma_kernel<D, B, NQ, HILO>:
       no spill store or load, no stack frame, and registers <= the limit.
   The limit is the most registers at which MIN_CTAS CTAs fit on one SM
   (65,536 registers, allocated per warp in units of 256; 255 at most):
     kvq_attend_kernel   MIN_CTAS from its __launch_bounds__:
                         KVQ_CUDA_NH1_MIN_CTAS (NH = 1) and
                         KVQ_CUDA_NH4_MIN_CTAS (NH = 4), read from
                         kvq_cuda.cu. ptxas never exceeds that bound (it
                         spills instead), so there the spill gate is the
                         one that can fail.
     kvq_attend_mma_kernel  KVQ_MMA_MIN_CTAS if kvq_cuda.cu defines it,
                         else 3: its __launch_bounds__ names no minimum, so
                         ptxas would take up to 255. Three CTAs of 4 warps
                         (12 warps per SM) at <= 168 registers: each warp
                         has one 32-token chunk in flight (2 KB of codes at
                         2-bit, D = 128), and the copy rate times a loaded
                         DRAM latency (~3 TB/s x ~0.7 us = ~2 MB over 132
                         SMs, ~16 KB per SM) needs at least 8 such warps;
                         12 leaves a margin. Today's NH = 1 kernel is built
                         for the same 3 CTAs. Its OCC5 instantiations
                         (OPT & 2, kvq_cuda_attend_mma's KVQ_CUDA_MMA_OCC5)
                         with NQ = 1 are built for KVQ_MMA_OCC_MIN_CTAS
                         = 5: <= 96 (NQ = 2 keeps KVQ_MMA_MIN_CTAS).
   Every other kernel is listed (spills and stack shown) but not gated.

2. SASS INSTRUCTIONS PER KB OF CODES of the tensor-core path (sm_90), a
   design target printed as PASS/FAIL that never fails the build. The
   SASS (nvdisasm -gi of a -lineinfo build: the same code, with each
   instruction's source line and inlining) of each
   kvq_attend_mma_kernel<128, B, NQ, HILO[, STAGES]> is cut into basic
   blocks; loops are the natural loops of its back edges (a branch to a
   block that dominates it). The chunk loop is the innermost loop with
   MMAs (HMMA, or IMMA for the integer decode). Counts are along paths from its header to its back edge, loops
   inside it (a copy loop) counted as one trip:
     chunk   the shortest such path that skips the page work and passes
             a staging copy of the next chunk (LDGSTS) where there are any
             (every optional branch skipped: no dead slot, one value group,
             Gv = D, the running max unchanged so the softmax's rescale is
             skipped (the kernel rescales only when a head's max moves);
             a copy loop of run-time length, the value scales', may be
             skipped: ~15 instructions), plus (D/Gv - 1) value-group
             setups: the chunk body's D/16 - 1 largest optional regions
             (the rare mid-run flushes inside them, kvq_mma_value_flush's
             blocks outside the page work, left out),
             of about one size (checked: within 15%, and 1.5x the next
             region; else G = 32 is printed as a range)
     page    the work done once per page: the page loop's own instructions
             when a page loop encloses the chunk loop; else the extra cost
             of the path through the blocks that hold kvq_mma_page_keys'
             instructions (the key weights, exponents, zero terms) and
             that a trip can skip (one that stages a chunk, LDGSTS, where
             the kernel stages: the last chunks' trips, which stage
             nothing, skip the whole copy), and those of
             kvq_mma_page_sources (the
             staging's source pointers set from the page number, in the
             page's first chunk's copy: the next page's, a stage ahead),
             and, where the kernel keeps the values'
             integer C over a run of chunks (kvq_cuda.cu's kvq_mma_valc),
             through a run's first chunk and its end too: the first
             chunk's copy of the chunk body, found by its value MMAs on a
             fresh C (IMMA .U8.U8 with RZ as C, where other .U8.U8 IMMAs
             of the loop add into a register C: the compiler merges the
             two copies' line info, so the source lines cannot tell them
             apart), and kvq_mma_run_end's blocks (C into fp32 once a
             run). Those blocks are page work: the chunk path avoids
             them, so it runs the copy that adds into the run's C. A run
             is a page's chunks (G <= 128: at most 4); the mid-run
             flushes (the running max moved, a larger value scale) are
             optional branches the chunk path skips. The blocks found
             for each are printed for the default variant, so a rename
             cannot hide work silently.
   per KB = (page + G/32 x chunk) / (KB of key + value codes per page),
   for G 32 and 128 with Gv = G (KIVI's groups), B 2 and 4, GQA 1/4/8
   (NQ = 1 quad of heads up to GQA 4, NQ = 2 above, as
   kvq_cuda_attend_mma picks; its default kernel is OPT = PF, and PF |
   RUNS with NQ = 1 at G >= 64: default_opt), with its share of an
   H100's issue slots at copy rate: 132 SMs x 4 schedulers x 1.75 GHz
   over (2997 GB/s / 1 KB) = ~316 slots per KB (walkthrough 9.9). Branches to the divergent-warp
   fallback (BRA.DIV) are not followed: the kernel's shuffles run with
   the whole warp converged. Without the kernel, the same is printed for
   bench/mma_probe.cu's mma_step_count (the probe: no page loop, so no
   per-page work). The CUDA-core step (bench/sass_probe.cu) is printed
   beside it, per KB, for routing G = 32.

Usage:
  cuda_gates.py [--ptxas ARCH=LOG]... [--sass KVQ_SM90.sass]
                [--probe MMA_PROBE.sass] [--cuda-core SASS_PROBE.sass]
                [--source kvq_cuda.cu] [--known KNOWN.txt]
Exit status: 0 all resource gates pass, 1 a gate failed, 2 bad input."""
import collections
import os
import re
import subprocess
import sys

REGS_PER_SM, REG_UNIT, MAX_REGS = 65536, 256, 255
SMS, SCHEDULERS, CLOCK_GHZ, COPY_GBPS = 132, 4, 1.75, 2997.0
SLOTS_PER_KB = SMS * SCHEDULERS * CLOCK_GHZ * 1e9 / (COPY_GBPS * 1e9 / 1024)
TARGET_PER_KB = 250                       # issue 27: 2-bit, G = 128, with page work
MMA_DEFAULT_MIN_CTAS = 3
CHUNK_TOKENS = 32


def die(msg, code=2):
    print(f"cuda_gates: {msg}", file=sys.stderr)
    sys.exit(code)


def demangle_all(names):
    """Demangled names, one c++filt call for all (the name itself if c++filt fails)."""
    names = list(names)
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.split("\n")
        return dict(zip(names, out[:len(names)]))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def template_args(name, kernel):
    m = re.search(re.escape(kernel) + r"<([^>]*)>", name)
    return tuple(int(x) for x in m.group(1).split(",")) if m else None


# ---------------------------------------------------------------- resources
def parse_ptxas(path):
    """[{mangled, regs, smem, spill_st, spill_ld, stack}] of every entry function."""
    rows, cur, props_for = [], None, None
    try:
        lines = open(path).read().split("\n")
    except OSError as e:
        die(f"cannot read ptxas log {path}: {e}")
    for line in lines:
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = {"mangled": m.group(1), "regs": None, "smem": 0, "spill_st": 0,
                   "spill_ld": 0, "stack": 0, "callee_stack": 0}
            rows.append(cur)
            props_for = None
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props_for = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur is not None:
            st, ss, sl = (int(x) for x in m.groups())
            if props_for == cur["mangled"]:
                cur["stack"], cur["spill_st"], cur["spill_ld"] = st, ss, sl
            else:                          # a device function it calls
                cur["callee_stack"] = max(cur["callee_stack"], st)
                cur["spill_st"] += ss
                cur["spill_ld"] += sl
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur is not None:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
    rows = [r for r in rows if r["regs"] is not None]
    if not rows:
        die(f"{path}: no 'Used N registers' lines (was it compiled with -Xptxas -v?)")
    return rows


def ctas_by_regs(regs, threads):
    per_warp = -(-32 * max(regs, 1) // REG_UNIT) * REG_UNIT
    return REGS_PER_SM // ((threads // 32) * per_warp)


def reg_limit(min_ctas, threads):
    """Most registers per thread (a multiple of 8) at which min_ctas CTAs fit."""
    r = MAX_REGS
    while r > 0 and ctas_by_regs(r, threads) < min_ctas:
        r -= 1
    return r


def source_defines(path):
    defs = {}
    if path and os.path.exists(path):
        for m in re.finditer(r"^#define\s+(KVQ_\w+)\s+(\d+)\b", open(path).read(), re.M):
            defs[m.group(1)] = int(m.group(2))
    return defs


def read_known(path):
    """{(arch, kernel): (spill_st, spill_ld, stack, reason)} from the list of
    known resource failures (bench/cuda_gates_known.txt): lines
    'ARCH | KERNEL | SPILL_ST SPILL_LD STACK | why', '#' comments."""
    known = {}
    if not path or not os.path.exists(path):
        return known
    for n, line in enumerate(open(path), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        f = [x.strip() for x in line.split("|")]
        try:
            st, ld, stack = (int(x) for x in f[2].split())
            known[(f[0], f[1])] = (st, ld, stack, f[3] if len(f) > 3 else "")
        except (IndexError, ValueError):
            die(f"{path}:{n}: use 'ARCH | KERNEL | SPILL_ST SPILL_LD STACK | why'")
    return known


def resource_gates(ptxas_args, defs, known):
    warps_attend = defs.get("KVQ_CUDA_WARPS", 4)
    warps_mma = defs.get("KVQ_MMA_WARPS", 4)
    nh1 = defs.get("KVQ_CUDA_NH1_MIN_CTAS")
    nh4 = defs.get("KVQ_CUDA_NH4_MIN_CTAS")
    mma_ctas = defs.get("KVQ_MMA_MIN_CTAS", MMA_DEFAULT_MIN_CTAS)
    mma_src = "KVQ_MMA_MIN_CTAS" if "KVQ_MMA_MIN_CTAS" in defs else "this gate's floor"
    if nh1 is None or nh4 is None:
        die("kvq_cuda.cu defines no KVQ_CUDA_NH1_MIN_CTAS / KVQ_CUDA_NH4_MIN_CTAS "
            "(the attention kernel's __launch_bounds__): update bench/cuda_gates.py")
    print("== ptxas resources per kernel (registers, spills, stack); gated: the attention kernels ==")
    print(f"limits: kvq_attend_kernel NH=1 {nh1} CTAs/SM (KVQ_CUDA_NH1_MIN_CTAS) -> "
          f"<= {reg_limit(nh1, 32 * warps_attend)} registers; NH=4 {nh4} (KVQ_CUDA_NH4_MIN_CTAS) -> "
          f"<= {reg_limit(nh4, 32 * warps_attend)}; kvq_attend_mma_kernel {mma_ctas} ({mma_src}) -> "
          f"<= {reg_limit(mma_ctas, 32 * warps_mma)}; no spill, no stack frame")
    failures, seen, allowed, fixed, mma_static = [], {}, [], [], {}
    for spec in ptxas_args:
        if "=" not in spec:
            die(f"--ptxas {spec}: use ARCH=LOG (e.g. sm_90=build/gates/ptxas.sm_90.log)")
        arch, path = spec.split("=", 1)
        rows = parse_ptxas(path)
        names = demangle_all(r["mangled"] for r in rows)
        print(f"\n{arch} ({path})")
        print(f"{'kernel':44s} {'regs':>4s} {'limit':>5s} {'CTAs/SM':>7s} {'smem':>6s} "
              f"{'spill st/ld':>11s} {'stack':>5s}  gate")
        for r in sorted(rows, key=lambda r: names[r["mangled"]]):
            name = names[r["mangled"]].split("(")[0].replace("void ", "")
            limit, threads = None, 128
            a = template_args(name, "kvq_attend_mma_kernel")
            if a:                       # <D, B, NQ, HILO, STAGES, DEC, OPT>: OPT & 2 = OCC5
                occ5 = len(a) >= 7 and a[6] & OPT_OCC5 and a[2] == 1   # NQ = 1 only
                threads = 32 * warps_mma
                limit = reg_limit(defs.get("KVQ_MMA_OCC_MIN_CTAS", 5) if occ5 else mma_ctas, threads)
            else:
                a = template_args(name, "kvq_attend_kernel")
                if a:
                    threads = 32 * warps_attend
                    limit = reg_limit(nh1 if a[2] == 1 else nh4, threads)
            stack = r["stack"] + r["callee_stack"]
            why = []
            if limit is not None:
                if r["spill_st"] or r["spill_ld"]:
                    why.append("spills")
                if stack:
                    why.append("stack frame")
                if r["regs"] > limit:
                    why.append(f"{r['regs']} > {limit} registers")
            k = known.pop((arch, name), None)
            if why and k and r["regs"] <= limit and r["spill_st"] <= k[0] and \
                    r["spill_ld"] <= k[1] and stack <= k[2]:
                gate = "KNOWN: " + ", ".join(why)
                allowed.append(f"{arch} {name}: {', '.join(why)} ({k[3]})")
            else:
                gate = "-" if limit is None else ("FAIL: " + ", ".join(why) if why else "ok")
                if why:
                    failures.append(f"{arch} {name}: {', '.join(why)}"
                                    + (" (worse than its known entry)" if k else ""))
                elif k:
                    fixed.append(f"{arch} {name}")
            ctas = ctas_by_regs(r["regs"], threads) if limit is not None else ""
            print(f"{name:44s} {r['regs']:4d} {'' if limit is None else limit:>5} {ctas:>7} "
                  f"{r['smem']:6d} {r['spill_st']:>5d}/{r['spill_ld']:<5d} {stack:5d}  {gate}")
            seen.setdefault(arch, set()).add(name)
            a = template_args(name, "kvq_attend_mma_kernel")
            if a and a[0] == 128 and len(a) >= 5:
                # <D, B, NQ, HILO, STAGES, DEC, OPT>: OPT & 1 stages the key (s, z)
                key = (arch, a[2], a[4], bool(len(a) >= 7 and a[6] & OPT_PF))
                mma_static[key] = max(mma_static.get(key, 0), r["smem"])
    archs = list(seen)
    for arch in archs:
        if not any(n.startswith("kvq_attend_kernel<") for n in seen[arch]):
            failures.append(f"{arch}: no kvq_attend_kernel instantiation in the log")
    if len(archs) > 1 and any(seen[a] != seen[archs[0]] for a in archs):
        failures.append("the architectures compiled different kernel sets")
    if allowed:
        print(f"\n{len(allowed)} known failure(s), allowed by the list of known resource failures "
              "(bench/cuda_gates_known.txt) while they do not grow:")
        for a in allowed:
            print(f"  KNOWN {a}")
    for f in fixed:
        print(f"  fixed: {f} passes now; remove its line from bench/cuda_gates_known.txt")
    for (arch, name) in known:
        print(f"  note: bench/cuda_gates_known.txt lists {arch} {name}, which was not compiled")
    staging_table(defs, mma_static)
    return failures


DEFAULT_STAGES = 2                      # kvq_cuda_attend_mma's variant 0
OPT_PF, OPT_OCC5, OPT_RUNS = 1, 2, 4    # kvq_cuda.cu's KVQ_MMA_OPT_PF, _OCC5, _RUNS


def default_opt(G, nq):
    """variant 0's OPT at page size G: the page parameters staged a page
    ahead, and with NQ = 1 and G >= 64 the values' C kept over runs of
    chunks (kvq_cuda__plan_mma; at G = 32 a run would be one chunk)"""
    return OPT_PF | (OPT_RUNS if nq == 1 and G >= 64 else 0)


def staging_table(defs, mma_static):
    """Shared memory per CTA of kvq_attend_mma_kernel by heads (4 NQ) and
    stage count: the static part (ptxas, the most over its instantiations
    of that NQ, count and architecture) plus the dynamic staging kvq_cuda__plan_mma asks for,
    KVQ_MMA_WARPS x STAGES x chunk bytes, a chunk being 32 tokens' key and
    value words and value (s, z) pairs (4 bytes each), and with the
    prefetch (OPT & 1) the page's D key (s, z) pairs; at least the warps'
    accumulators (4 warps x 4 NQ heads x D floats), which reuse it."""
    if not mma_static:
        return
    warps, chunk = defs.get("KVQ_MMA_WARPS", 4), defs.get("KVQ_MMA_CHUNK", 32)
    print(f"\nkvq_attend_mma_kernel shared memory per CTA, D = 128: static (ptxas) + staging "
          f"({warps} warps x STAGES x chunk bytes); KB")
    cases = [(b, gv) for b in (2, 4) for gv in (128, 32)]
    print(f"{'arch':6s} {'heads':>5s} {'stages':>6s} {'pf':>3s} {'static':>7s} " +
          " ".join(f"{f'B={b} Gv={gv}':>12s}" for b, gv in cases))
    for (arch, nq, stages, pf), static in sorted(mma_static.items()):
        row = []
        for b, gv in cases:
            chunk_bytes = (2 * 32 * (128 * b // 64) * 4 + 32 * (128 // 16) * (2 if b == 4 else 1) * 4
                           + chunk * (128 // gv) * 4 + (128 * 4 if pf else 0))
            red = warps * 4 * nq * 128 * 4          # the warps' sums reuse the stages
            row.append((static + max(red, 0 if stages == 1 else warps * stages * chunk_bytes)) / 1024)
        print(f"{arch:6s} {4 * nq:>5} {stages:>6} {'yes' if pf else 'no':>3} {static / 1024:7.1f} " +
              " ".join(f"{x:12.1f}" for x in row))


# --------------------------------------------------------------------- SASS
Instr = collections.namedtuple("Instr", "addr text op pred target lines")


def parse_sass(path):
    """{mangled name: [Instr]} from `cuobjdump -sass` or `nvdisasm [-gi]`
    output. Instr.target: a branch's target address (None otherwise);
    Instr.lines: the ((file, line), ...) inlining chain nvdisasm -gi prints
    before it (innermost first; empty without line info)."""
    try:
        text = open(path).read()
    except OSError as e:
        die(f"cannot read SASS {path}: {e}")
    raw, labels, cur, lab, chain, lines_now, pending = {}, {}, None, None, [], (), []
    for line in text.split("\n"):
        m = re.search(r"Function : (\S+)", line) or re.match(r"^\.text\.(\S+):\s*$", line)
        if m:
            cur = raw.setdefault(m.group(1), [])
            lab = labels.setdefault(m.group(1), {})
            chain, lines_now, pending = [], (), []
            continue
        if cur is None:
            continue
        m = re.match(r"^(\.L\w+|\w+):\s*$", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)( inlined at)?', line)
        if m:                                      # innermost first, outermost last
            chain.append((os.path.basename(m.group(1)), int(m.group(2))))
            if not m.group(3):
                lines_now, chain = tuple(chain), []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            addr = int(m.group(1), 16)
            for lb in pending:
                lab[lb] = addr
            pending = []
            t = m.group(2).strip()
            pred = None
            if t.startswith("@"):
                pred, t = t.split(None, 1)
            cur.append((addr, t, pred, lines_now))
    funcs = {}
    for name, code in raw.items():
        out = []
        for addr, t, pred, lines in code:
            op = t.split()[0]
            target = None
            if op.split(".")[0] in ("BRA", "CALL"):
                m = re.search(r"`\(([^)]+)\)", t)
                if m:
                    target = labels[name].get(m.group(1))
                else:
                    m = re.search(r"(0x[0-9a-f]+)\s*$", t)
                    target = int(m.group(1), 16) if m else None
            out.append(Instr(addr, t, op, pred, target, lines))
        funcs[name] = out
    if not funcs:
        die(f"{path}: no function in it (not cuobjdump -sass or nvdisasm output?)")
    return funcs


def always(pred):
    return pred is None or pred in ("@PT", "@UPT")


def never(pred):
    return pred in ("@!PT", "@!UPT")


class CFG:
    """Basic blocks, dominators and natural loops of one function. Branches
    to the divergent-warp fallback (BRA.DIV) and calls are not followed."""

    def __init__(self, code):
        self.code = code
        index = {ins.addr: i for i, ins in enumerate(code)}
        leaders, targets = {0}, {}
        for i, ins in enumerate(code):
            base = ins.op.split(".")[0]
            if base in ("BRX", "JMX", "JMP"):
                raise ValueError(f"indirect branch {ins.text} at {ins.addr:#x}")
            if base == "BRA" and ".DIV" not in ins.op and not never(ins.pred):
                if ins.target not in index:
                    raise ValueError(f"branch {ins.text} at {ins.addr:#x}: target not found")
                targets[i] = index[ins.target]
                leaders.add(index[ins.target])
                leaders.add(i + 1)
            elif base in ("EXIT", "RET", "BPT"):
                leaders.add(i + 1)
        starts = sorted(x for x in leaders if x < len(code))
        self.blocks = []                  # (first, last) instruction indices
        block_of = {}
        for k, s in enumerate(starts):
            e = (starts[k + 1] if k + 1 < len(starts) else len(code)) - 1
            block_of[s] = k
            self.blocks.append((s, e))
        self.succ = [[] for _ in self.blocks]
        for k, (s, e) in enumerate(self.blocks):
            last = code[e]
            base = last.op.split(".")[0]
            falls = True
            if e in targets:
                self.succ[k].append(block_of[targets[e]])
                falls = not always(last.pred)
            elif base in ("EXIT", "RET", "BPT") and always(last.pred):
                falls = False
            if falls and e + 1 < len(code):
                self.succ[k].append(block_of[e + 1])
        self.cost = [e - s + 1 for s, e in self.blocks]
        seen, stack = {0}, [0]            # reachable from the entry
        while stack:
            for v in self.succ[stack.pop()]:
                if v not in seen:
                    seen.add(v)
                    stack.append(v)
        self.nodes = seen
        self.pred = {v: [u for u in seen if v in self.succ[u]] for v in seen}
        dom = {v: set(seen) for v in seen}
        dom[0] = {0}
        changed = True
        while changed:
            changed = False
            for v in sorted(seen):
                if v == 0:
                    continue
                ps = [dom[u] for u in self.pred[v]]
                new = set.intersection(*ps) | {v} if ps else {v}
                if new != dom[v]:
                    dom[v], changed = new, True
        loops = {}                        # header -> (body, latches)
        for u in seen:
            for h in self.succ[u]:
                if h in dom[u]:           # back edge u -> h
                    body, latches = loops.setdefault(h, ({h}, set()))
                    latches.add(u)
                    stack = [u]
                    while stack:
                        x = stack.pop()
                        if x not in body:
                            body.add(x)
                            stack.extend(self.pred[x])
        self.loops = [(h, frozenset(b), frozenset(l)) for h, (b, l) in loops.items()]

    def ops(self, nodes):
        return [self.code[i].op for v in nodes for i in range(self.blocks[v][0], self.blocks[v][1] + 1)]

    def blocks_where(self, nodes, test):
        return {v for v in nodes if any(test(self.code[i]) for i in range(self.blocks[v][0], self.blocks[v][1] + 1))}

    def optional(self, loop, blocks, through=frozenset()):
        """The blocks of `blocks` that some trip around `loop` (header to a
        latch) can avoid; with `through`, some trip that passes one of
        its blocks (a block every such trip runs is no branch of its own,
        even where a trip without them skips it)."""
        h, body, latches = loop
        out = set()
        for b in blocks:
            if b == h:
                continue
            start = (h, not through or h in through)   # (block, passed `through`)
            seen, stack = {start}, [start]
            while stack:
                x, passed = stack.pop()
                for y in self.succ[x]:
                    if y in body and y != b and y != h:
                        s = (y, passed or y in through)
                        if s not in seen:
                            seen.add(s)
                            stack.append(s)
            if any((l, True) in seen for l in latches if l != b):
                out.add(b)
        return out

    def innermost_loops(self):
        """The loops with no loop inside them."""
        return [L for L in self.loops if not any(M[1] < L[1] for M in self.loops)]

    def inner_loops(self, loop):
        """The loops directly inside `loop` (maximal among those strictly inside)."""
        inside = [L for L in self.loops if L[1] < loop[1]]
        return [L for L in inside if not any(L[1] < M[1] for M in inside)]

    def one_trip(self, loop):
        """Instructions of one trip around `loop` (shortest path)."""
        return self.path(loop)[0]

    def path(self, loop, pick=min, avoid=frozenset(), through=(), collapse_cost=None):
        """(instructions, blocks) of the shortest (pick=min) or longest path
        from loop's header to the end of one of its latches, back edges to
        the header removed. Loops inside count as one node: one trip each,
        or collapse_cost[inner header] instructions. avoid: blocks the path
        may not touch; through: sets of blocks the path must touch, each."""
        h, body, latches = loop
        rep, rcost = {}, {}
        for L in self.inner_loops(loop):
            for v in L[1]:
                rep[v] = ("loop", L[0])
            rcost[("loop", L[0])] = (collapse_cost or {}).get(L[0], None)
            if rcost[("loop", L[0])] is None:
                rcost[("loop", L[0])] = self.one_trip(L)
        node = lambda v: rep.get(v, v)
        cost = lambda n: rcost[n] if isinstance(n, tuple) else self.cost[n]
        members = collections.defaultdict(set)
        for v in body:
            members[node(v)].add(v)
        bad = {node(v) for v in avoid}
        succ = collections.defaultdict(set)
        for u in body:
            for v in self.succ[u]:
                if v in body and v != h and node(u) != node(v) and node(u) not in bad and node(v) not in bad:
                    succ[node(u)].add(node(v))
        order, state = [], {}
        start = node(h)
        stack = [(start, iter(sorted(succ[start], key=str)))]
        state[start] = 1
        while stack:                     # depth-first: a topological order
            x, it = stack[-1]
            for y in it:
                if state.get(y) == 1:
                    raise ValueError("a cycle left inside a loop body")
                if y not in state:
                    state[y] = 1
                    stack.append((y, iter(sorted(succ[y], key=str))))
                    break
            else:
                state[x] = 2
                order.append(x)
                stack.pop()
        order.reverse()
        groups = [{node(v) for v in g} for g in through]
        full = (1 << len(groups)) - 1
        mark = lambda n: sum(1 << i for i, g in enumerate(groups) if n in g)
        best, came = {(start, mark(start)): cost(start)}, {}
        better = (lambda a, b: a < b) if pick is min else (lambda a, b: a > b)
        for n in order:
            for mask in range(full + 1):
                if (n, mask) not in best:
                    continue
                for m in succ[n]:
                    key, c = (m, mask | mark(m)), best[(n, mask)] + cost(m)
                    if key not in best or better(c, best[key]):
                        best[key], came[key] = c, (n, mask)
        ends = [(best[(node(l), full)], (node(l), full)) for l in latches
                if node(l) not in bad and (node(l), full) in best]
        if not ends:
            raise ValueError("no path from the loop header to its back edge")
        total, key = pick(ends)
        blocks = []
        while True:
            blocks.extend(sorted(members[key[0]]) if isinstance(key[0], tuple) else [key[0]])
            if key not in came:
                break
            key = came[key]
        return total, blocks

    def optional_regions(self, nodes, header):
        """Sizes of the regions a conditional forward branch can skip: for
        each block with two successors a, b in `nodes` where b is reached
        from a, the shortest path from a to b (excluding b)."""
        import heapq
        sizes = []
        for u in nodes:
            s = [v for v in self.succ[u] if v in nodes and v != header]
            if len(s) != 2:
                continue
            for a, b in (s, s[::-1]):
                dist, heap, found = {a: self.cost[a]}, [(self.cost[a], a)], None
                while heap and found is None:
                    d, x = heapq.heappop(heap)
                    if d > dist.get(x, float("inf")):
                        continue
                    for y in self.succ[x]:
                        if y == b:
                            found = d
                            break
                        if y in nodes and y != header and d + self.cost[y] < dist.get(y, float("inf")):
                            dist[y] = d + self.cost[y]
                            heapq.heappush(heap, (dist[y], y))
                if found is not None:
                    sizes.append(found)
                    break
        return sorted(sizes, reverse=True)


def function_lines(source, name):
    """(first, last) source lines of the definition of `name` (a line with
    `name(` not preceded by template arguments, outside a comment, up to the
    first line that is a lone '}')."""
    try:
        lines = open(source).read().split("\n")
    except OSError:
        return None
    for i, l in enumerate(lines):
        t = l.strip()
        if re.search(r"\b" + re.escape(name) + r"\(", l) and not t.startswith(("/*", "*", "//")):
            for j in range(i, len(lines)):
                if lines[j] == "}":
                    return i + 1, j + 1
    return None


def count_mma_kernel(code, D, page_fn, run_fns=None, flush_fn=None):
    """(page, chunk_min, chunk_max, group_setup or None, note, page ops,
    chunk ops) of one kvq_attend_mma_kernel's SASS: instruction counts of
    the shortest paths, and those paths' opcodes. page_fn: (file, first
    line, last line) of kvq_mma_page_keys, for a kernel whose page work is
    a branch inside the chunk loop rather than a loop around it; run_fns:
    {name: (file, first, last)} of the functions of a run of chunks that
    shares the values' C (kvq_mma_run_end): page work too, each a group
    the page path must pass where the kernel has it, as is the run's first
    chunk (its value MMAs on a fresh C). flush_fn: (file, first, last) of
    kvq_mma_value_flush, whose blocks outside the page work are rare
    branches left out of the value-group regions. Returns also {name:
    blocks found} (page_fn's as "kvq_mma_page_keys")."""
    g = CFG(code)
    with_mma = [L for L in g.loops if any(o.startswith(("HMMA", "IMMA")) for o in g.ops(L[1]))]
    chunk = [L for L in with_mma if not any(M[1] < L[1] for M in with_mma)]
    if len(chunk) != 1:
        raise ValueError(f"{len(chunk)} innermost loops with HMMA or IMMA (expected 1: the chunk loop)")
    chunk = chunk[0]
    h, body, latches = chunk
    notes = []
    inner = g.inner_loops(chunk)
    if inner:
        notes.append(f"{len(inner)} loop(s) inside the chunk loop counted once per chunk")
    # a staged kernel's last STAGES - 1 chunks issue no copy: one branch
    # around the whole copy, so a trip can skip even the copy every other
    # chunk runs (and with it what the compiler merged into its blocks,
    # such as the join after kvq_mma_page_sources' branch). Page work is
    # what a trip that stages (LDGSTS) can skip.
    copies = g.blocks_where(body, lambda ins: ins.op.startswith("LDGSTS"))
    def fn_blocks(span):
        fname, first, last = span
        return g.optional(chunk, g.blocks_where(body, lambda ins: any(
            f == fname and first <= ln <= last for f, ln in ins.lines)), through=copies)
    # page work inside the chunk loop: the blocks holding kvq_mma_page_keys'
    # instructions that a trip can skip (what the compiler hoisted into
    # blocks every trip runs is chunk work: it runs every chunk), and those
    # of a run's start and end (kvq_mma_run_start, kvq_mma_run_end)
    key_blocks = fn_blocks(page_fn)
    run_groups = {n: fn_blocks(span) for n, span in (run_fns or {}).items()}
    # a run's first chunk: value MMAs (u8 x u8) on a fresh C, in a loop
    # whose other value MMAs add into the run's C (a register C)
    value_mma = lambda ins, zero: (ins.op.startswith("IMMA") and ".U8.U8" in ins.op and  # noqa: E731
                                   ins.text.replace(" ", "").endswith(",RZ") == zero)
    if g.blocks_where(body, lambda ins: value_mma(ins, False)):
        run_groups["run start (value IMMA on RZ)"] = g.optional(chunk, g.blocks_where(
            body, lambda ins: value_mma(ins, True)), through=copies)
    found = {"kvq_mma_page_keys": len(key_blocks)}
    found.update({n: len(b) for n, b in run_groups.items()})
    page_blocks = set(key_blocks).union(*run_groups.values())
    # a chunk stages the next one (cp.async, LDGSTS): the path must pass a
    # staging block (the compiler's unrolled copy loops are alternatives,
    # so not all of them: a runtime-length copy's own loop may be skipped)
    staging = copies - page_blocks
    through = [staging] if staging else []
    outer = [L for L in g.loops if body < L[1]]
    if outer:                              # a page loop around the chunk loop
        page_loop = min(outer, key=lambda L: len(L[1]))
        page, page_path = g.path(page_loop, through=[body], collapse_cost={h: 0})
        page_path = [v for v in page_path if v not in body]
        cmin, chunk_path = g.path(chunk, through=through)
        cmax, _ = g.path(chunk, pick=max, through=through)
    elif page_blocks:                      # page work: a branch in the chunk loop
        cmin, chunk_path = g.path(chunk, avoid=page_blocks, through=through)
        cmax, _ = g.path(chunk, pick=max, avoid=page_blocks, through=through)
        with_page, page_path = g.path(chunk, through=through + [key_blocks] +
                                      [b for b in run_groups.values() if b])
        page = with_page - cmin
        page_path = [v for v in page_path if v in page_blocks]
    else:
        raise ValueError("no page loop, and no instruction from kvq_mma_page_keys in the chunk "
                         "loop (SASS without line info? compile with -lineinfo)")
    want = D // 16 - 1                     # value-group setups beyond the first
    # the mid-run flushes (kvq_mma_value_flush outside kvq_mma_run_end: the
    # running max moved, or a group's scales need a smaller exponent) are
    # rare branches, one inside each tile's group setup: not setup work
    rare = set()
    if flush_fn:
        rare = fn_blocks(flush_fn) - page_blocks
    regions = g.optional_regions(body - page_blocks - rare, h)
    group = None
    for k in range(0, len(regions) - want + 1):
        top = regions[k:k + want]
        rest = regions[k + want] if k + want < len(regions) else 0
        # alike within 15%, but for the last tile's setup, which is leaner
        # (the compiler drops what no later tile needs: up to a quarter of
        # a setup once a weight is made once, by the lane holding it), and
        # above the next region (the softmax's conditional rescale, 50-65)
        if (want > 0 and max(top) <= 1.15 * min(top[:-1] or top) and
                min(top) >= 0.7 * max(top) and min(top) >= 1.2 * rest):
            group = sum(top) / len(top)
            break
    if group is None:
        notes.append(f"value-group regions not recognized (optional regions {regions[:want + 2]})")
    return page, cmin, cmax, group, "; ".join(notes), g.ops(page_path), g.ops(chunk_path), found


def kinds(ops):
    k = collections.Counter(o.split(".")[0] for o in ops)
    return " ".join(f"{n} {v}" for n, v in k.most_common(6))


def template_params(source, name):
    """The template parameter names of kernel `name`'s definition in source
    (the 'template <int A, int B ...>' before '__global__ ... name('), or None."""
    try:
        text = open(source).read()
    except OSError:
        return None
    for m in re.finditer(r"\b" + re.escape(name) + r"\s*\(", text):
        head = text[max(0, m.start() - 400):m.start()]
        if "__global__" not in head or ";" in head[head.rfind("__global__"):]:
            continue
        t = head.rfind("template")
        if t < 0:
            continue
        inside = re.match(r"template\s*<([^>]*)>", head[t:])
        if inside:
            return [p.split()[-1] for p in inside.group(1).split(",")]
    return None


def variant_of(args, params):
    """{parameter: value} of an instantiation past <D, B, NQ> (names from the
    source; P3, P4 ... when they could not be read)."""
    names = params if params and len(params) == len(args) else [f"P{i}" for i in range(len(args))]
    return dict(zip(names[3:], args[3:]))


def variant_name(v):
    """'hi+lo' / 'hi only', ', direct' / ', N stages', ', subnormal'; any
    other parameter as NAME=value."""
    out = []
    for k, x in v.items():
        if k == "HILO" and v.get("DEC") == 0:     # the integer decode's digits
            out.append("4 digits" if x else "2 digits")
        elif k == "HILO":
            out.append("hi+lo" if x else "hi only")
        elif k == "STAGES":
            out.append("direct" if x == 1 else f"{x} stages")
        elif k == "SUB":
            out.append("subnormal" if x else "magic")
        elif k == "OPT":                # kvq_cuda.cu's KVQ_MMA_OPT_*
            out.append({0: "page-start", OPT_PF: "prefetch", OPT_PF | OPT_RUNS: "prefetch, runs",
                        OPT_PF | OPT_OCC5: "prefetch, 5 CTAs"}.get(x, f"OPT={x}"))
        elif k == "DEC":                # kvq_cuda.cu's KVQ_MMA_DEC_*
            out.append({0: "int8", 1: "magic", 2: "subnormal"}.get(x, f"DEC={x}"))
        else:
            out.append(f"{k}={x}")
    return ", ".join(out)


def sass_counts(sass_path, probe_path, core_path, source):
    print("\n== SASS instructions per KB of key + value codes, tensor-core path (sm_90) ==")
    print(f"issue slots per KB at copy rate: {SLOTS_PER_KB:.0f} ({SMS} SMs x {SCHEDULERS} schedulers x "
          f"{CLOCK_GHZ} GHz / ({COPY_GBPS:.0f} GB/s / 1 KB), walkthrough 9.9)")
    rows, probe = {}, False
    if sass_path:
        funcs = parse_sass(sass_path)
        names = demangle_all(funcs)
        span = function_lines(source, "kvq_mma_page_keys")
        base = os.path.basename(source)
        flush_span = function_lines(source, "kvq_mma_value_flush")
        flush_fn = (base,) + flush_span if flush_span else None
        run_fns = {n: (base,) + sp for n in ("kvq_mma_run_end", "kvq_mma_page_sources")
                   for sp in [function_lines(source, n)] if sp}
        params = template_params(source, "kvq_attend_mma_kernel")
        page_fn = (os.path.basename(source),) + (span or (0, -1))
        for mangled, code in funcs.items():
            a = template_args(names[mangled], "kvq_attend_mma_kernel")
            if a and a[0] == 128 and len(a) >= 4:
                try:
                    rows[a] = count_mma_kernel(code, a[0], page_fn, run_fns, flush_fn)
                except ValueError as e:
                    rows[a] = e
    results = []                          # (B, G, gqa, per_kb) of the default variant
    if rows:
        # the library's default variant: hi + lo, 2 stages (3 is opt-in:
        # KVQ_CUDA_MMA_STAGES3), the integer decode, OPT by G and NQ
        # (default_opt); any other parameter at its smallest value
        var = {a: variant_of(a, params) for a in rows}
        lowest = collections.defaultdict(lambda: None)
        for v in var.values():
            for k, x in v.items():
                if k == "OPT":
                    continue
                if k == "STAGES":
                    rank = lambda y: (y == DEFAULT_STAGES, y)   # noqa: E731
                    lowest[k] = x if lowest[k] is None else max(lowest[k], x, key=rank)
                    continue
                best = max if k == "HILO" else min
                lowest[k] = x if lowest[k] is None else best(lowest[k], x)
        is_default = lambda a, G: all(x == (default_opt(G, a[2]) if k == "OPT" else lowest[k])  # noqa: E731
                                      for k, x in var[a].items())
        width = max(len(variant_name(v)) for v in var.values()) + 2
        print(f"kvq_attend_mma_kernel<{', '.join(params or ['D', 'B', 'NQ', '...'])}>, D = 128: chunk = 32 tokens (the chunk loop's")
        print("shortest path, + (D/Gv - 1) value-group setups), page = the work once per page (the page")
        print("loop's own, or the kvq_mma_page_keys branch inside the chunk loop); * = the default variant")
        print(f"{'B':>2} {'G':>4} {'Gv':>4} {'GQA':>3} {'NQ':>2} {'variant':>{width}} | {'page':>5} {'chunk':>6} "
              f"{'x':>2} | {'KB/page':>7} {'per KB':>7} {'% issue':>7}")
        notes = set()
        for B in (2, 4):
            for G in (32, 128):
                for gqas in ((1, 4), (8,)):          # GQA 1 and 4: the same NQ = 1 pass
                    gqa = gqas[-1]
                    nq = 2 if gqa > 4 else 1
                    passes = -(-gqa // (4 * nq))
                    glabel = ",".join(str(x) for x in gqas)
                    keys = sorted((a for a in rows if a[1] == B and a[2] == nq),
                                  key=lambda a: (not is_default(a, G), variant_name(var[a])))
                    for a in keys:
                        r = rows[a]
                        variant = variant_name(var[a]) + (" *" if is_default(a, G) and len(keys) > 1 else "")
                        head = f"{B:2d} {G:4d} {G:4d} {glabel:>3} {nq:2d} {variant:>{width}} |"
                        if isinstance(r, ValueError):
                            print(f"{head} cannot count: {r}")
                            continue
                        page, cmin, cmax, group, note = r[:5]
                        if note:
                            notes.add(note)
                        kb = G * 2 * 128 * B / 8 / 1024
                        n = G // CHUNK_TOKENS
                        extra = 128 // G - 1
                        if extra == 0 or group is not None:
                            chunk = cmin + extra * (group or 0)
                            per_kb = passes * (page + n * chunk) / kb
                            print(f"{head} {page:5d} {chunk:6.0f} {n:2d} | {kb:7.1f} {per_kb:7.0f} "
                                  f"{100 * per_kb / SLOTS_PER_KB:6.0f}%")
                            if is_default(a, G):
                                results.extend((B, G, x, per_kb) for x in gqas)
                        else:
                            lo = passes * (page + n * cmin) / kb
                            hi = passes * (page + n * cmax) / kb
                            print(f"{head} {page:5d} {cmin}-{cmax} {n:2d} | {kb:7.1f} {lo:.0f}-{hi:.0f}"
                                  " (the value-group setups not recognized: shortest to longest path)")
        print("(GQA 1 and 4: one pass of NQ = 1 quad of heads; GQA 8: one pass of NQ = 2)")
        for note in sorted(notes):
            print(f"note: {note}")
        for B in (2, 4):
            for a in sorted(rows):
                r = rows[a]
                if (a[1] == B and a[2] == 1 and any(is_default(a, G) for G in (32, 128)) and
                        not isinstance(r, ValueError)):
                    print(f"B = {B}, NQ = 1, {variant_name(var[a])}: page  {kinds(r[5])}")
                    print(f"{'':{len(variant_name(var[a])) + 14}s}chunk {kinds(r[6])}")
                    print(f"{'':{len(variant_name(var[a])) + 14}s}page work found in the chunk loop "
                          "(optional blocks holding each function's instructions): " +
                          ", ".join(f"{n} {k}" for n, k in r[7].items()))
    elif probe_path:
        probe = True
        print("kvq_attend_mma_kernel is not in kvq_cuda.cu yet: THE PROBE instead, bench/mma_probe.cu's")
        print("mma_step_count<B, 128> (4 heads; its loop is one step of 16 x 4/B tokens, keys, softmax,")
        print("hand-off, values). It has NO per-page work (page weights, exponents, zero terms), so")
        print("these counts are lower bounds for the kernel.")
        funcs = parse_sass(probe_path)
        names = demangle_all(funcs)
        print(f"{'B':>2} {'G':>4} {'GQA':>3} | {'loop':>5} {'tokens':>6} | {'per KB':>7} {'% issue':>7}  by kind")
        for mangled, code in sorted(funcs.items()):
            a = template_args(names[mangled], "mma_step_count")
            if not a:
                continue
            B, D = a
            g = CFG(code)
            inner = g.innermost_loops()
            if len(inner) != 1:
                print(f"{B:2d}: cannot count: {len(inner)} innermost loops")
                continue
            h, body, latches = inner[0]
            n = sum(g.cost[v] for v in body)
            tokens = 16 * 4 // B
            kb = tokens * 2 * D * B / 8 / 1024
            for G in (32, 128):
                for gqa in (1, 4, 8):
                    per_kb = n / kb * (2 if gqa > 4 else 1)
                    print(f"{B:2d} {G:4d} {gqa:3d} | {n:5d} {tokens:6d} | {per_kb:7.0f} "
                          f"{100 * per_kb / SLOTS_PER_KB:6.0f}%  {kinds(g.ops(body)) if gqa == 1 else ''}")
                    results.append((B, G, gqa, per_kb))
        print("(GQA 8: two passes of 4 heads over the same codes)")
    else:
        print("SKIP: neither kvq_attend_mma_kernel nor the probe's SASS was given")
    core = cuda_core_counts(core_path) if core_path else {}
    print(f"\ntarget (issue 27): 2-bit G = 128 at or below ~{TARGET_PER_KB} instructions per KB with "
          f"per-page work (~{100 * TARGET_PER_KB / SLOTS_PER_KB:.0f}% of issue at copy rate); "
          "a design target, not a build gate")
    tag = " (the probe, without per-page work)" if probe else ""
    for B, G, gqa, per_kb in results:
        if B == 2 and G == 128:
            print(f"  B = 2, G = 128, GQA {gqa}: {per_kb:.0f} per KB{tag}: "
                  f"{'PASS' if per_kb <= TARGET_PER_KB else 'FAIL'}")
    if core:
        print("G = 32 routing (per KB of codes; the CUDA-core figure is its inner step alone):")
        for B, G, gqa, per_kb in results:
            if G == 32 and (B, gqa) in core:
                c = core[(B, gqa)]
                print(f"  B = {B}, GQA {gqa}: tensor cores {per_kb:.0f}, CUDA cores {c:.0f}: "
                      f"{'tensor cores' if per_kb < c else 'CUDA cores'} favoured{tag}")
    return results


def cuda_core_counts(path):
    """Per KB of today's CUDA-core step (bench/sass_probe.cu: one packed word
    per lane per loop, 1 or 4 heads): {(B, gqa): per KB}."""
    funcs = parse_sass(path)
    names = demangle_all(funcs)
    per = {}
    for mangled, code in funcs.items():
        a = template_args(names[mangled], "sass_probe")
        if not a:
            continue
        B, nh = a
        g = CFG(code)
        inner = g.innermost_loops()
        if len(inner) != 1:
            continue
        n = sum(g.cost[v] for v in inner[0][1])
        per[(B, nh)] = n * 1024 / (32 * 4)          # 32 lanes x one 4-byte word
    out = {}
    for B in (2, 4):
        if (B, 1) in per and (B, 4) in per:
            out[(B, 1)], out[(B, 4)], out[(B, 8)] = per[(B, 1)], per[(B, 4)], 2 * per[(B, 4)]
    return out


def main(argv):
    args = collections.defaultdict(list)
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--ptxas", "--sass", "--probe", "--cuda-core", "--source", "--known") and i + 1 < len(argv):
            args[a].append(argv[i + 1])
            i += 2
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            die(f"unknown argument {a!r}\n{__doc__.split('Usage:')[1]}")
    src = (args["--source"] or ["kvq_cuda.cu"])[-1]
    failures = []
    if args["--ptxas"]:
        known = read_known((args["--known"] or [None])[-1])
        failures = resource_gates(args["--ptxas"], source_defines(src), known)
    if args["--sass"] or args["--probe"]:
        try:                               # a count, not a gate: never fails the build
            sass_counts((args["--sass"] or [None])[-1], (args["--probe"] or [None])[-1],
                        (args["--cuda-core"] or [None])[-1], src)
        except Exception as e:             # noqa: BLE001
            print(f"\nthe SASS count stopped: {type(e).__name__}: {e} (bench/cuda_gates.py needs an update)")
    print()
    if failures:
        for f in failures:
            print(f"cuda-gates: FAIL {f}")
        print(f"cuda-gates: {len(failures)} resource gate(s) failed")
        return 1
    if args["--ptxas"]:
        print("cuda-gates: every resource gate passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
