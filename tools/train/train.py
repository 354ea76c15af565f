#!/usr/bin/env python3
"""Trains the embedded default models (issue #10): tiny-block (SDAR format, block diffusion + AR),
tiny-full (LLaDA format, masked diffusion) and tiny-causal (WeDLM format, topological reordering
with dual-stream masking + AR). Needs torch and numpy only; reads the files of make_data.py.

    python3 tools/train/train.py --model tiny-block --data build/train-data --out OUT [--time-budget 150]
    python3 tools/train/train.py --model all ...           (the three one after the other)

Writes OUT/<model>/ : the checkpoint in the family's on-disk format (model.safetensors bf16,
config.json, generation_config.json, tokenizer files), log.json (config, loss curve, throughput,
quick PyTorch-side accuracy), loss.png when matplotlib is present, and state.pt (fp32 weights,
optimizer, step) for --resume.

Training samples. A batch is rows of L tokens; a row holds packed *segments* (a prose window split at
<|endoftext|>, or chat samples). Every segment has its own positions (0, 1, ...) and attends only
within itself, so a packed chat sample sees exactly what it sees at inference. Chat samples are
`<|im_start|>user\\nQ<|im_end|>\\n<|im_start|>assistant\\nA<|im_end|>` with the loss on the answer
(A, <|im_end|> and any trailing <|endoftext|> padding); prose has the loss everywhere. Logits are
position-aligned in all three families: the output at a [MASK] predicts the token at that position.

Objectives (attention is a boolean mask per row; no physical reordering is needed because RoPE
uses logical positions and the mask encodes the physical order):
  tiny-block   two streams [noisy | clean], both with the segment's positions. Per row a block size
               B: 4 (block diffusion) or 1 (AR). Clean queries: block-causal over clean keys (what
               the prefix KV cache holds at inference). Noisy queries of block b: clean keys of blocks
               < b and noisy keys of block b (bidirectional inside the block). B=4: per block a mask
               ratio t ~ U(0,1), each answer token masked w.p. t; loss = CE on masked tokens (MAGE
               Eq. 4, mean over masked tokens). B=1 with every answer token masked is exactly the
               AR decoder's query (a [MASK] at the next position over a causal cache) and S2D2's
               verifier, so block size 1 works too. Only the noisy rows of blocks holding an
               answer token are built (two_streams(); check_two_streams.py shows the same loss).
  tiny-full    one stream, bidirectional inside the segment, t ~ U(0,1) per segment, loss = sum of
               CE/t over masked tokens / number of answer tokens (WeDLM Eq. 3, LLaDA). Answers are
               followed by 0-24 <|endoftext|> (LLaDA SFT padding) so the model fills a canvas.
  tiny-causal  WeDLM §4: [memory (clean) | prediction], shared positions. Memory: causal. Prediction
               stream in blocks of B (16 or 8): per block ratio g ~ U(0,1), masked tokens reordered
               after the observed ones (physical order inside the block: observed by position, then
               masks by position), causal in that physical order, plus memory keys of earlier blocks.
               Loss = CE/g on masked tokens (Eq. 10) + the WeDLM auxiliary AR loss (next-token CE on
               the memory stream). Rows with B=1, g=1 train the engine's AR decoder (a [MASK] at the
               next position under causal attention).
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks as T  # noqa: E402
from model import ModelConfig, TinyLM, save_checkpoint  # noqa: E402

MODELS = {
    "tiny-block": dict(family="sdar", block_size=4),
    "tiny-full": dict(family="llada"),
    "tiny-causal": dict(family="wedlm"),
    # Issue 21's long-context model: SDAR's objective, trained on needle retrieval up to 16K
    # tokens (gpu_train_long.sh); not one of the embedded defaults (`--model all` skips it).
    "tiny-long": dict(family="sdar", block_size=4),
}
DEFAULT_MODELS = ["tiny-block", "tiny-full", "tiny-causal"]


def is_block_family(model_name):
    """SDAR's two-stream block diffusion (tiny-block, tiny-long)."""
    return MODELS[model_name]["family"] == "sdar"


def parse_mix(text):
    """--mix "needle=0.6,kv=0.2": task weights replacing tasks.TRAIN_MIX (empty: TRAIN_MIX)."""
    if not text:
        return T.TRAIN_MIX
    mix = {}
    for item in text.split(","):
        name, _, w = item.partition("=")
        if not hasattr(T.TaskGen, name) or not w:
            raise SystemExit(f"--mix: '{item}' is not task=weight with a task of tasks.py")
        mix[name] = float(w)
    return mix


