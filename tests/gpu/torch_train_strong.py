#!/usr/bin/python3
"""A strong PyTorch baseline for the GPU comparison (issue 32): the model of
tests/bench/torch_train.py (the architecture of bin/transformer) with
  - attention through F.scaled_dot_product_attention (fused flash or
    memory-efficient kernels; is_causal for the decoder's self-attention),
  - bf16 autocast with the logits left in bf16 (no fp32 copy: the loss reads
    them as our xent kernel does),
  - fused Adam (torch.optim.Adam(fused=True)),
  - optionally torch.compile of the whole step,
on the same shapes and tokens per step as our base and big runs: B sentences
of L tokens on both sides (default 610 x 41 = 25,010 target tokens, the
paper's batch), vocabulary 37000.  Prints
  torch-strong <model> tok/s <rate> ms/step <ms> (...)
over the timed steps.  tests/gpu/torch_train_gpu.py is the older, weaker
baseline (hand-written attention, fp32 logits) kept for comparison.

usage: torch_train_strong.py [--model base|big] [--batch B] [--len L]
                             [--steps S] [--warm W] [--compile]
       torch_train_strong.py --cpu-smoke   # a tiny model on the CPU: the
           attention path equals the reference's, and 3 bf16 steps run
Without scaled_dot_product_attention (PyTorch < 2.0, e.g. Debian's 1.13) the
attention falls back to the reference's arithmetic and says so.
"""
import argparse
import copy
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import torch_train  # noqa: E402

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
MODELS = {"base": (6, 512, 2048, 8), "big": (6, 1024, 4096, 16)}   # layers, d_model, d_ff, heads


def attend(q, k, v, causal):
    """softmax(q k^T / sqrt(d_k)) v, eq. 1; the decoder's self-attention
    sees no later position"""
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), 1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class SDPAAttention(torch_train.Attention):
    """the reference's attention (same parameters); a mask means causal"""

    def forward(self, x, mem, mask):
        B, Tq, _ = x.shape
        Tk = mem.shape[1]
        q = self.wq(x).view(B, Tq, self.h, self.dk).transpose(1, 2)
        k = self.wk(mem).view(B, Tk, self.h, self.dk).transpose(1, 2)
        v = self.wv(mem).view(B, Tk, self.h, self.dv).transpose(1, 2)
        o = attend(q, k, v, mask is not None)
        return self.wo(o.transpose(1, 2).reshape(B, Tq, self.h * self.dv))


class StrongTransformer(torch_train.Transformer):
    def forward(self, src, tgt_in):
        x = self.embed(src)
        for l in self.enc:
            x = l(x, None, None)
        y = self.embed(tgt_in)
        for l in self.dec:
            y = l(y, x, True)   # causal self-attention (SDPAAttention)
        return y @ self.emb.t()


def strengthen(m):
    """a reference model turned strong in place: its attention modules and
    forward, its parameters as they are"""
    for mod in m.modules():
        if type(mod) is torch_train.Attention:
            mod.__class__ = SDPAAttention
    m.__class__ = StrongTransformer
    return m


def check_equal(a):
    """the strong model computes the reference's function (fp32, eval)"""
    torch.manual_seed(2)
    ref = torch_train.Transformer(a).eval()
    strong = strengthen(copy.deepcopy(ref)).eval()
    src = torch.randint(4, a.vocab, (a.batch, a.len))
    tgt = torch.randint(4, a.vocab, (a.batch, a.len))
    with torch.no_grad():
        want, got = ref(src, tgt), strong(src, tgt)
    err = (want - got).abs().max().item()
    if not torch.allclose(want, got, rtol=1e-4, atol=1e-5):
        sys.exit("error: torch_train_strong: the strong model differs from the reference by %g" % err)
    print("equal: strong vs reference logits max |diff| %.3g (fp32, eval)" % err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="base")
    for k, v in [("batch", 610), ("len", 41), ("vocab", 37000), ("steps", 12), ("warm", 3)]:
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--cpu-smoke", action="store_true")
    a = ap.parse_args()
    a.layers, a.d_model, a.d_ff, a.heads = MODELS[a.model]
    dev = torch.device("cuda")
    if a.cpu_smoke:
        a.layers, a.d_model, a.d_ff, a.heads, a.vocab, a.batch, a.len, a.steps, a.warm = 1, 32, 64, 2, 100, 4, 9, 3, 1
        a.compile, dev = False, torch.device("cpu")
        check_equal(a)
    elif not torch.cuda.is_available():
        sys.exit("error: torch_train_strong: no CUDA device (--cpu-smoke runs on the CPU)")
    torch.manual_seed(1)
    m = strengthen(torch_train.Transformer(a)).to(dev).train()
    opt = torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=dev.type == "cuda")
    src = torch.randint(4, a.vocab, (a.batch, a.len), device=dev)
    tgt_in = torch.randint(4, a.vocab, (a.batch, a.len), device=dev)
    tgt_out = torch.randint(4, a.vocab, (a.batch, a.len), device=dev)
    ntok = a.batch * a.len

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = m(src, tgt_in)
        # outside autocast, whose fp32 list would widen the logits: the loss
        # reads them in bf16 (log-softmax accumulates in fp32 inside)
        loss = F.cross_entropy(logits.view(-1, a.vocab), tgt_out.view(-1), label_smoothing=0.1,
                               reduction="sum") / ntok
        loss.backward()
        opt.step()
        return loss

    run = torch.compile(step) if a.compile else step
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0, losses = None, []
    for s in range(a.steps):
        if s == a.warm:
            sync()
            t0 = time.perf_counter()
        losses.append(run())
    sync()
    dt = (time.perf_counter() - t0) / (a.steps - a.warm)
    loss = [float(x) for x in losses]
    if not all(math.isfinite(x) for x in loss):
        sys.exit("error: torch_train_strong: a loss is not finite: %s" % loss)
    mem = torch.cuda.max_memory_allocated() / 2 ** 20 if dev.type == "cuda" else 0
    print("torch-strong %s tok/s %.1f ms/step %.3f (batch %d x %d = %d tokens; sdpa %s; logits bf16; fused adam %s; "
          "compile %s; torch %s; peak %.0f MiB; loss %s)" % (
              "smoke" if a.cpu_smoke else a.model, ntok / dt, 1e3 * dt, a.batch, a.len, ntok,
              "yes" if HAVE_SDPA else "no (fallback: PyTorch < 2.0)", "yes" if dev.type == "cuda" else "no (CPU)",
              "yes" if a.compile else "no", torch.__version__, mem, " ".join("%.4f" % x for x in loss)))


if __name__ == "__main__":
    main()
