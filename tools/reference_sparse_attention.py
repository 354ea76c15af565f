#!/usr/bin/env python3
"""Independent NumPy reference of MAGE, Quest and SparseD sparse attention for block diffusion
(method-specs §1, §6.1, §6.2; decisions in src/attention/sparse_attention.h), written from the
spec, not from the engine's code. Float64 throughout; torch only loads checkpoints.

It writes the fixtures of tests/backend/sparse_attention_test.cpp and
tests/decode/sparse_trajectory_test.cpp:

  * random/<case>/: random queries, keys, values and a visibility mask of one attention call, the
    selected index sets of each selector per KV head, their scores, and the gathered attention
    output through each selection;
  * forwards.json (+ .npy logits): the sdar-tiny fixture model, prefilled, then one block's
    selecting forward and a later forward attending through the selection, per selector: the
    sets of every (layer, KV head) and the logits;
  * trajectories.json: greedy decoding trajectories (canvas after every forward) of the embedded
    models/tiny-block (SDAR) and of the fast-dllm-v2-tiny fixture with each selector on, k small
    enough that the selection matters.

    /work/refenv/bin/python tools/reference_sparse_attention.py --out tests/fixtures/sparse
"""
import argparse
import json
import os

import numpy as np

NEG_INF = float("-inf")


