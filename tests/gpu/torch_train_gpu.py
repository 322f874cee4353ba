#!/usr/bin/python3
"""PyTorch side of make gpu-bench: the model of tests/bench/torch_train.py
(same architecture as bin/transformer) on one GPU, bf16 autocast and
torch.compile, fixed-shape batches of B x L tokens.  Prints
"torch tok/s <target tokens per second>" over the timed steps.

usage: torch_train_gpu.py --layers N --d-model D --d-ff F --heads H --vocab V
                          --batch B --len L --steps S --warm W [--no-compile]
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import torch_train  # noqa: E402


class GPUTransformer(torch_train.Transformer):
    def forward(self, src, tgt_in):
        x = self.embed(src)
        for l in self.enc:
            x = l(x, None, None)
        T = tgt_in.shape[1]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool, device=src.device), 1)
        y = self.embed(tgt_in)
        for l in self.dec:
            y = l(y, x, causal)
        return y @ self.emb.t()


def main():
    ap = argparse.ArgumentParser()
    for k, v in [("layers", 6), ("d-model", 512), ("d-ff", 2048), ("heads", 8), ("vocab", 37000),
                 ("batch", 300), ("len", 41), ("steps", 12), ("warm", 2)]:
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    a.threads = 1
    torch.manual_seed(1)
    dev = torch.device("cuda")
    m = GPUTransformer(a).to(dev)
    opt = torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    src = torch.randint(4, a.vocab, (a.batch, a.len), device=dev)
    tgt_in = torch.randint(4, a.vocab, (a.batch, a.len), device=dev)
    tgt_out = torch.randint(4, a.vocab, (a.batch, a.len), device=dev)
    ntok = a.batch * a.len

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = m(src, tgt_in)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), tgt_out.view(-1), label_smoothing=0.1,
                               reduction="sum") / ntok
        loss.backward()
        opt.step()

    fwd_bwd = step if a.no_compile else torch.compile(step)
    t0 = None
    for s in range(a.steps):
        if s == a.warm:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        fwd_bwd()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print("torch tok/s %.1f" % (ntok * (a.steps - a.warm) / dt))


if __name__ == "__main__":
    main()
