"""PyTorch side of the decoding benchmark (issue 10): the same checkpoint, the
same sentences in the same batches, the same search as src/decode.c, timed.

The model is the checkpoint's Transformer (post-norm, shared embedding,
sinusoids or learned positions) written with plain tensor ops; decoding is
incremental in the usual PyTorch way (fairseq's): per decoder layer a cache of
self-attention keys/values, one new position per step, and the encoder-decoder
keys/values computed once per sentence.  The search follows decode.h rule for
rule, vectorised over the batch: every live hypothesis is extended by every
token but PAD and BOS, the 2K best extensions by raw log-probability are
taken (beam 1: the best one), those ending in EOS are finished and scored
log P / ((5+|Y|)/6)^alpha, the K best others are the next live hypotheses,
a prefix of L = min(source tokens + max_len_a, positions - 1) tokens may only
take EOS, and a sentence stops exactly when no live prefix can beat its best
finished score.  Finished sentences leave the batch.

Usage: torch_decode.py CKPT DATA SPLIT --beam K --batch N --threads T --out IDS [--device cuda]
Writes one line of output ids per source sentence (input order) and prints
"torch decode: S sentences in X s: Y sentences/s, Z target tokens/s".
Runs with Debian's python3-torch and python3-h5py (/usr/bin/python3)."""
import argparse
import math
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


def read_config(ckpt):
    cfg = {}
    for line in ckpt.attrs["config"].decode().splitlines() if isinstance(ckpt.attrs["config"], bytes) \
            else ckpt.attrs["config"].splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            cfg[k.strip()] = v.strip()
    return cfg


