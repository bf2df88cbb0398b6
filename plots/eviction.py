"""plots/eviction.py - chapters 7 and 8: eviction, the block wall, compaction.

  evict_freed.png        blocks freed against the share of tokens evicted at
                         random, with and without a repack, beside the closed
                         forms (wall 2); 06_eviction, CSV-only sweep.
  evict_toy_blocks.png   the worked example's toy pool (6 blocks x 4 slots) filled,
                         after eviction, after repack, after hole-filling;
                         06_eviction part A.
  evict_cache_slots.png  the quantized key store of two real caches as blocks
                         of 16 slots: HF int4 after H2O and after repack, KIVI-2
                         (per-channel groups of 32) after 50% eviction and after
                         compaction; 06_eviction parts C and D.
"""
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from _plot import COLOR, STATE_COLOR, SYNTHETIC, figure, rows, save


def freed():
    r = rows("evict_freed.csv")
    f = [float(x["evicted_share"]) * 100 for x in r]
    nb = int(r[0]["blocks"])
    fig, ax = figure(
        "Wall 2: blocks freed vs tokens evicted at random (16,000 tokens, blocks of 16)",
        "What to see: without compaction almost nothing comes back until ~75% of tokens are "
        "gone: a block frees only when all 16 slots die (f^16).\nA repack returns the evicted "
        "share itself. kvq's paged pool (kvq_pseq_evict, kvq_pseq_repack); random victims, no "
        "model involved.", size=(10, 5.2))
    ax.plot(f, [100 * int(x["freed_repack"]) / nb for x in r], "o", color=COLOR["OTT"], ms=5,
            label="after repack (measured)")
    ax.plot(f, [100 * int(x["closed_form_repack"]) / nb for x in r], "-", color=COLOR["OTT"],
            alpha=0.5, label="1 - ceil(live/16)/1000 (closed form)")
    ax.plot(f, [100 * int(x["freed_evict"]) / nb for x in r], "s", color=COLOR["HF"], ms=5,
            label="eviction only (measured)")
    ax.plot(f, [100 * float(x["closed_form_evict"]) / nb for x in r], "-", color=COLOR["HF"],
            alpha=0.5, label="eviction only: f^16 (expected)")
    ax.plot([0, 100], [0, 100], ":", color="#888888", lw=1, label="ideal: freed = evicted")
    ax.set_xlabel("tokens evicted (% of 16,000, chosen at random)")
    ax.set_ylabel("blocks freed (% of 1,000)")
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    save(fig, "evict_freed.png", bottom=0.2)


def pool_panel(ax, cells, n_pool, bt, title):
    """cells: {(block, slot): (token, state)}; blocks with no cells are free."""
    ax.set_xlim(-0.5, bt - 0.5)
    ax.set_ylim(n_pool - 0.5, -0.5)
    for b in range(n_pool):
        held = any((b, s) in cells for s in range(bt))
        for s in range(bt):
            tok, state = cells.get((b, s), (-1, "free" if not held else "empty"))
            ax.add_patch(Rectangle((s - 0.48, b - 0.46), 0.96, 0.92,
                                   facecolor=STATE_COLOR[state], edgecolor="#999999", lw=0.6))
            if tok >= 0:
                ax.text(s, b, "T%d" % tok, ha="center", va="center", fontsize=8,
                        color="white" if state in ("live", "dead") else "black")
    ax.set_xticks(range(bt))
    ax.set_yticks(range(n_pool))
    ax.set_xlabel("slot in block")
    ax.set_title(title, fontsize=9.5)


