#!/usr/bin/python3
"""PyTorch side of the CPU training benchmark (make bench).

The same model as bin/transformer (post-norm encoder-decoder, shared embedding
scaled by sqrt(d_model), sinusoids, no biases in attention projections, FFN
biases, dropout on sub-layer outputs and embedding sums, label smoothing,
Adam 0.9/0.98/1e-9 with the paper's schedule) on batches of the same shape as
the synthetic task's fixed-length batches, float32, a given thread count.
Prints target tokens/s over the timed steps.

usage: torch_train.py --layers N --d-model D --d-ff F --heads H --vocab V
                      --batch B --len L --steps S --warm W --threads T
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self, d, h, dk, dv):
        super().__init__()
        self.h, self.dk, self.dv = h, dk, dv
        self.wq = torch.nn.Linear(d, h * dk, bias=False)
        self.wk = torch.nn.Linear(d, h * dk, bias=False)
        self.wv = torch.nn.Linear(d, h * dv, bias=False)
        self.wo = torch.nn.Linear(h * dv, d, bias=False)

    def forward(self, x, mem, mask):
        B, Tq, _ = x.shape
        Tk = mem.shape[1]
        q = self.wq(x).view(B, Tq, self.h, self.dk).transpose(1, 2)
        k = self.wk(mem).view(B, Tk, self.h, self.dk).transpose(1, 2)
        v = self.wv(mem).view(B, Tk, self.h, self.dv).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        return self.wo((p @ v).transpose(1, 2).reshape(B, Tq, self.h * self.dv))


class Layer(torch.nn.Module):
    def __init__(self, d, dff, h, dk, dv, p, cross):
        super().__init__()
        self.self_attn = Attention(d, h, dk, dv)
        self.n1 = torch.nn.LayerNorm(d, eps=1e-6)
        self.cross = Attention(d, h, dk, dv) if cross else None
        self.n2 = torch.nn.LayerNorm(d, eps=1e-6) if cross else None
        self.w1 = torch.nn.Linear(d, dff)
        self.w2 = torch.nn.Linear(dff, d)
        self.n3 = torch.nn.LayerNorm(d, eps=1e-6)
        self.p = p

    def forward(self, x, mem, self_mask):
        x = self.n1(x + F.dropout(self.self_attn(x, x, self_mask), self.p, self.training))
        if self.cross is not None:
            x = self.n2(x + F.dropout(self.cross(x, mem, None), self.p, self.training))
        return self.n3(x + F.dropout(self.w2(F.relu(self.w1(x))), self.p, self.training))


class Transformer(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a.d_model
        dk = dv = d // a.heads
        self.d, self.p = d, 0.1
        self.emb = torch.nn.Parameter(torch.randn(a.vocab, d) * d ** -0.5)
        self.enc = torch.nn.ModuleList([Layer(d, a.d_ff, a.heads, dk, dv, 0.1, False) for _ in range(a.layers)])
        self.dec = torch.nn.ModuleList([Layer(d, a.d_ff, a.heads, dk, dv, 0.1, True) for _ in range(a.layers)])
        pos = torch.arange(512).unsqueeze(1)
        rate = torch.pow(10000.0, (torch.arange(d) // 2 * 2).float() / d)
        pe = pos / rate
        pe[:, 0::2] = torch.sin(pe[:, 0::2])
        pe[:, 1::2] = torch.cos(pe[:, 1::2])
        self.register_buffer("pe", pe)

    def embed(self, tok):
        x = self.emb[tok] * math.sqrt(self.d) + self.pe[: tok.shape[1]]
        return F.dropout(x, self.p, self.training)

    def forward(self, src, tgt_in):
        x = self.embed(src)
        for l in self.enc:
            x = l(x, None, None)
        T = tgt_in.shape[1]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        y = self.embed(tgt_in)
        for l in self.dec:
            y = l(y, x, causal)
        return y @ self.emb.t()


def main():
    ap = argparse.ArgumentParser()
    for k, v in [("layers", 3), ("d-model", 256), ("d-ff", 1024), ("heads", 4), ("vocab", 1024),
                 ("batch", 100), ("len", 40), ("steps", 12), ("warm", 2), ("threads", 1)]:
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = Transformer(a)
    opt = torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src = torch.randint(4, a.vocab, (a.batch, a.len))
    tgt_in = torch.randint(4, a.vocab, (a.batch, a.len))
    tgt_out = torch.randint(4, a.vocab, (a.batch, a.len))
    ntok = a.batch * a.len
    t0 = None
    for step in range(a.steps):
        if step == a.warm:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = m(src, tgt_in)
        loss = F.cross_entropy(logits.view(-1, a.vocab), tgt_out.view(-1), label_smoothing=0.1, reduction="sum") / ntok
        loss.backward()
        opt.step()
    dt = time.perf_counter() - t0
    print("torch tok/s %.1f" % (ntok * (a.steps - a.warm) / dt))


if __name__ == "__main__":
    main()
