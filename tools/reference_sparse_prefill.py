#!/usr/bin/env python3
"""Independent NumPy reference for the MMInference / MInference sparse prefill patterns.

Writes tests/fixtures/sparse_prefill/: per case random Q/K/V (fp32), the dense 0/1 mask each
query head attends (bit-packed: int32 word w of row r holds keys 32w..32w+31, bit j%32), and the
attention output restricted to that mask (float64 softmax, stored fp32). The C++ tests
(tests/attention/sparse_prefill_test.cpp) build the same patterns with src/attention and compare
mask and output.

The masks are written here as boolean matrix formulas (the style of MInference's own search code,
minference/modules/mminference.py), not as tiles and spans; the one sequential piece, MInference's
index conversion (csrc/vertical_slash_index.cu), is re-stated as its interleaved vertical / slash
walk. Semantics, with limit(r) = min(n-1, (r // B + 1) * B - 1) (B = 1: causal):
  dense        c <= limit(r)
  a_shape      c <= limit(r) and (c < sink or c > limit(r) - local)
  tri_shape    a_shape, rows >= n - n_last dense
  vs           last-64-query estimate (30 first columns, 100 nearest diagonals forced), converted
               per 64-row block to merged 64-wide bands + gathered verticals, causal
  block_sparse mean-pooled 64-blocks, top-k causal key blocks + the diagonal block(s)
  grid         (stride 0: searched, the stride whose best phase class has the largest mass
               minus its density 1/stride; ties to the smaller stride)
               rows outside [vb, ve) dense; else sink c < vb, band c > limit(r) - local,
               vline (c - vb) % stride == phase, hline rows (r - vb) % stride == phase dense
  q_boundary   per modality VS from the last <= 64 queries of its last span, per-row conversion
  2d_boundary  per query modality m: VS over m's compacted rows and keys (from m's last <= 64
               queries), plus for each other modality the top-`vertical` keys those queries attend

Regenerate:  /work/refenv/bin/python tools/reference_sparse_prefill.py tests/fixtures/sparse_prefill
"""
import json
import os
import sys

import numpy as np

BLOCK = 64