def toy():
    r = rows("evict_toy_blocks.csv")
    stages = []
    cells = {}
    for x in r:
        st = x["stage"]
        if st not in cells:
            stages.append(st)
            cells[st] = {}
        cells[st][(int(x["block"]), int(x["slot"]))] = (int(x["token"]), x["state"])
    n_pool = int(r[0]["pool_blocks"])
    bt = 1 + max(int(x["slot"]) for x in r)
    titles = {"filled": "1. T0..T23 appended",
              "evicted": "2. evict T2, T9, T13, T21:\n0 blocks freed",
              "repacked": "3a. repack: 1 block freed,\n18 slot copies, order kept",
              "hole-filled": "3b. hole-filling: 1 block freed,\n3 copies, order scrambled"}
    fig, axes = figure(
        "The worked example's toy pool: 6 blocks x 4 slots, the newest round T20..T23",
        "What to see: eviction leaves dead slots (red) in every block it touches and frees "
        "none; repack slides every survivor forward (order kept, many copies);\nhole-filling "
        "drops only the newest round's survivors into the holes (T20 lands in T2's slot): "
        "few copies, so positions need a map. Blank rows: free blocks.",
        ncols=4, size=(12, 4.6))
    for ax, st in zip(axes, stages):
        pool_panel(ax, cells[st], n_pool, bt, titles.get(st, st))
    axes[0].set_ylabel("physical block id")
    axes[-1].legend(handles=[Patch(color=STATE_COLOR["live"], label="live"),
                             Patch(color=STATE_COLOR["dead"], label="dead (evicted)"),
                             Patch(facecolor=STATE_COLOR["empty"], edgecolor="#999999",
                                   label="unused slot"),
                             Patch(facecolor="white", edgecolor="#999999", label="free block")],
                    fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    save(fig, "evict_toy_blocks.png", bottom=0.3, top=0.8, wspace=0.3)


def cache_slots(bt=16):
    r = rows("evict_cache_slots.csv")
    stages = []
    data = {}
    for x in r:
        st = x["stage"]
        if st not in data:
            stages.append(st)
            data[st] = []
        data[st].append((int(x["slot"]), int(x["unit"]), int(x["position"])))
    n_cols = max(len(v) for v in data.values())
    n_blocks = (n_cols + bt - 1) // bt
    cmap = ListedColormap([STATE_COLOR["free"], STATE_COLOR["dead"], STATE_COLOR["live"]])
    fig, axes = figure(
        "Quantized key stores as blocks of 16 slots: after eviction and after compaction",
        "What to see: HF's per-token keys repack slot by slot and the store shrinks to its live "
        "keys (the other kept tokens sit in the fp residual); KIVI's per-channel key groups (32 tokens, outlined) keep\n"
        "their dead slots pinned unless all 32 died, so 50% eviction frees nothing - kvq's "
        "choice (no re-quantization error), paid in memory. " + SYNTHETIC + ".",
        nrows=len(stages), size=(12, 7.2))
    for ax, st in zip(axes, stages):
        slots = data[st]
        grid = [[0] * n_blocks for _ in range(bt)]      # [slot in block][block]
        for slot, _, pos in slots:
            grid[slot % bt][slot // bt] = 2 if pos >= 0 else 1
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=2, aspect="auto", interpolation="nearest",
                  extent=(-0.5, n_blocks - 0.5, bt - 0.5, -0.5))
        live = sum(1 for s in slots if s[2] >= 0)
        ax.set_title("%s: %d slots in %d blocks, %d live" % (st, len(slots),
                     (len(slots) + bt - 1) // bt, live), fontsize=9)
        ax.set_ylabel("slot")
        ax.set_yticks([0, bt - 1])
        per_unit = len(slots) // (1 + max(s[1] for s in slots)) if slots else 1
        if per_unit > 1:                                # per-channel groups
            for g in range(0, len(slots), per_unit):
                ax.add_patch(Rectangle((g // bt - 0.5, -0.5), per_unit / bt, bt,
                                       fill=False, edgecolor="black", lw=0.8))
    axes[-1].set_xlabel("block (16 slots each), in store order")
    axes[0].legend(handles=[Patch(color=STATE_COLOR["live"], label="live token"),
                            Patch(color=STATE_COLOR["dead"], label="dead placeholder"),
                            Patch(facecolor="white", edgecolor="#999999",
                                  label="freed / never used")],
                   fontsize=7.5, loc="upper right", bbox_to_anchor=(1.0, 1.45), ncol=3)
    save(fig, "evict_cache_slots.png", bottom=0.13, top=0.88, hspace=0.55)


if __name__ == "__main__":
    freed()
    toy()
    cache_slots()