# ---------------------------------------------------------------------------------------------
# Data

class Data:
    """Everything make_data.py wrote, in memory."""

    def __init__(self, root):
        import lzma
        self.root = root

        def u16(name):
            with lzma.open(os.path.join(root, name)) as fh:
                return np.frombuffer(fh.read(), dtype="<u2").astype(np.int32)

        # A split's prose / chat files may be left out when no batch draws them (--prose-frac 0
        # --chat-prose-frac 0: a task-only data folder small enough to travel with a checkpoint).
        self.prose = {split: u16(f"prose_{split}.u16.xz") for split in ["train", "val"]
                      if os.path.exists(os.path.join(root, f"prose_{split}.u16.xz"))}
        self.chat = {}
        for split in ["train", "val"]:
            if not os.path.exists(os.path.join(root, f"chat_{split}.npz")):
                continue
            z = np.load(os.path.join(root, f"chat_{split}.npz"))
            toks, pl, al = z["tokens"].astype(np.int32), z["prompt_len"], z["answer_len"]
            off = np.concatenate([[0], np.cumsum(pl + al)])
            self.chat[split] = (toks, pl, al, off)
        with open(os.path.join(root, "fragments.json")) as fh:
            fr = json.load(fh)
        self.words, self.frags = fr["words"], fr["fragments"]
        with open(os.path.join(root, "meta.json")) as fh:
            self.meta = json.load(fh)
        self.ids = self.meta["special_ids"]
        self.heldout_prompts = set()
        with open(os.path.join(root, "heldout_prompts.txt")) as fh:
            for line in fh:
                self.heldout_prompts.add(json.loads(line))
        with open(os.path.join(root, "tokenizer", "tokenizer.json")) as fh:
            vocab = json.load(fh)["model"]["vocab"]
        # Byte-level decoding without the tokenizers package (only for the quick accuracy check).
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        cs, n = bs[:], 0
        for x in range(256):
            if x not in bs:
                bs.append(x)
                cs.append(256 + n)
                n += 1
        char_to_byte = {chr(c): b for b, c in zip(bs, cs)}
        self.id_to_bytes = {i: bytes(char_to_byte[ch] for ch in tok) for tok, i in vocab.items()}
        self.user = self.frags[T.USER_PREFIX]
        self.asst = self.frags[T.ASSISTANT_PREFIX]
        self.end = self.frags[T.END]

    def decode(self, ids):
        return b"".join(self.id_to_bytes.get(i, b"") for i in ids).decode("utf-8", errors="replace")

    def task_ids(self, prompt, answer):
        """(prompt ids incl. chat prefix/suffix, answer ids incl. <|im_end|>) or None if a fragment is unknown."""
        try:
            p = self.user + [i for f in prompt for i in self.frags[f]] + self.asst
            a = [i for f in answer for i in self.frags[f]] + self.end
        except KeyError:
            return None
        return p, a