class Model:
    def __init__(self, path, device="cpu"):
        with h5py.File(path, "r") as f:
            c = read_config(f)
            self.w = {}
            f["params"].visititems(lambda n, o: self.w.__setitem__(n, torch.from_numpy(o[()]).to(device))
                                   if isinstance(o, h5py.Dataset) else None)
        self.N, self.d, self.h = int(c["n_layers"]), int(c["d_model"]), int(c["n_heads"])
        self.dk, self.dv, self.V = int(c["d_k"]), int(c["d_v"]), int(c["vocab_size"])
        self.max_len, self.eps = int(c["max_len"]), float(c["ln_eps"])
        self.beam, self.alpha, self.max_len_a = int(c["beam"]), float(c["len_alpha"]), int(c["max_len_a"])
        self.E = self.w["shared_embedding"]
        if c.get("positional", "sinusoid") == "learned":
            self.pos = self.w["positional_embedding"]
        else:  # section 3.5, computed in double as the C code does, 2 x max_len (model_positions)
            pos = np.arange(2 * self.max_len)[:, None].astype(np.float64)
            j = np.arange(self.d)[None, :]
            a = pos / np.power(10000.0, (j & ~1) / self.d)
            self.pos = torch.from_numpy(np.where(j & 1, np.cos(a), np.sin(a)).astype(np.float32)).to(device)
        # fused projections, as src/model.c uses them (W_q|W_k|W_v adjacent)
        for side in ("encoder", "decoder"):
            for l in range(self.N):
                p = "%s/layer_%02d/self_attention/" % (side, l)
                self.w[p + "W_qkv"] = torch.cat([self.w[p + "W_q"], self.w[p + "W_k"], self.w[p + "W_v"]])
                if side == "decoder":
                    p = "decoder/layer_%02d/cross_attention/" % l
                    self.w[p + "W_kv"] = torch.cat([self.w[p + "W_k"], self.w[p + "W_v"]])

    def ln(self, x, p):
        return F.layer_norm(x, (self.d,), self.w[p + "/gamma"], self.w[p + "/beta"], self.eps)

    def ffn(self, x, p):
        hid = F.relu(F.linear(x, self.w[p + "/W_1"], self.w[p + "/b_1"]))
        return F.linear(hid, self.w[p + "/W_2"], self.w[p + "/b_2"])

    def embed(self, tok, t0):
        return self.E[tok] * math.sqrt(self.d) + self.pos[t0:t0 + tok.shape[1]]

    def encode(self, src, key_mask):
        """src [B, S]; key_mask [B, 1, 1, S] (True = padding)"""
        B, S = src.shape
        h, dk, dv = self.h, self.dk, self.dv
        x = self.embed(src, 0)
        for l in range(self.N):
            p = "encoder/layer_%02d/" % l
            qkv = F.linear(x, self.w[p + "self_attention/W_qkv"])
            q, k, v = qkv.split([h * dk, h * dk, h * dv], -1)
            q = q.view(B, S, h, dk).transpose(1, 2)
            k = k.view(B, S, h, dk).transpose(1, 2)
            v = v.view(B, S, h, dv).transpose(1, 2)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(dk)
            a = torch.softmax(s.masked_fill(key_mask, float("-inf")), -1)
            ctx = (a @ v).transpose(1, 2).reshape(B, S, h * dv)
            x = self.ln(x + F.linear(ctx, self.w[p + "self_attention/W_o"]), p + "self_attention_norm")
            x = self.ln(x + self.ffn(x, p + "ffn"), p + "ffn_norm")
        return x

    def step(self, tok, t, cache, K):
        """tok [n] at position t for n = ns*K hypotheses -> log-probs [n, V]"""
        n, ns = tok.shape[0], tok.shape[0] // K
        h, dk, dv = self.h, self.dk, self.dv
        x = self.embed(tok[:, None], t)[:, 0]
        for l in range(self.N):
            p = "decoder/layer_%02d/" % l
            sk, sv, ck, cv = cache["sk"][l], cache["sv"][l], cache["ck"][l], cache["cv"][l]
            qkv = F.linear(x, self.w[p + "self_attention/W_qkv"])
            q, k, v = qkv.split([h * dk, h * dk, h * dv], -1)
            sk[:, t] = k
            sv[:, t] = v
            q = q.view(n, h, 1, dk)
            kk = sk[:, :t + 1].view(n, t + 1, h, dk).permute(0, 2, 3, 1)
            vv = sv[:, :t + 1].view(n, t + 1, h, dv).transpose(1, 2)
            a = torch.softmax((q @ kk) / math.sqrt(dk), -1)
            ctx = (a @ vv).reshape(n, h * dv)
            x = self.ln(x + F.linear(ctx, self.w[p + "self_attention/W_o"]), p + "self_attention_norm")
            # the K hypotheses of a sentence: one K-row query block
            q = F.linear(x, self.w[p + "cross_attention/W_q"]).view(ns, K, h, dk).transpose(1, 2)
            s = (q @ ck) / math.sqrt(dk)
            a = torch.softmax(s.masked_fill(cache["mask"], float("-inf")), -1)
            ctx = (a @ cv).transpose(1, 2).reshape(n, h * dv)
            x = self.ln(x + F.linear(ctx, self.w[p + "cross_attention/W_o"]), p + "cross_attention_norm")
            x = self.ln(x + self.ffn(x, p + "ffn"), p + "ffn_norm")
        return torch.log_softmax(F.linear(x, self.E), -1)

    def lp(self, n):
        return ((5.0 + n) / 6.0) ** self.alpha

    @torch.no_grad()
    def decode_batch(self, srcs, K):
        """srcs: list of id lists (no EOS) -> list of output id lists"""
        B = len(srcs)
        S = max(len(s) for s in srcs) + 1
        src = torch.full((B, S), PAD, dtype=torch.long)
        for i, s in enumerate(srcs):
            src[i, :len(s)] = torch.tensor(s)
            src[i, len(s)] = EOS
        src_len = torch.tensor([len(s) + 1 for s in srcs])
        key_mask = (torch.arange(S)[None, :] >= src_len[:, None])[:, None, None, :]
        enc = self.encode(src, key_mask)
        L = torch.tensor([min(len(s) + self.max_len_a, self.pos.shape[0] - 1) for s in srcs])
        T = int(L.max()) + 1
        h, dk, dv, V = self.h, self.dk, self.dv, self.V
        n = B * K
        cache = {"sk": [], "sv": [], "ck": [], "cv": [], "mask": key_mask}
        for l in range(self.N):
            kv = F.linear(enc, self.w["decoder/layer_%02d/cross_attention/W_kv" % l])
            k, v = kv.split([h * dk, h * dv], -1)
            cache["ck"].append(k.reshape(B, S, h, dk).permute(0, 2, 3, 1).contiguous())
            cache["cv"].append(v.reshape(B, S, h, dv).transpose(1, 2).contiguous())
            cache["sk"].append(torch.zeros(n, T, h * dk))
            cache["sv"].append(torch.zeros(n, T, h * dv))
        act = torch.arange(B)                                  # active slot -> sentence
        sc = torch.full((B, K), float("-inf"), dtype=torch.float64)
        sc[:, 0] = 0.0                                         # one live hypothesis: BOS
        tok = torch.full((n,), BOS, dtype=torch.long)
        hist = torch.zeros(n, T, dtype=torch.long)
        best = torch.full((B,), float("-inf"), dtype=torch.float64)
        out = [[] for _ in range(B)]
        ar = torch.arange(K)
        t = 0
        while act.numel() > 0:
            na = act.numel()
            logp = self.step(tok, t, cache, K).double().view(na, K, V)
            cand = sc[:, :, None] + logp
            cand[:, :, PAD] = float("-inf")
            cand[:, :, BOS] = float("-inf")
            cand[(t >= L[act]), :, EOS + 1:] = float("-inf")   # the maximum length: only EOS
            # 2K candidates (beam 1: one), decode.h: EOS ones finish, the K best others stay live
            vals, idx = cand.view(na, K * V).topk(2 * K if K > 1 else 1, dim=1)
            j, v = idx // V, idx % V
            ok = vals > float("-inf")
            fin = torch.where(ok & (v == EOS), vals / self.lp(t + 1), torch.tensor(float("-inf"), dtype=torch.float64))
            fbest, farg = fin.max(1)
            for i in torch.nonzero(fbest > best[act]).flatten().tolist():
                k = int(act[i])
                best[k] = fbest[i]
                out[k] = hist[i * K + int(j[i, farg[i]]), :t].tolist()
            live = ok & (v != EOS)
            live = live & (live.long().cumsum(1) <= K)
            pos = live.long().cumsum(1) - 1
            rows = (torch.arange(na)[:, None] * K + pos)[live]
            parent = (torch.arange(na)[:, None] * K).expand(na, K).reshape(-1).clone()
            parent[rows] = (torch.arange(na)[:, None] * K + j)[live]
            nsc = torch.full((na * K,), float("-inf"), dtype=torch.float64)
            nsc[rows] = vals[live]
            ntok = torch.full((na * K,), EOS, dtype=torch.long)
            ntok[rows] = v[live]
            hist = hist[parent]
            hist[rows, t] = v[live]
            nsc = nsc.view(na, K)
            # exact early stop (decode.h): alpha >= 0, so a live prefix can reach at most s / lp(L+1)
            bound = (nsc.max(1).values / torch.tensor([self.lp(int(x) + 1) for x in L[act]], dtype=torch.float64))
            done = (live.sum(1) == 0) | (best[act] >= bound)
            keep = torch.nonzero(~done).flatten()
            if keep.numel() < na:
                hyp = (keep[:, None] * K + ar).reshape(-1)
                parent, ntok, hist, nsc = parent[hyp], ntok[hyp], hist[hyp], nsc[keep]
                for name in ("ck", "cv"):
                    cache[name] = [c[keep] for c in cache[name]]
                cache["mask"] = cache["mask"][keep]
                act = act[keep]
            for name in ("sk", "sv"):
                for l in range(self.N):
                    c = cache[name][l]
                    c[:parent.numel(), :t + 1] = c[parent, :t + 1]
                    cache[name][l] = c[:parent.numel()]
            sc, tok = nsc, ntok
            t += 1
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("data")
    ap.add_argument("split")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (tests/gpu/accept.sh: fp32, no TF32)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.device != "cpu":   # every tensor the search creates lands there too (PyTorch >= 2.0)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_default_device(a.device)
    m = Model(a.ckpt, a.device)
    with h5py.File(a.data, "r") as f:
        g = f["splits/" + a.split]
        off, ids = g["src_offsets"][()], g["src_ids"][()]
    srcs = [ids[off[i]:off[i + 1]].tolist()[:m.max_len - 1] for i in range(len(off) - 1)]
    order = sorted(range(len(srcs)), key=lambda i: -len(srcs[i]))   # longest first, as translate.c
    order = [i for i in order if srcs[i]]
    outs = [[] for _ in srcs]
    t0 = time.perf_counter()
    for s in range(0, len(order), a.batch):
        b = order[s:s + a.batch]
        for i, o in zip(b, m.decode_batch([srcs[i] for i in b], a.beam)):
            outs[i] = o
    if a.device != "cpu":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    with open(a.out, "w") as f:
        for o in outs:
            f.write(" ".join(map(str, o)) + "\n")
    ntok = sum(len(o) for o in outs)   # output tokens without EOS, as translate.c counts
    print("torch decode: %d sentences in %.2f s: %.1f sentences/s, %.0f target tokens/s"
          % (len(srcs), dt, len(srcs) / dt, ntok / dt))


if __name__ == "__main__":
    main()