def limits(n, b):
    r = np.arange(n)
    return np.minimum(n - 1, (r // b + 1) * b - 1)


def family(n, b):
    return np.arange(n)[None, :] <= limits(n, b)[:, None]


def softmax_rows(s, mask):
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(mask, np.exp(s - m), 0)
    z = e.sum(axis=1, keepdims=True)
    return np.where(z > 0, e / np.where(z > 0, z, 1), 0)


def topk_stable(v, k):
    order = np.argsort(-v, kind="stable")  # ties: lower index first
    return order[:k]


def estimate_vs(q, k, n, b, q_begin, q_end, vertical, slash, init=30, local=100):
    """MInference 1.0 vertical_and_slash_kernel / topk_vs, in float32 like the engine."""
    q = q.astype(np.float32)
    k = k.astype(np.float32)
    s = (q[q_begin:q_end] @ k[:q_end].T) / np.float32(np.sqrt(q.shape[1]))
    rows = np.arange(q_begin, q_end)
    mask = np.arange(q_end)[None, :] <= limits(n, b)[rows][:, None]
    a = softmax_rows(s.astype(np.float64), mask)
    col = a.sum(axis=0)
    col[:init] = np.inf
    off = rows[:, None] - np.arange(q_end)[None, :]
    diag = np.zeros(q_end)
    np.add.at(diag, (q_end - 1 - off[off >= 0]), a[off >= 0])
    diag[q_end - min(local, q_end):] = np.inf
    v_idx = np.sort(topk_stable(col, min(q_end, max(vertical, 30))))
    s_idx = np.sort((q_end - 1) - topk_stable(diag, min(q_end, max(slash, 50))))[::-1]
    return v_idx, s_idx


def convert_block(v_idx, s_idx, start_m):
    """The keys one 64-row block attends (before the causal rule): the index conversion walk."""
    end_m = start_m + BLOCK
    keys = set()
    s_list = [o for o in s_idx if o < end_m]
    if not s_list:
        return {c for c in v_idx if c < end_m}
    v_list = list(v_idx)
    vi, si = 0, 0
    e = max(end_m - s_list[si], BLOCK)
    si += 1
    lo, hi = e - BLOCK, e
    v = v_list[vi] if v_list else end_m + BLOCK
    vi += 1
    while True:
        if v < hi:
            if v < lo:
                keys.add(v)
            v = v_list[vi] if vi < len(v_list) else end_m + BLOCK
            vi += 1
        else:
            if si < len(s_list):
                e = max(end_m - s_list[si], BLOCK)
                si += 1
            else:
                keys.update(range(lo, hi))
                break
            if e > hi + BLOCK:
                keys.update(range(lo, hi))
                lo, hi = e - BLOCK, e
            elif e > hi:
                hi += BLOCK
    return keys


def vs_rows_mask(mask, rows, v_idx, s_idx, n, b):
    lim = limits(n, b)
    for blk in sorted(set(r // BLOCK for r in rows)):
        keys = np.array(sorted(c for c in convert_block(v_idx, s_idx, blk * BLOCK) if c < n), dtype=int)
        for r in rows:
            if r // BLOCK != blk:
                continue
            if keys.size:
                mask[r, keys[keys <= lim[r]]] = True
            # the diagonal-block rule: keys past the block's 64 rows up to limit(r)
            mask[r, blk * BLOCK + BLOCK: lim[r] + 1] = True
    return mask


def mask_a_shape(n, b, sink, local):
    c = np.arange(n)[None, :]
    lim = limits(n, b)[:, None]
    return (c <= lim) & ((c < sink) | (c > lim - local))


def mask_block_sparse(q, k, n, b, top):
    nb = (n + BLOCK - 1) // BLOCK
    pad = nb * BLOCK - n
    cnt = np.minimum(BLOCK, n - np.arange(nb) * BLOCK)[:, None]
    qp = np.pad(q, ((0, pad), (0, 0))).reshape(nb, BLOCK, -1).sum(1) / cnt
    kp = np.pad(k, ((0, pad), (0, 0))).reshape(nb, BLOCK, -1).sum(1) / cnt
    sc = qp.astype(np.float32) @ kp.astype(np.float32).T
    lim = limits(n, b)
    mask = np.zeros((n, n), bool)
    for i in range(nb):
        last = min(n, (i + 1) * BLOCK) - 1
        kb = (lim[last] + BLOCK) // BLOCK
        s = sc[i, :kb].astype(np.float64).copy()
        s[i:kb] = np.inf
        chosen = topk_stable(s, max(top, kb - i))
        cols = np.zeros(n, bool)
        for j in chosen:
            cols[j * BLOCK:(j + 1) * BLOCK] = True
        rows = slice(i * BLOCK, last + 1)
        mask[rows] = cols[None, :]
    return mask & family(n, b)


def mask_grid(n, b, vb, ve, stride, phase, hline, vline, local):
    r = np.arange(n)[:, None]
    c = np.arange(n)[None, :]
    lim = limits(n, b)[:, None]
    m = (c < vb) | (c > lim - local)
    if vline:
        m |= (c >= vb) & ((c - vb) % stride == phase)
    if hline:
        m |= (r >= vb) & (r < ve) & ((r - vb) % stride == phase)
    m |= (r < vb) | (r >= ve)
    return m & (c <= lim)


def search_grid(q, k, n, b, vb, ve, strides, last_q):
    qb = max(vb, ve - last_q)
    s = (q[qb:ve].astype(np.float32) @ k[:ve].astype(np.float32).T) / np.float32(np.sqrt(q.shape[1]))
    a = softmax_rows(s.astype(np.float64), np.arange(ve)[None, :] <= limits(n, b)[qb:ve, None])
    mass = a[:, vb:ve].sum(0)
    total = mass.sum()
    best, st = -np.inf, None
    for s_ in sorted(strides):
        fold = np.bincount(np.arange(mass.size) % s_, weights=mass, minlength=s_)
        excess = fold.max() / total - 1.0 / s_  # recall over a random key set of the same density
        if excess > best + 1e-6:
            best, st, phase = excess, s_, int(fold.argmax())
    return st, phase


def mask_q_boundary(q, k, n, b, modality, vertical, slash):
    mask = np.zeros((n, n), bool)
    mod = np.asarray(modality)
    edges = np.flatnonzero(np.diff(mod)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [n]])
    for m in np.unique(mod):
        last = [(s, e) for s, e in zip(starts, ends) if mod[s] == m][-1]
        qb = max(last[0], last[1] - 64)
        v_idx, s_idx = estimate_vs(q, k, n, b, qb, last[1], vertical, slash)
        rows = np.flatnonzero(mod == m)
        vs_rows_mask(mask, rows, v_idx, s_idx, n, b)
    return mask


def mask_2d_boundary(q, k, n, b, modality, vertical, slash):
    mod = np.asarray(modality)
    lim = limits(n, b)
    mask = np.zeros((n, n), bool)
    scale = np.float32(1 / np.sqrt(q.shape[1]))
    for m in np.unique(mod):
        rows = np.flatnonzero(mod == m)
        est = rows[-64:]
        n_c = int(np.searchsorted(rows, lim[rows[-1]], side="right"))
        col = np.zeros(n_c)
        diag = np.zeros(n_c)
        cross = {mk: np.zeros(int(np.searchsorted(np.flatnonzero(mod == mk), lim[rows[-1]], side="right")))
                 for mk in np.unique(mod) if mk != m}
        for r in est:
            i = int(np.searchsorted(rows, r))
            keys = np.arange(lim[r] + 1)
            s = (q[r].astype(np.float32) @ k[keys].astype(np.float32).T) * scale
            a = softmax_rows(s[None, :].astype(np.float64), np.ones((1, keys.size), bool))[0]
            own = mod[keys] == m
            j = np.searchsorted(rows, keys[own])
            np.add.at(col, j, a[own])
            ok = i - j >= 0
            np.add.at(diag, n_c - 1 - (i - j[ok]), a[own][ok])
            for mk in cross:
                sel = mod[keys] == mk
                np.add.at(cross[mk], np.searchsorted(np.flatnonzero(mod == mk), keys[sel]), a[sel])
        col[:30] = np.inf
        diag[n_c - min(100, n_c):] = np.inf
        v_idx = np.sort(topk_stable(col, min(n_c, max(vertical, 30))))
        s_idx = np.sort((n_c - 1) - topk_stable(diag, min(n_c, max(slash, 50))))[::-1]
        # intra-modality: the conversion in compacted coordinates
        for t in range(0, rows.size, BLOCK):
            keys_c = np.array(sorted(c for c in convert_block(v_idx, s_idx, t) if c < n_c), dtype=int)
            for i in range(t, min(rows.size, t + BLOCK)):
                r = rows[i]
                kc = np.arange(n_c)
                ok = rows[kc] <= lim[r]
                sel = np.zeros(n_c, bool)
                sel[keys_c] = True
                sel[t + BLOCK:] = True  # the diagonal-block rule, compacted
                mask[r, rows[kc[ok & sel]]] = True
        for mk, mass in cross.items():
            pos = np.flatnonzero(mod == mk)
            chosen = pos[topk_stable(mass, min(mass.size, vertical))]
            for r in rows:
                mask[r, chosen[chosen <= lim[r]]] = True
    return mask


def head_mask(case, q, k):
    n, b, p = case["n"], case["block_size"], case["pattern"]
    kind = p["kind"]
    if p.get("boundary") == "q":
        return mask_q_boundary(q, k, n, b, case["modality"], p["vertical"], p["slash"])
    if p.get("boundary") == "2d":
        return mask_2d_boundary(q, k, n, b, case["modality"], p["vertical"], p["slash"])
    if kind == "dense":
        return family(n, b)
    if kind == "a_shape":
        return mask_a_shape(n, b, p["sink"], p["local"])
    if kind == "tri_shape":
        m = mask_a_shape(n, b, p["sink"], p["local"])
        m[max(0, n - p["n_last"]):] = family(n, b)[max(0, n - p["n_last"]):]
        return m
    if kind == "vertical_and_slash":
        v_idx, s_idx = estimate_vs(q, k, n, b, max(0, n - p["last_q"]), n, p["vertical"], p["slash"])
        return vs_rows_mask(np.zeros((n, n), bool), range(n), v_idx, s_idx, n, b)
    if kind == "block_sparse":
        return mask_block_sparse(q, k, n, b, p["top_blocks"])
    if kind == "grid_attn":
        vb, ve = case["vision"]
        st, ph = p["stride"], p["phase"]
        if st == 0:
            space = list(range(2, min(1024, (ve - vb) // 2) + 1)) or [1]
            st, ph = search_grid(q, k, n, b, vb, ve, space, p["last_q"])
            case.setdefault("searched", []).append([st, ph])
        return mask_grid(n, b, vb, ve, st, ph, p["hline"], p["vline"], p["local"])
    raise ValueError(kind)


def pack_bits(mask):
    n = mask.shape[-1]
    words = (n + 31) // 32
    padded = np.zeros(mask.shape[:-1] + (words * 32,), np.uint64)
    padded[..., :n] = mask
    bits = padded.reshape(mask.shape[:-1] + (words, 32)) << np.arange(32, dtype=np.uint64)
    return bits.sum(-1).astype(np.uint32).view(np.int32)


def plant_grid(rng, q, k, group, vb, ve, stride, phase):
    """Makes every head a grid head: vision queries attend the keys vb + phase + k * stride."""
    n, h, d = q.shape
    for g in range(k.shape[1]):
        direction = rng.standard_normal(d)
        direction *= 4.0 / np.linalg.norm(direction)
        k[:, g] *= 0.3
        k[vb + phase:ve:stride, g] += direction
        for hh in range(g * group, (g + 1) * group):
            q[:, hh] *= 0.3
            q[vb:ve, hh] += direction


def make_case(rng, case):
    n, h, hk, d = case["n"], case["heads"], case["kv_heads"], case["head_dim"]
    q = rng.standard_normal((n, h, d)).astype(np.float32)
    k = rng.standard_normal((n, hk, d)).astype(np.float32)
    v = rng.standard_normal((n, hk, d)).astype(np.float32)
    if case.get("planted_grid"):
        plant_grid(rng, q, k, h // hk, *case["vision"], *case["planted_grid"])
    group = h // hk
    masks = np.zeros((h, n, n), bool)
    out = np.zeros((n, h, d))
    for hh in range(h):
        qh, kh, vh = q[:, hh].astype(np.float64), k[:, hh // group].astype(np.float64), v[:, hh // group].astype(np.float64)
        masks[hh] = head_mask(case, q[:, hh], k[:, hh // group])
        a = softmax_rows(qh @ kh.T / np.sqrt(d), masks[hh])
        out[:, hh] = a @ vh
    return q, k, v, masks, out.astype(np.float32)


def short_segments(rng, n):
    mod = []
    while len(mod) < n:
        m = int(rng.integers(0, 3))  # text, image, video
        mod += [m] * int(rng.integers(3, 40))
    return mod[:n]


def cases(rng):
    base = dict(heads=4, kv_heads=2, head_dim=16, block_size=1)
    yield "dense_n131", dict(base, n=131, pattern=dict(kind="dense"))
    yield "dense_block4_n130", dict(base, n=130, block_size=4, pattern=dict(kind="dense"))
    yield "a_shape_n200", dict(base, n=200, pattern=dict(kind="a_shape", sink=8, local=40))
    yield "a_shape_block4_n203", dict(base, n=203, block_size=4, pattern=dict(kind="a_shape", sink=8, local=40))
    yield "tri_shape_n190", dict(base, n=190, pattern=dict(kind="tri_shape", sink=8, local=40, n_last=20))
    small = dict(base, heads=2, kv_heads=1, head_dim=8)
    yield "vs_n640", dict(small, n=640, pattern=dict(kind="vertical_and_slash", vertical=30, slash=110, last_q=64))
    yield "vs_block4_n611", dict(small, n=611, block_size=4,
                                 pattern=dict(kind="vertical_and_slash", vertical=35, slash=104, last_q=64))
    yield "block_sparse_n290", dict(base, n=290, pattern=dict(kind="block_sparse", top_blocks=2))
    yield "grid_n300", dict(base, n=300, vision=[20, 270],
                            pattern=dict(kind="grid_attn", stride=14, phase=3, hline=True, vline=True, local=30, last_q=64))
    yield "grid_block4_n300", dict(base, n=300, block_size=4, vision=[17, 281],
                                   pattern=dict(kind="grid_attn", stride=9, phase=8, hline=False, vline=True, local=21, last_q=64))
    yield "grid_searched_n320", dict(base, n=320, vision=[24, 300], planted_grid=[23, 5],
                                     pattern=dict(kind="grid_attn", stride=0, phase=0, hline=False, vline=True, local=30, last_q=64))
    yield "q_boundary_n640", dict(small, n=640, modality=short_segments(rng, 640),
                                  pattern=dict(kind="vertical_and_slash", boundary="q", vertical=30, slash=110, last_q=64))
    yield "2d_boundary_n700", dict(small, n=700, modality=short_segments(rng, 700),
                                   pattern=dict(kind="vertical_and_slash", boundary="2d", vertical=30, slash=104, last_q=64))
    yield "2d_boundary_block4_n650", dict(small, n=650, block_size=4, kv_heads=2, modality=short_segments(rng, 650),
                                          pattern=dict(kind="vertical_and_slash", boundary="2d", vertical=31, slash=102, last_q=64))
    yield "q_boundary_block4_n601", dict(small, n=601, block_size=4, kv_heads=2, modality=short_segments(rng, 601),
                                         pattern=dict(kind="vertical_and_slash", boundary="q", vertical=33, slash=101, last_q=64))

def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/sparse_prefill"
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20261125)
    manifest = []
    for name, case in cases(rng):
        q, k, v, masks, out = make_case(rng, case)
        for arr, tag in ((q, "q"), (k, "k"), (v, "v"), (out, "out")):
            np.save(os.path.join(out_dir, f"{name}_{tag}.npy"), arr)
        np.save(os.path.join(out_dir, f"{name}_mask.npy"), pack_bits(masks))
        density = float(masks.sum() / (family(case["n"], case["block_size"]).sum() * case["heads"]))
        manifest.append(dict(name=name, density=round(density, 4), **case))
        print(name, "density", round(density, 3), case.get("searched", ""))
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