class BatchMaker:
    """Builds batch `step` as a pure function of (seed, step): resumable, independent of workers."""

    def __init__(self, data: Data, model_name, args, split="train"):
        self.d = data
        self.model = model_name
        self.a = args
        self.split = split
        self.eot = data.ids["<|endoftext|>"]
        self.rejected = 0
        self.mix = parse_mix(args.mix)

    def _prose_segments(self, rng, L):
        stream = self.d.prose[self.split]
        s = int(rng.integers(0, len(stream) - L))
        w = stream[s:s + L]
        segs = []
        cut = np.flatnonzero(w == self.eot)
        start = 0
        for c in list(cut) + [L - 1]:
            if c + 1 > start:
                segs.append((w[start:c + 1], np.ones(c + 1 - start, bool)))
            start = c + 1
        return segs

    def _chat_prose(self, rng):
        toks, pl, al, off = self.d.chat[self.split]
        i = int(rng.integers(0, len(pl)))
        t = toks[off[i]:off[i + 1]]
        el = np.zeros(len(t), bool)
        el[pl[i]:] = True
        return t, el

    def _long_sample(self, gen, rng, L):
        """A long row's sample: key-value records, or (--long-task needle) needles in a haystack
        of up to L tokens (~6.6 a sentence; a draw that comes out longer is drawn again shorter)."""
        if self.a.long_task == "kv":
            return gen.kv(pairs=(self.a.long_kv_min, self.a.long_kv_max))
        most = max(8, int((L - 96) / 7))
        return gen.needle(sentences=(max(4, most // 8), most), needles=(1, 4))

    def _task(self, gen, rng, long_kv=False, L=0):
        for _ in range(20):
            if long_kv:
                p, a = self._long_sample(gen, rng, L)
            else:
                _, (p, a) = gen.sample_mix(self.mix)
            if "".join(p) in self.d.heldout_prompts:      # the held-out split stays untouched
                self.rejected += 1
                continue
            ids = self.d.task_ids(p, a)
            if ids is None:
                self.rejected += 1
                continue
            pi, ai = ids
            if long_kv and len(pi) + len(ai) + 4 > L:  # the question must not be cut off
                self.rejected += 1
                continue
            t = np.asarray(pi + ai, np.int32)
            el = np.zeros(len(t), bool)
            el[len(pi):] = True
            return t, el
        raise RuntimeError("could not draw a task sample")

    def _finish_chat(self, t, el, rng, row_block):
        """Family-specific answer padding with <|endoftext|> (part of the answer, loss on it)."""
        pad = 0
        if self.model == "tiny-full":
            pad = int(rng.integers(0, 25))
        elif self.model == "tiny-causal":
            pad = int(rng.integers(0, 9))
        elif is_block_family(self.model) and row_block > 1:
            pad = (-len(t)) % row_block          # complete the answer's last block
        if pad:
            t = np.concatenate([t, np.full(pad, self.eot, np.int32)])
            el = np.concatenate([el, np.ones(pad, bool)])
        return t, el

    def row_block(self, rng):
        if is_block_family(self.model):
            return 1 if rng.random() < self.a.ar_frac else 4
        if self.model == "tiny-causal":
            return 1 if rng.random() < self.a.ar_frac else int(rng.choice([8, 16]))
        return 0

    def batch(self, step, long=False):
        a = self.a
        seed = (a.seed * 1_000_003 + step * 7 + (1 if long else 0)) % (2 ** 63)
        if self.split != "train":
            seed += 12345
        rng = np.random.default_rng(seed)
        gen = T.TaskGen(self.d.words, seed=int(rng.integers(0, 2 ** 62)))
        L = a.long_len if long else a.seq_len
        R = a.long_rows if long else a.rows
        tokens = np.full((R, L), self.eot, np.int32)
        pos = np.zeros((R, L), np.int32)
        seg = np.full((R, L), -1, np.int32)
        elig = np.zeros((R, L), bool)
        blocks = np.zeros(R, np.int32)
        for r in range(R):
            B = self.row_block(rng)
            blocks[r] = B
            segs = []
            if long:      # one long key-value recall sample, the rest of the row filled with chat samples
                t, el = self._finish_chat(*self._task(gen, rng, long_kv=True, L=L), rng, B)
                segs = [(t[:L], el[:L])]  # only trailing <|endoftext|> padding can reach past L
            elif rng.random() < a.prose_frac:
                segs = self._prose_segments(rng, L)     # fills the row
            used = sum(len(t) for t, _ in segs)
            misses = 0
            while used < L and misses < 4:
                if rng.random() < a.chat_prose_frac:
                    t, el = self._chat_prose(rng)
                else:
                    t, el = self._task(gen, rng)
                t, el = self._finish_chat(t, el, rng, B)
                if used + len(t) > L:
                    misses += 1
                    continue
                segs.append((t, el))
                used += len(t)
            o = 0
            for i, (t, el) in enumerate(segs):
                n = len(t)
                tokens[r, o:o + n] = t
                pos[r, o:o + n] = np.arange(n)
                seg[r, o:o + n] = i
                elig[r, o:o + n] = el
                o += n
        return dict(tokens=tokens, pos=pos, seg=seg, elig=elig, blocks=blocks)


class BatchStream(torch.utils.data.IterableDataset):
    """Worker w makes batches start+w, start+w+n, ...; DataLoader interleaves them in step order."""

    def __init__(self, maker, start, total, long_every):
        self.maker, self.start, self.total, self.long_every = maker, start, total, long_every

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, n = (info.id, info.num_workers) if info else (0, 1)
        for step in range(self.start + w, self.total, n):
            long = self.long_every > 0 and step % self.long_every == self.long_every - 1
            yield step, self.maker.batch(step, long=long)


# ---------------------------------------------------------------------------------------------
# Objectives

def two_streams(tok, pos, seg, blk, run, elig, masked, noisy, flex_pad=0):
    """SDAR's [noisy | clean] layout. A noisy row whose (segment, block) holds no answer token
    carries no loss and only its own block's noisy rows see it, so only the live blocks' noisy
    rows are kept (a long needle row is mostly prompt: its sequence goes from 2L to ~L rows).
    flex_pad > 0: the mask is a flex_attention BlockMask of the same rule (two_stream_block_mask)
    and the noisy rows are padded to a multiple of flex_pad (few shapes for torch.compile)."""
    R, L = tok.shape
    # int8: CUDA has no bool scatter_reduce.
    live_run = torch.zeros(R, L, dtype=torch.int8, device=tok.device).scatter_reduce(
        1, run, elig.to(torch.int8), reduce="amax")
    live = torch.gather(live_run, 1, run).bool() & (seg >= 0)
    n_live = live.sum(1)
    N = max(int(n_live.max()), 1)
    if flex_pad:
        N = min(L, -(-N // flex_pad) * flex_pad)
    order = torch.argsort((~live).to(torch.int8), dim=1, stable=True)[:, :N]  # live rows first
    kept = torch.arange(N, device=tok.device)[None, :] < n_live[:, None]

    def take(x):  # the kept noisy rows of a [R, L] tensor
        return torch.gather(x, 1, order)

    seg_n = torch.where(kept, take(seg), torch.full_like(order, -2))  # padding: its own segment
    blk_n = take(blk)
    if flex_pad:
        # Padding rows in groups of 16 (their own "blocks"), so no 128-row tile of them is dense.
        pad_blk = -1 - torch.arange(N, device=tok.device)[None, :].expand(R, N) // 16
        blk_n = torch.where(kept, blk_n, pad_blk)
        mask = two_stream_block_mask(seg_n, blk_n, seg, blk)
    else:
        mask = dense_two_stream_mask(seg_n, blk_n, seg, blk)
    masked_n = take(masked) & kept
    loss_rows = torch.cat([masked_n, torch.zeros_like(masked)], 1)
    weights = loss_rows.float() / masked.sum().clamp_min(1)
    return dict(tokens=torch.cat([take(noisy), tok], 1), positions=torch.cat([take(pos), pos], 1),
                mask=mask, loss_rows=loss_rows, targets=torch.cat([take(tok), tok], 1),
                weights=weights, n_loss=masked.sum())


def dense_two_stream_mask(seg_n, blk_n, seg, blk):
    """[R, N + L, N + L] bool: a noisy row sees its own block's noisy rows and the earlier blocks'
    clean rows of its segment; a clean row sees its segment's clean rows up to its own block."""
    R, N = seg_n.shape
    L = seg.shape[1]
    bj = blk[:, None, :]
    nn_ = (seg_n[:, :, None] == seg_n[:, None, :]) & (blk_n[:, :, None] == blk_n[:, None, :])
    nc = (seg_n[:, :, None] == seg[:, None, :]) & (bj < blk_n[:, :, None])
    cc = (seg[:, :, None] == seg[:, None, :]) & (bj <= blk[:, :, None])
    none = torch.zeros(R, L, N, dtype=torch.bool, device=seg.device)
    return torch.cat([torch.cat([nn_, nc], 2), torch.cat([none, cc], 2)], 1)


def two_stream_block_mask(seg_n, blk_n, seg, blk):
    """dense_two_stream_mask's rule as a flex_attention BlockMask over [noisy N | clean L]."""
    from torch.nn.attention.flex_attention import create_block_mask
    R, N = seg_n.shape
    S = torch.cat([seg_n, seg], 1)
    K = torch.cat([blk_n, blk], 1)

    def rule(b, h, q, k):
        q_noisy, k_noisy = q < N, k < N
        same_block = K[b, q] == K[b, k]
        earlier = K[b, k] < K[b, q]
        return (S[b, q] == S[b, k]) & ((q_noisy & k_noisy & same_block)
                                       | (q_noisy & ~k_noisy & earlier)
                                       | (~q_noisy & ~k_noisy & (earlier | same_block)))

    T = S.shape[1]
    return create_block_mask(rule, R, None, T, T, device=seg.device)


def noise_and_masks(model_name, b, mask_id, gen, device, flex_pad=0):
    """Returns model inputs and loss targets for one batch (tensors on device); flex_pad: see
    two_streams (SDAR only)."""
    tok = torch.as_tensor(b["tokens"], device=device, dtype=torch.long)
    pos = torch.as_tensor(b["pos"], device=device, dtype=torch.long)
    seg = torch.as_tensor(b["seg"], device=device, dtype=torch.long)
    elig = torch.as_tensor(b["elig"], device=device)
    Bk = torch.as_tensor(b["blocks"], device=device, dtype=torch.long)
    R, L = tok.shape
    u = torch.rand(R, L, device=device, generator=gen)

    if model_name == "tiny-full":
        # t per segment (pads: segment -1 -> no loss anyway).
        t_seg = torch.rand(R, L + 1, device=device, generator=gen).clamp_min(1e-3)
        t = torch.gather(t_seg, 1, (seg + 1).clamp_min(0))
        masked = elig & (u < t)
        inp = torch.where(masked, torch.full_like(tok, mask_id), tok)
        weight = torch.where(masked, 1.0 / t, torch.zeros_like(t))
        norm = elig.sum().clamp_min(1)
        same = seg[:, :, None] == seg[:, None, :]
        return dict(tokens=inp, positions=pos, mask=same, loss_rows=masked, targets=tok,
                    weights=weight / norm, n_loss=masked.sum())

    blk = pos // Bk[:, None].clamp_min(1)
    # One mask ratio per (segment, block): (segment, block) pairs are contiguous runs in a row.
    change = torch.ones_like(seg, dtype=torch.bool)
    change[:, 1:] = (seg[:, 1:] != seg[:, :-1]) | (blk[:, 1:] != blk[:, :-1])
    run = torch.cumsum(change.long(), 1) - 1
    ratio = torch.gather(torch.rand(R, L, device=device, generator=gen), 1, run).clamp_min(1e-3)
    ar_row = (Bk == 1)[:, None]
    ratio = torch.where(ar_row, torch.ones_like(ratio), ratio)
    masked = elig & (u < ratio)
    noisy = torch.where(masked, torch.full_like(tok, mask_id), tok)
    if is_block_family(model_name):
        return two_streams(tok, pos, seg, blk, run, elig, masked, noisy, flex_pad)

    bi, bj = blk[:, :, None], blk[:, None, :]
    same = seg[:, :, None] == seg[:, None, :]
    none = torch.zeros_like(same)

    # tiny-causal: [memory | prediction]; physical order in a prediction block = observed then masks.
    pi, pj = pos[:, :, None], pos[:, None, :]
    order = masked.long() * (L + 1) + pos
    mm = same & (pj <= pi)
    pm = same & (bj < bi)
    pp = same & (bi == bj) & (order[:, None, :] <= order[:, :, None])
    mask = torch.cat([torch.cat([mm, none], 2), torch.cat([pm, pp], 2)], 1)
    inp = torch.cat([tok, noisy], 1)
    positions = torch.cat([pos, pos], 1)
    # Diffusion loss on the prediction stream (Eq. 10, weight 1/g), normalised by answer tokens.
    w_pred = torch.where(masked, 1.0 / ratio, torch.zeros_like(ratio)) / elig.sum().clamp_min(1)
    # Auxiliary AR loss on the memory stream: output at i predicts token i+1 of the same segment.
    nxt_ok = torch.zeros_like(elig)
    nxt_ok[:, :-1] = elig[:, 1:] & (seg[:, 1:] == seg[:, :-1])
    nxt_tok = torch.zeros_like(tok)
    nxt_tok[:, :-1] = tok[:, 1:]
    w_mem = nxt_ok.float() * (0.5 / nxt_ok.sum().clamp_min(1))
    loss_rows = torch.cat([nxt_ok, masked], 1)
    targets = torch.cat([nxt_tok, tok], 1)
    weights = torch.cat([w_mem, w_pred], 1)
    return dict(tokens=inp, positions=positions, mask=mask, loss_rows=loss_rows, targets=targets,
                weights=weights, n_loss=masked.sum(), aux_rows=L)


def compute_loss(model, x, amp_dtype):
    with torch.autocast(device_type=x["tokens"].device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        h = model.hidden_states(x["tokens"], x["positions"], x["mask"])
        sel = x["loss_rows"].reshape(-1)
        hs = h.reshape(-1, h.shape[-1])[sel]
        logits = model.lm_head(hs).float()
    ce = F.cross_entropy(logits, x["targets"].reshape(-1)[sel], reduction="none")
    w = x["weights"].reshape(-1)[sel]
    loss = (ce * w).sum()
    stats = {}
    if "aux_rows" in x:  # split the WeDLM loss into its diffusion and AR parts for the log
        L = x["aux_rows"]
        col = torch.arange(x["loss_rows"].shape[1], device=sel.device).expand_as(x["loss_rows"]).reshape(-1)[sel]
        stats["ar_aux"] = ((ce * w)[col < L].sum() / 0.5).item() if (col < L).any() else 0.0
        stats["diffusion"] = (ce * w)[col >= L].sum().item()
    # Plain token-mean CE of the masked tokens (comparable across objectives).
    m = w > 0
    stats["ce_masked"] = ce[m].mean().item() if m.any() else 0.0
    return loss, stats


# ---------------------------------------------------------------------------------------------
# Quick PyTorch-side accuracy (the real evaluation is eval_heldout.py through our engine)

@torch.no_grad()
def quick_eval(model, model_name, data, device, amp_dtype, n=100, tasks=("add3", "sort", "kv_short")):
    model.eval()
    mask_id = data.ids["<|mask|>"]
    im_end = data.ids["<|im_end|>"]
    out = {}
    for task in tasks:
        rows = []
        with open(os.path.join(data.root, "heldout", f"{task}.jsonl")) as fh:
            for line in fh:
                rows.append(json.loads(line))
        rows = rows[:n]
        correct = 0
        for r in rows:
            ans = greedy_answer(model, model_name, r["prompt_ids"], mask_id, im_end, device, amp_dtype, max_new=12)
            correct += T.normalize_answer(data.decode(ans)) == T.normalize_answer(r["answer"])
        out[task] = correct / max(1, len(rows))
    model.train()
    return out


def greedy_answer(model, model_name, prompt, mask_id, im_end, device, amp_dtype, max_new):
    """AR mode for block/causal (a [MASK] at the next position, causal), iterative unmasking for full."""
    ac = dict(device_type=device.type, dtype=amp_dtype, enabled=amp_dtype is not None)
    if model_name == "tiny-full":
        seq = prompt + [mask_id] * max_new
        n = len(seq)
        for _ in range(max_new):
            toks = torch.tensor([seq], device=device)
            pos = torch.arange(n, device=device)[None]
            m = torch.ones(1, n, n, dtype=torch.bool, device=device)
            with torch.autocast(**ac):
                logits = model(toks, pos, m)[0].float()
            logits[:, mask_id] = -1e9
            p = logits.softmax(-1)
            conf, arg = p.max(-1)
            conf[torch.tensor(seq, device=device) != mask_id] = -1
            i = int(conf.argmax())
            if conf[i] < 0:
                break
            seq[i] = int(arg[i])
        ans = seq[len(prompt):]
    else:
        ans = []
        for _ in range(max_new):
            seq = prompt + ans + [mask_id]
            n = len(seq)
            toks = torch.tensor([seq], device=device)
            pos = torch.arange(n, device=device)[None]
            m = torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))[None]
            with torch.autocast(**ac):
                logits = model(toks, pos, m)[0, -1].float()
            logits[mask_id] = -1e9
            ans.append(int(logits.argmax()))
            if ans[-1] == im_end:
                break
    if im_end in ans:
        ans = ans[:ans.index(im_end)]
    return ans


# ---------------------------------------------------------------------------------------------

def lr_at(step, total, warmup, peak, floor_frac):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_frac + (1 - floor_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def train_one(name, args, data, device):
    torch.manual_seed(args.seed)
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    mc = ModelConfig(vocab_size=data.meta["vocab_size"], hidden=args.hidden, layers=args.layers, heads=args.heads,
                     kv_heads=args.kv_heads, head_dim=args.hidden // args.heads, inter=args.inter,
                     max_positions=args.max_positions, rope_theta=args.rope_theta, **MODELS[name])
    model = TinyLM(mc)
    if args.init:  # continue from a saved checkpoint's weights (a fresh optimizer and schedule)
        from model import from_family_tensor_names, read_checkpoint_tensors
        tensors = from_family_tensor_names(mc, read_checkpoint_tensors(args.init))
        model.load_state_dict({k: v.float() for k, v in tensors.items()})
        print(f"[{name}] weights from {args.init}", flush=True)
    model = model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    fused = device.type == "cuda"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)
    amp = torch.bfloat16 if (device.type == "cuda" and not args.fp32) else None
    maker = BatchMaker(data, name, args)
    val_maker = BatchMaker(data, name, args, split="val")
    mask_id = data.ids["<|mask|>"]
    log = {"model": name, "family": mc.family, "params": model.num_params(), "args": vars(args),
           "model_config": mc.__dict__, "device": str(device), "curve": [], "val": []}
    if device.type == "cuda":
        log["gpu"] = torch.cuda.get_device_name(device)
    start_step, total = 0, args.steps
    state_path = os.path.join(out, "state.pt")
    if args.resume and os.path.exists(state_path):
        st = torch.load(state_path, map_location=device, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start_step, total, log = st["step"], st["total"], st["log"]
        print(f"[{name}] resumed at step {start_step}/{total}", flush=True)
    print(f"[{name}] {mc.family}: {model.num_params() / 1e6:.2f}M parameters, device {device}", flush=True)

    budget = args.time_budget if start_step == 0 else 0
    if budget:
        total = None          # fixed after calibration
    t0 = time.time()
    loader = torch.utils.data.DataLoader(BatchStream(maker, start_step, total or args.max_steps, args.long_every),
                                         batch_size=None, num_workers=args.workers,
                                         prefetch_factor=4 if args.workers else None)
    tok_seen = 0
    run = {"loss": 0.0, "ce": 0.0, "n": 0, "extra": {}}
    t_last = time.time()
    t_calib = None
    for step, b in loader:
        gen = torch.Generator(device=device)
        gen.manual_seed(args.seed * 7919 + step)
        x = noise_and_masks(name, b, mask_id, gen, device, args.flex_pad)
        lr = lr_at(step, total or args.max_steps, args.warmup, args.lr, args.lr_floor)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, stats = compute_loss(model, x, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        tok_seen += int(b["tokens"].shape[0] * b["tokens"].shape[1])
        run["loss"] += loss.item()
        run["ce"] += stats["ce_masked"]
        run["n"] += 1
        for k, v in stats.items():
            if k != "ce_masked":
                run["extra"][k] = run["extra"].get(k, 0.0) + v
        # Time budget: time steps [calib, 2*calib) (after start-up), then fix the total so that training
        # ends inside the budget. Warm-up is longer than the calibration, so the schedule is unaffected.
        if total is None and step + 1 in (args.calib_steps, 2 * args.calib_steps):
            if device.type == "cuda":
                torch.cuda.synchronize()
            if t_calib is None:
                t_calib = time.time()
            else:
                per_step = (time.time() - t_calib) / args.calib_steps
                left = budget - (time.time() - t0) - args.reserve
                total = min(args.max_steps, step + 1 + max(0, int(left / per_step)))
                log["calibration"] = {"seconds_per_step": per_step, "total_steps": total,
                                      "startup_seconds": t_calib - t0}
                print(f"[{name}] {per_step * 1e3:.1f} ms/step -> {total} steps in the {budget:.0f} s budget",
                      flush=True)
        done = total is not None and step + 1 >= total
        if (step + 1) % args.log_every == 0 or done:
            dt = time.time() - t_last
            t_last = time.time()
            rec = {"step": step + 1, "loss": run["loss"] / run["n"], "ce_masked": run["ce"] / run["n"], "lr": lr,
                   "grad_norm": float(gnorm), "elapsed": time.time() - t0,
                   "tokens_per_s": tok_seen / max(dt, 1e-9)}
            for k, v in run["extra"].items():
                rec[k] = v / run["n"]
            log["curve"].append(rec)
            print(f"[{name}] step {step + 1}/{total or '?'} loss {rec['loss']:.4f} "
                  f"ce {rec['ce_masked']:.4f} lr {lr:.2e} gn {float(gnorm):.2f} {rec['tokens_per_s'] / 1e3:.0f}k tok/s "
                  f"{rec['elapsed']:.0f}s", flush=True)
            run = {"loss": 0.0, "ce": 0.0, "n": 0, "extra": {}}
            tok_seen = 0
        if args.val_every and ((step + 1) % args.val_every == 0 or done):
            log["val"].append({"step": step + 1, **validate(model, name, val_maker, mask_id, device, amp, args)})
            print(f"[{name}] val {log['val'][-1]}", flush=True)
        if args.save_every and (step + 1) % args.save_every == 0 and not done and total is not None:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1, "total": total,
                        "log": log}, state_path)
        if done:
            break
    del loader
    log["train_seconds"] = time.time() - t0
    log["steps"] = total
    log["rejected_heldout_or_unknown"] = maker.rejected
    qe = quick_eval(model, name, data, device, amp, n=args.quick_eval_n,
                    tasks=tuple(args.quick_eval_tasks.split(",")))
    log["quick_eval_pytorch"] = qe
    print(f"[{name}] quick PyTorch-side accuracy (greedy, AR mode for block/causal): {qe}", flush=True)
    save_checkpoint(model, out, data.ids, os.path.join(data.root, "tokenizer"),
                    max_shard_bytes=int(args.max_shard_mb * 2 ** 20))
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": total, "total": total, "log": log},
               state_path)
    with open(os.path.join(out, "log.json"), "w") as fh:
        json.dump(log, fh, indent=1)
    try:
        from plot_loss import plot
        plot(os.path.join(out, "log.json"), os.path.join(out, "loss.png"))
    except Exception as e:  # matplotlib may be missing on the GPU machine; plot later from log.json
        print(f"[{name}] no loss.png ({type(e).__name__}: {e})", flush=True)
    print(f"[{name}] done in {log['train_seconds']:.0f} s -> {out}", flush=True)
    return log


@torch.no_grad()
def validate(model, name, maker, mask_id, device, amp, args):
    model.eval()
    tot = {"loss": 0.0, "ce_masked": 0.0}
    for i in range(args.val_batches):
        b = maker.batch(10_000_000 + i)
        gen = torch.Generator(device=device)
        gen.manual_seed(99 + i)
        x = noise_and_masks(name, b, mask_id, gen, device, args.flex_pad)
        loss, st = compute_loss(model, x, amp)
        tot["loss"] += loss.item() / args.val_batches
        tot["ce_masked"] += st["ce_masked"] / args.val_batches
    model.train()
    return tot


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="all", choices=list(MODELS) + ["all"])
    ap.add_argument("--data", default="build/train-data")
    ap.add_argument("--out", default="build/train-out")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seed", type=int, default=1234)
    # model size
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--inter", type=int, default=768)
    ap.add_argument("--max-positions", type=int, default=8192)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    # batches
    ap.add_argument("--rows", type=int, default=48, help="rows per batch")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--long-every", type=int, default=8, help="every N-th batch is a long-context batch (0: none)")
    ap.add_argument("--long-rows", type=int, default=4)
    ap.add_argument("--long-len", type=int, default=4096)
    ap.add_argument("--long-kv-min", type=int, default=40)
    ap.add_argument("--long-kv-max", type=int, default=440)
    ap.add_argument("--long-task", default="kv", choices=["kv", "needle"],
                    help="what a long batch's rows hold: key-value records or needles in a haystack")
    ap.add_argument("--mix", default="", help='task weights, e.g. "needle=0.6,kv=0.2" (default: tasks.TRAIN_MIX)')
    ap.add_argument("--prose-frac", type=float, default=0.3, help="share of rows that are prose windows")
    ap.add_argument("--chat-prose-frac", type=float, default=0.12, help="share of chat samples from prose")
    ap.add_argument("--ar-frac", type=float, default=0.3, help="block/causal: share of rows in AR mode (B=1)")
    ap.add_argument("--workers", type=int, default=3)
    # optimisation
    ap.add_argument("--steps", type=int, default=2000, help="total steps (without --time-budget)")
    ap.add_argument("--time-budget", type=float, default=0, help="seconds per model; sets the steps after calibration")
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--calib-steps", type=int, default=16)
    ap.add_argument("--reserve", type=float, default=12, help="seconds kept for eval/saving inside the budget")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lr-floor", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast on GPU")
    ap.add_argument("--flex-pad", type=int, default=0,
                    help="SDAR: flex_attention block masks (compiled on the GPU), noisy rows padded "
                         "to a multiple of this (0: dense boolean masks)")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--val-every", type=int, default=250)
    ap.add_argument("--val-batches", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=500)
    ap.add_argument("--quick-eval-n", type=int, default=100)
    ap.add_argument("--quick-eval-tasks", default="add3,sort,kv_short",
                    help="held-out tasks of the PyTorch-side accuracy check at the end")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", default="", help="start from this checkpoint folder's weights")
    ap.add_argument("--max-shard-mb", type=float, default=0,
                    help="split model.safetensors into shards of at most this many MiB (0: one file)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    data = Data(args.data)
    names = DEFAULT_MODELS if args.model == "all" else [args.model]
    for n in names:
        train_one(n, args, data, device)


if __name__ == "__main__":
    main()
