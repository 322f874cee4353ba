#!/usr/bin/env python3
"""Scaling model on paper for data-parallel training of the Transformer base
model (docs/scaling.md): ring-allreduce time of the fp32 gradients, how much
of it backward hides with bucketed allreduces started in reverse layer order
(what src/dist.c does), and the bucket size that balances latency and
bandwidth.  Standard library only; every assumption is a named constant.

    python3 analysis/scaling_model.py            # the tables of docs/scaling.md
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ArgumentParser, finite_float, int_at_least  # noqa: E402

# model: Transformer base (Table 3), vocab 37000 shared, params 63,045,632
D, DFF, H, DK, N, V = 512, 2048, 8, 64, 6, 37000
TOK = 3125            # target tokens per GPU per step (25k tokens / 8 GPUs, section 5.1)
FLOP_BWD = 4          # backward FLOPs per parameter per token (forward 2)

# cluster: 8 GPUs per node on NVLink, 200 Gb/s InfiniBand between nodes
GPN = 8
B_NVL = 200e9         # B/s ring bandwidth inside a node (nccl-tests busbw, NVLink)
B_IB = 25e9           # B/s one 200 Gb/s HDR port per node
ALPHA = 5e-6          # s per ring step (one hop: launch + wire + sync)


def tensors():
    """(bytes, layer) in buffer order = the order backward finalises them:
    decoder layers N-1..0, encoder layers N-1..0, shared embedding."""
    attn = [H * DK * D, H * DK * D, H * DK * D, D * H * DK]
    ln = [D, D]
    ffn = [DFF * D, DFF, D * DFF, D]
    out = []
    for l in range(N):
        out += [(4 * n, ("dec", l)) for n in attn + ln + attn + ln + ffn + ln]
    for l in range(N):
        out += [(4 * n, ("enc", l)) for n in attn + ln + ffn + ln]
    out.append((4 * V * D, ("emb", 0)))
    return out


def backward_timeline(flops):
    """time at which each layer's gradients are final, and backward's end.
    Backward first runs the output projection (its dE is final only after the
    source embedding, at the very end), then decoder and encoder layers."""
    T = tensors()
    size = {}
    for b, layer in T:
        size[layer] = size.get(layer, 0) + b / 4
    t = FLOP_BWD * size[("emb", 0)] * TOK / flops      # logits gemms
    ready = {}
    for l in reversed(range(N)):
        t += FLOP_BWD * size[("dec", l)] * TOK / flops
        ready[("dec", l)] = t
    for l in reversed(range(N)):
        t += FLOP_BWD * size[("enc", l)] * TOK / flops
        ready[("enc", l)] = t
    ready[("emb", 0)] = t
    return ready, t


def ring_time(n, nbytes, bw, alpha=ALPHA):
    """ring allreduce: 2(n-1)/n * S/B + 2(n-1)*alpha"""
    return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * alpha


def link_bw(n, nics):
    return B_NVL if n <= GPN else min(B_NVL, nics * B_IB)


def exposed(n, bucket, flops, nics):
    """allreduce time after backward ends, buckets of >= `bucket` bytes of
    whole tensors started when their last tensor is final; one bucket on the
    wire at a time (a single NCCL stream / MPI progress)"""
    ready, t_bwd = backward_timeline(flops)
    bw = link_bw(n, nics)
    buckets, cur, last = [], 0, None
    for b, layer in tensors():
        cur += b
        last = layer
        if cur >= bucket:
            buckets.append((cur, ready[last]))
            cur = 0
    if cur:
        buckets.append((cur, ready[last]))
    t = 0.0
    for nbytes, t_ready in buckets:
        t = max(t, t_ready) + ring_time(n, nbytes, bw)
    return max(0.0, t - t_bwd), t_bwd, len(buckets)


def main():
    ap = ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tflops", type=finite_float(above=0), nargs="*", default=[50.0, 10.0],
                    help="sustained GPU TFLOP/s (default 50 = A100/H100 mixed precision, 10 = fp32)")
    ap.add_argument("--nics", type=int_at_least(1), nargs="*", default=[1, 8], help="200 Gb/s ports per node")
    a = ap.parse_args()
    S = sum(b for b, _ in tensors())
    print(f"gradients: {S / 4:,.0f} params, S = {S / 1e6:.1f} MB fp32; "
          f"alpha = {ALPHA * 1e6:.0f} us/step, NVLink {B_NVL / 1e9:.0f} GB/s, IB {B_IB / 1e9:.0f} GB/s/port")
    ns = [8, 16, 32, 64, 128, 256, 512]
    for nics in a.nics:
        print(f"\n## ring allreduce of S, {nics} x 200 Gb/s per node (n <= 8: NVLink only)")
        print("| GPUs n | B (GB/s) | bandwidth term (ms) | latency term (ms) | T_allreduce (ms) | busbw (GB/s) | b* = n*alpha*B (MB) |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n in ns:
            bw = link_bw(n, nics)
            tb = 2 * (n - 1) / n * S / bw
            tl = 2 * (n - 1) * ALPHA
            T = tb + tl
            print(f"| {n} | {bw / 1e9:.0f} | {tb * 1e3:.2f} | {tl * 1e3:.2f} | {T * 1e3:.2f} | "
                  f"{S / T * 2 * (n - 1) / n / 1e9:.1f} | {n * ALPHA * bw / 1e6:.1f} |")
    sizes = [1, 4, 8, 16, 25, 64, 256]
    for tf in a.tflops:
        for nics in a.nics:
            _, t_bwd = backward_timeline(tf * 1e12)
            t_step = 1.5 * t_bwd   # forward = half of backward
            print(f"\n## overlap: {tf:g} TFLOP/s per GPU (backward {t_bwd * 1e3:.1f} ms, step {t_step * 1e3:.1f} ms "
                  f"without communication), {nics} x 200 Gb/s per node")
            print("| GPUs n | T_allreduce (ms) | " + " | ".join(f"exposed @{s} MB" for s in sizes)
                  + " | best bucket (MB) | hidden | efficiency |")
            print("|---:|---:|" + "---:|" * len(sizes) + "---:|---:|---:|")
            for n in ns:
                T = ring_time(n, S, link_bw(n, nics))
                ex = [exposed(n, s * 1e6, tf * 1e12, nics)[0] for s in sizes]
                k = min(range(len(sizes)), key=lambda i: ex[i])
                print(f"| {n} | {T * 1e3:.1f} | " + " | ".join(f"{e * 1e3:.1f}" for e in ex)
                      + f" | {sizes[k]} | {max(0.0, 100 * (1 - ex[k] / T)):.0f}% | {100 * t_step / (t_step + ex[k]):.0f}% |")


if __name__ == "__main__":
    main()