# ---------------------------------------------------------------- selection (one KV head)
def query_rows(n_rows, select_queries):
    """MAGE's query subset: all rows, or `select_queries` rows spread evenly over the block."""
    if select_queries <= 0 or select_queries >= n_rows:
        return list(range(n_rows))
    return [(2 * i + 1) * n_rows // (2 * select_queries) for i in range(select_queries)]


def mean_softmax_scores(q, k, n_prefix, rows, visible, prefix_only):
    """q: [n_q, G, d]; k: [n_k, d]; visible: [n_q, n_k] bool. Mean over rows and heads of each
    row's softmax (over the prefix keys only, or every visible key), restricted to the prefix."""
    d = q.shape[-1]
    n_norm = n_prefix if prefix_only else k.shape[0]
    acc = np.zeros(n_prefix)
    for r in rows:
        s = q[r] @ k[:n_norm].T / np.sqrt(d)  # [G, n_norm]
        s = np.where(visible[r, :n_norm][None, :], s, NEG_INF)
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        acc += p[:, :n_prefix].sum(axis=0)
    return acc / (len(rows) * q.shape[1])


def top_k(scores, k):
    """Indices of the k largest scores (ties: lower index first), ascending."""
    order = sorted(range(len(scores)), key=lambda j: (-scores[j], j))
    return sorted(order[:k])


def quest_scores(q, k, n_prefix, page):
    """Per page: mean over every row and head of sum_d max(q_d * max_d, q_d * min_d)."""
    out = []
    for p0 in range(0, n_prefix, page):
        kp = k[p0:min(n_prefix, p0 + page)]
        mx, mn = kp.max(axis=0), kp.min(axis=0)
        u = np.maximum(q * mx, q * mn).sum(axis=-1)  # [n_q, G]
        out.append(u.mean())
    return np.array(out)


def select(method, q, k, n_prefix, visible, budget, page=16, select_queries=0):
    """One KV head's selection: (slots or None for dense, scores or None)."""
    if n_prefix <= budget:
        return None, None
    if method == "quest":
        sc = quest_scores(q, k, n_prefix, page)
        pages = top_k(sc, max(1, budget // page))
        return [j for p in pages for j in range(p * page, min(n_prefix, (p + 1) * page))], sc
    rows = query_rows(q.shape[0], select_queries if method == "mage" else 0)
    sc = mean_softmax_scores(q, k, n_prefix, rows, visible, prefix_only=(method == "mage"))
    return top_k(sc, budget), sc


def key_columns(sel, sel_prefix, n_prefix, n_k):
    """Columns a KV head attends: its selected prefix slots (all when dense), prefix keys added
    after the selection, and the block's own keys."""
    cols = list(range(sel_prefix)) if sel is None else list(sel)
    return cols + list(range(sel_prefix, n_k))


def attend(q, k, v, visible, cols):
    """q: [n_q, G, d]; k, v: [n_k, d]; exact softmax attention over the given key columns."""
    d = q.shape[-1]
    kc, vc, vis = k[cols], v[cols], visible[:, cols]
    s = np.einsum("qgd,kd->qgk", q, kc) / np.sqrt(d)
    s = np.where(vis[:, None, :], s, NEG_INF)
    out = np.zeros(q.shape)
    for i in range(q.shape[0]):
        if not vis[i].any():
            continue
        p = np.exp(s[i] - s[i].max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        out[i] = p @ vc
    return out


# ---------------------------------------------------------------- random attention fixtures
def random_case(rng, name, out_dir, n_q, n_prefix, heads, kv_heads, d, budget, page, select_q):
    n_k = n_prefix + n_q
    q = rng.standard_normal((n_q, heads * d)).astype(np.float32)
    k = (rng.standard_normal((n_k, kv_heads * d)) * 1.5).astype(np.float32)
    v = rng.standard_normal((n_k, kv_heads * d)).astype(np.float32)
    # Block-causal-like visibility: the prefix is seen by every row, the block by a random half
    # of the rows' columns (so masking inside the normaliser matters for SparseD).
    vis = np.ones((n_q, n_k), dtype=bool)
    vis[:, n_prefix:] = rng.random((n_q, n_q)) < 0.6
    vis[np.arange(n_q), n_prefix + np.arange(n_q)] = True
    g = heads // kv_heads
    meta = dict(n_q=n_q, n_prefix=n_prefix, heads=heads, kv_heads=kv_heads, head_dim=d, k=budget,
                page_size=page, select_queries=select_q, methods={})
    case_dir = os.path.join(out_dir, "random", name)
    os.makedirs(case_dir, exist_ok=True)
    np.save(os.path.join(case_dir, "q.npy"), q)
    np.save(os.path.join(case_dir, "k.npy"), k)
    np.save(os.path.join(case_dir, "v.npy"), v)
    np.save(os.path.join(case_dir, "visible.npy"), vis.astype(np.int32))
    qd, kd, vd = (q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    for method in ("mage", "quest", "sparsed"):
        sets, out = [], np.zeros((n_q, heads * d))
        scores = []
        for h in range(kv_heads):
            qh = qd[:, h * g * d:(h + 1) * g * d].reshape(n_q, g, d)
            kh, vh = kd[:, h * d:(h + 1) * d], vd[:, h * d:(h + 1) * d]
            sel, sc = select(method, qh, kh, n_prefix, vis, budget, page, select_q)
            sets.append(sel)
            scores.append([] if sc is None else sc.tolist())
            o = attend(qh, kh, vh, vis, key_columns(sel, n_prefix, n_prefix, n_k))
            out[:, h * g * d:(h + 1) * g * d] = o.reshape(n_q, g * d)
        np.save(os.path.join(case_dir, f"out_{method}.npy"), out.astype(np.float32))
        meta["methods"][method] = dict(sets=sets, scores=scores)
    # Exact attention (every key): the output a dense selection must reproduce.
    out = np.zeros((n_q, heads * d))
    for h in range(kv_heads):
        qh = qd[:, h * g * d:(h + 1) * g * d].reshape(n_q, g, d)
        o = attend(qh, kd[:, h * d:(h + 1) * d], vd[:, h * d:(h + 1) * d], vis, list(range(n_k)))
        out[:, h * g * d:(h + 1) * g * d] = o.reshape(n_q, g * d)
    np.save(os.path.join(case_dir, "out_exact.npy"), out.astype(np.float32))
    json.dump(meta, open(os.path.join(case_dir, "case.json"), "w"))


# ---------------------------------------------------------------- a model with a KV cache
class NumpyModel:
    """SDAR (Qwen3: q/k-norm) and Fast-dLLM v2 (Qwen2: q/k/v bias) forwards over a KV cache,
    float64, with per-layer sparse attention hooks."""

    def __init__(self, model_dir):
        import torch
        from safetensors.torch import load_file
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.cfg = cfg
        idx = os.path.join(model_dir, "model.safetensors.index.json")
        tensors = {}
        if os.path.exists(idx):
            for shard in sorted(set(json.load(open(idx))["weight_map"].values())):
                tensors.update(load_file(os.path.join(model_dir, shard)))
        else:
            tensors = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {n: t.to(torch.float64).numpy() for n, t in tensors.items()}
        self.family = "sdar" if cfg["model_type"] == "sdar" else "fast_dllm_v2"
        self.L = cfg["num_hidden_layers"]
        self.H, self.Hkv, self.d = (cfg["num_attention_heads"], cfg["num_key_value_heads"],
                                    cfg["head_dim"])
        self.eps = cfg["rms_norm_eps"]
        self.mask_id = cfg["mask_token_id"]
        self.block = cfg.get("block_size", cfg.get("bd_size"))
        if cfg.get("tie_word_embeddings"):
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.inv_freq = 1.0 / (cfg["rope_theta"] ** (np.arange(0, self.d, 2) / self.d))
        self.reset()

    def reset(self):
        self.K = [np.zeros((0, self.Hkv, self.d)) for _ in range(self.L)]
        self.V = [np.zeros((0, self.Hkv, self.d)) for _ in range(self.L)]
        self.pos = []
        self.sets = {}  # (layer, kv head) -> (slots or None, prefix length at selection)

    def rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x, positions):  # x: [n, heads, d]
        f = np.asarray(positions, dtype=np.float64)[:, None] * self.inv_freq[None, :]
        cos, sin = np.cos(f)[:, None, :], np.sin(f)[:, None, :]
        half = self.d // 2
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    def forward(self, tokens, positions, append, sparse=None, want_selection=False):
        """One forward of `tokens` after the cached prefix, block-causal. Returns (logits,
        selection {(layer, head): slots or None}). sparse: dict(select=None|method,
        attend=bool, k, exact_layers, select_queries, page_size, keep=True)."""
        W, p = self.w, "model.layers.{}."
        n, N = len(tokens), len(self.pos)
        x = W["model.embed_tokens.weight"][tokens]
        blk = np.asarray(self.pos + list(positions)) // self.block
        vis = blk[None, :] <= (np.asarray(positions) // self.block)[:, None]  # [n, N + n]
        chosen = {}
        G = self.H // self.Hkv
        for li in range(self.L):
            pre = p.format(li)
            h = self.rms(x, W[pre + "input_layernorm.weight"])
            q = h @ W[pre + "self_attn.q_proj.weight"].T
            k = h @ W[pre + "self_attn.k_proj.weight"].T
            v = h @ W[pre + "self_attn.v_proj.weight"].T
            if self.family == "fast_dllm_v2":
                q += W[pre + "self_attn.q_proj.bias"]
                k += W[pre + "self_attn.k_proj.bias"]
                v += W[pre + "self_attn.v_proj.bias"]
            q, k, v = (q.reshape(n, self.H, self.d), k.reshape(n, self.Hkv, self.d),
                       v.reshape(n, self.Hkv, self.d))
            if self.family == "sdar":
                q = self.rms(q, W[pre + "self_attn.q_norm.weight"])
                k = self.rms(k, W[pre + "self_attn.k_norm.weight"])
            q, k = self.rope(q, positions), self.rope(k, positions)
            Kall = np.concatenate([self.K[li], k], 0)
            Vall = np.concatenate([self.V[li], v], 0)
            if append:
                self.K[li], self.V[li] = Kall, Vall
            att = np.zeros((n, self.H, self.d))
            sparse_layer = sparse is not None and li >= sparse["exact_layers"]
            for hk in range(self.Hkv):
                qh = q[:, hk * G:(hk + 1) * G]
                kh, vh = Kall[:, hk], Vall[:, hk]
                cols = list(range(N + n))
                if sparse_layer and sparse.get("select"):
                    sel, _ = select(sparse["select"], qh, kh, N, vis, sparse["k"],
                                    sparse["page_size"], sparse["select_queries"])
                    chosen[(li, hk)] = sel
                    if sparse.get("keep", True):
                        self.sets[(li, hk)] = (sel, N)
                if sparse_layer and sparse.get("attend"):
                    sel, sel_prefix = self.sets[(li, hk)]
                    cols = key_columns(sel, sel_prefix, N, N + n)
                att[:, hk * G:(hk + 1) * G] = attend(qh, kh, vh, vis, cols)
            x = x + att.reshape(n, self.H * self.d) @ W[pre + "self_attn.o_proj.weight"].T
            h = self.rms(x, W[pre + "post_attention_layernorm.weight"])
            g = h @ W[pre + "mlp.gate_proj.weight"].T
            u = h @ W[pre + "mlp.up_proj.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ W[pre + "mlp.down_proj.weight"].T
        if append:
            self.pos += list(positions)
        logits = self.rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T
        return logits, chosen


# ---------------------------------------------------------------- sparse schedules (decoders)
class Schedule:
    """When forwards select and attend (src/attention/sparse_schedule.h's contract, from the
    spec: MAGE per block, Quest every forward, SparseD capture at int(total * fraction) + 1)."""

    def __init__(self, sp, total_steps):
        self.sp, self.selected_block, self.denoise_steps, self.captured = sp, -1, 0, False
        self.capture = int(total_steps * sp.get("dense_fraction", 0.2)) + 1

    def step(self, block, denoise):
        sp = self.sp
        base = dict(k=sp["k"], exact_layers=sp["exact_layers"], page_size=sp.get("page_size", 16),
                    select_queries=sp.get("select_queries", 0), select=None, attend=False)
        if sp["method"] == "mage":
            if block != self.selected_block:
                self.selected_block = block
                return dict(base, select="mage")
            return dict(base, attend=True)
        if sp["method"] == "quest":
            return dict(base, select="quest", attend=True)
        # sparsed
        if not self.captured and not denoise:
            return None
        idx = self.denoise_steps if denoise else -1
        if denoise:
            self.denoise_steps += 1
        if self.captured:
            return dict(base, attend=True)
        if idx < self.capture:
            return None
        self.captured = True
        return dict(base, select="sparsed")


def greedy(row, mask_id):
    row = row.copy()
    row[mask_id] = NEG_INF
    p = np.exp(row - row.max())
    p /= p.sum()
    t = int(np.argmax(p))
    return t, float(p[t])


def final_tokens(x, P, mask_id):
    out = []
    for t in x[P:]:
        if t == mask_id:
            break
        out.append(t)
    return out


def sdar_trajectory(m, prompt, max_tokens, B, sp):
    """SDAR greedy block diffusion, one step per token, low_confidence_dynamic threshold 0.9."""
    m.reset()
    m.block = B  # the decoder's blocks set the block-causal rule
    P, S, thr = len(prompt), B, 0.9
    nblk = (P + max_tokens + B - 1) // B
    x = list(prompt) + [m.mask_id] * (nblk * B - P)
    sched = Schedule(sp, S * (nblk - P // B))
    canvases = []
    first = P // B
    if first > 0:
        m.forward(x[:first * B], list(range(first * B)), append=True)
        canvases.append(x[P:max(P, (first + 1) * B)])
    for b in range(first, nblk):
        lo, hi = b * B, (b + 1) * B
        step = 0
        while True:
            masked = [i for i in range(lo, hi) if x[i] == m.mask_id]
            if not masked:
                m.forward(x[lo:hi], list(range(lo, hi)), append=True, sparse=sched.step(b, False))
                canvases.append(x[P:max(P, min(len(x), (b + 2) * B))])
                break
            logits, _ = m.forward(x[lo:hi], list(range(lo, hi)), append=False,
                                  sparse=sched.step(b, True))
            dec = {i: greedy(logits[i - lo], m.mask_id) for i in masked}
            k = 1  # transfer_schedule(B, B): one token per step
            by_conf = sorted(masked, key=lambda i: (-dec[i][1], i))
            high = [i for i in masked if dec[i][1] > thr]
            for i in (high if len(high) >= k else by_conf[:k]):
                x[i] = dec[i][0]
            step += 1
            canvases.append(x[P:max(P, hi)])
            if len(final_tokens(x, P, m.mask_id)) >= max_tokens:
                return dict(ids=final_tokens(x, P, m.mask_id)[:max_tokens], canvases=canvases)
    return dict(ids=final_tokens(x, P, m.mask_id)[:max_tokens], canvases=canvases)


def fast_trajectory(m, prompt, max_tokens, B, sb, sp):
    """Fast-dLLM v2 greedy: sub-blocks of sb, threshold 0.9, right-shifted logits."""
    m.reset()
    m.block = B  # the decoder's blocks set the block-causal rule
    P, thr = len(prompt), 0.9
    x = list(prompt)
    sched = Schedule(sp, B * ((P + max_tokens + B - 1) // B - P // B))
    canvases = []
    cached = 0
    if P >= B:
        cached = (P // B) * B
        logits, _ = m.forward(x[:cached], list(range(cached)), append=True)
        if P % B == 0:
            x.append(greedy(logits[cached - 1], m.mask_id)[0])
    x += [m.mask_id] * (B - len(x) % B)
    if cached:
        canvases.append(x[P:])
    while len(final_tokens(x, P, m.mask_id)) < max_tokens:
        lo = cached
        blk = lo // B
        if m.mask_id not in x[lo:lo + B]:
            logits, _ = m.forward(x[lo:lo + B], list(range(lo, lo + B)), append=True,
                                  sparse=sched.step(blk, False))
            x.append(greedy(logits[B - 1], m.mask_id)[0])
            cached += B
            x += [m.mask_id] * (B - len(x) % B)
        else:
            first = next(j for j in range(B) if x[lo + j] == m.mask_id)
            s0 = (first // sb) * sb
            logits, _ = m.forward(x[lo:lo + B], list(range(lo, lo + B)), append=False,
                                  sparse=sched.step(blk, True))
            best, best_conf = None, -1.0
            for j in range(s0, s0 + sb):
                if x[lo + j] != m.mask_id:
                    continue
                tok, conf = greedy(logits[max(j - 1, 0)], m.mask_id)
                if conf > best_conf:
                    best, best_conf = (j, tok), conf
                if conf > thr:
                    x[lo + j] = tok
            x[lo + best[0]] = best[1]
        canvases.append(x[P:])
    return dict(ids=final_tokens(x, P, m.mask_id)[:max_tokens], canvases=canvases)


# ---------------------------------------------------------------- fixture-model forwards
def forward_cases(m, rng, out_dir):
    """Prefill, a selecting forward of one block, then a forward attending through the sets."""
    cases = []
    B, P = m.block, 40
    prompt = rng.integers(0, m.mask_id, P).tolist()
    for method in ("mage", "quest", "sparsed"):
        sp = dict(k=12, exact_layers=0, page_size=4, select_queries=2 if method == "mage" else 0)
        m.reset()
        m.forward(prompt, list(range(P)), append=True)
        block = [m.mask_id] * B
        pos = list(range(P, P + B))
        logits1, sel = m.forward(block, pos, append=False, sparse=dict(sp, select=method))
        later = [int(t) for t in rng.integers(0, m.mask_id, B)]
        later[1] = m.mask_id
        logits2, _ = m.forward(later, pos, append=False, sparse=dict(sp, attend=True))
        name = f"{method}"
        np.save(os.path.join(out_dir, f"forward_{name}_select.npy"), logits1.astype(np.float32))
        np.save(os.path.join(out_dir, f"forward_{name}_attend.npy"), logits2.astype(np.float32))
        sets = [[None if sel[(l, h)] is None else sel[(l, h)] for h in range(m.Hkv)]
                for l in range(m.L)]
        cases.append(dict(method=method, params=sp, prompt=prompt, block=block, later=later,
                          positions=pos, sets=sets, select_logits=f"forward_{name}_select.npy",
                          attend_logits=f"forward_{name}_attend.npy"))
    json.dump(dict(model="sdar-tiny", cases=cases), open(os.path.join(out_dir, "forwards.json"), "w"))


def trajectory_cases(repo, rng):
    out = []
    tiny = NumpyModel(os.path.join(repo, "models", "tiny-block"))
    prompt = rng.integers(0, 4000, 61).tolist()
    for method in ("mage", "quest", "sparsed"):
        sp = dict(method=method, k=16, exact_layers=2, page_size=4,
                  select_queries=3 if method == "mage" else 0, dense_fraction=0.2)
        res = sdar_trajectory(tiny, prompt, 12, 4, sp)
        out.append(dict(model="tiny-block", model_dir="models/tiny-block", prompt=prompt,
                        max_tokens=12, block_length=4, sparse=sp, expected=res))
    fast = NumpyModel(os.path.join(repo, "tests", "fixtures", "models", "fast-dllm-v2-tiny"))
    prompt = rng.integers(0, 250, 45).tolist()
    for method in ("mage", "quest", "sparsed"):
        sp = dict(method=method, k=8, exact_layers=0, page_size=4,
                  select_queries=0, dense_fraction=0.2)
        res = fast_trajectory(fast, prompt, 20, 8, 4, sp)
        out.append(dict(model="fast-dllm-v2-tiny", model_dir="fast-dllm-v2-tiny", prompt=prompt,
                        max_tokens=20, block_length=8, sub_block_length=4, sparse=sp,
                        expected=res))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/sparse")
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(20261125)
    random_case(rng, "gqa4_n70", a.out, n_q=8, n_prefix=70, heads=8, kv_heads=2, d=16, budget=20,
                page=8, select_q=3)
    random_case(rng, "gqa2_n131", a.out, n_q=6, n_prefix=131, heads=4, kv_heads=2, d=32,
                budget=37, page=16, select_q=0)
    random_case(rng, "dense_n12", a.out, n_q=5, n_prefix=12, heads=2, kv_heads=1, d=8, budget=12,
                page=4, select_q=0)
    m = NumpyModel(os.path.join(a.repo, "tests", "fixtures", "models", "sdar-tiny"))
    forward_cases(m, rng, a.out)
    json.dump(dict(reference="tools/reference_sparse_attention.py (NumPy float64)",
                   cases=trajectory_cases(a.repo, rng)),
              open(os.path.join(a.out, "trajectories.json"), "w"))


if __name__ == "__main__":
    main()
