#!/usr/bin/python3
"""PyTorch reference fixtures for tests/test_torch_fixture.c.

Builds the tiny Transformer of "Attention Is All You Need" (Vaswani et al.
2017) in PyTorch, written from the paper and independently of src/model.c:
post-norm residual blocks (section 3.1), scaled dot-product multi-head
attention without biases with d_k != d_v != d_model/h (3.2), position-wise
FFN with biases (eq. 2), one embedding matrix shared by source, target and
the pre-softmax projection, scaled by sqrt(d_model) (3.4), sinusoidal (sin on
even, cos on odd features) or learned positions (3.5, Table 3 row E), dropout
on every sub-layer output before the residual add and on the embedding +
position sums (5.4), label-smoothed cross-entropy with
q = (1-eps)*onehot + eps/V over all V classes, padding targets ignored,
Adam(0.9, 0.98, 1e-9) with lrate = d_model^-0.5 min(step^-0.5,
step warmup^-1.5) (eq. 3).

Everything is computed in float64, so the fixture is an exact reference and
the C test's tolerances measure only the C code's float32 error.

Initial weights and dropout masks: this script re-implements Philox4x32-10
(src/philox.h) and the initialisation of param_init_host (src/model.c) in
numpy, instead of reading a dump from the C code.  The fixture then holds the
weights, and the C test checks both that param_init_host reproduces them and
(with the fixture's weights loaded) that loss and gradients agree.  Dropout
masks are drawn from the same counter scheme (seed, step, site, sentence,
position, feature), so gradients are compared with dropout on.

Usage: /usr/bin/python3 tests/torch_reference/make_fixtures.py [OUT.h5]
(Debian's python3-torch, python3-numpy, python3-h5py).
"""
import math
import sys

import h5py
import numpy as np
import torch

torch.set_default_dtype(torch.float64)
M32 = 0xFFFFFFFF

# ----------------------------------------------------------------- Philox


def philox4x32(c, k0, k1):
    """Philox4x32-10 on numpy uint64 arrays holding 32-bit values."""
    c = [np.asarray(x, dtype=np.uint64) & M32 for x in c]
    k0 = np.uint64(k0 & M32)
    k1 = np.uint64(k1 & M32)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(M32)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(M32)
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = np.uint64((int(k0) + 0x9E3779B9) & M32)
        k1 = np.uint64((int(k1) + 0xBB67AE85) & M32)
    return c


def uniform24(x):
    return (x >> np.uint64(8)).astype(np.float64) * (1.0 / 16777216.0)


def dropout_keep(seed, step, site, p, sent, pos, j):
    """keep mask of src/philox.h dropout_keep, broadcast over the arrays"""
    sent, pos, j = np.broadcast_arrays(np.asarray(sent, np.uint64), np.asarray(pos, np.uint64),
                                       np.asarray(j, np.uint64))
    k0 = (seed & M32) ^ ((site * 0x85EBCA6B) & M32)
    k1 = ((seed >> 32) + site) & M32
    r = philox4x32([j >> np.uint64(2), pos, sent, np.full(j.shape, step, np.uint64)], k0, k1)
    lane = (j & np.uint64(3)).astype(np.int64)
    v = np.choose(lane, r)
    return uniform24(v) >= float(np.float32(p))


# ------------------------------------------------------- parameter layout


def param_table(cfg):
    """(name, rows, cols, init) in the buffer order of src/model.c"""
    d, h, dk, dv, dff = cfg["d_model"], cfg["n_heads"], cfg["d_k"], cfg["d_v"], cfg["d_ff"]
    t = []

    def attn(p):
        t.extend([(p + "/W_q", h * dk, d, "xavier"), (p + "/W_k", h * dk, d, "xavier"),
                  (p + "/W_v", h * dv, d, "xavier"), (p + "/W_o", d, h * dv, "xavier")])

    def norm(p):
        t.extend([(p + "/gamma", d, 1, "one"), (p + "/beta", d, 1, "zero")])

    def ffn(p):
        t.extend([(p + "/W_1", dff, d, "xavier"), (p + "/b_1", dff, 1, "zero"),
                  (p + "/W_2", d, dff, "xavier"), (p + "/b_2", d, 1, "zero")])

    N = cfg["n_layers"]
    for l in reversed(range(N)):
        p = "decoder/layer_%02d" % l
        attn(p + "/self_attention"); norm(p + "/self_attention_norm")
        attn(p + "/cross_attention"); norm(p + "/cross_attention_norm")
        ffn(p + "/ffn"); norm(p + "/ffn_norm")
    for l in reversed(range(N)):
        p = "encoder/layer_%02d" % l
        attn(p + "/self_attention"); norm(p + "/self_attention_norm")
        ffn(p + "/ffn"); norm(p + "/ffn_norm")
    if cfg["positional"] == "learned":
        t.append(("positional_embedding", cfg["max_len"], d, "normal"))
    t.append(("shared_embedding", cfg["vocab_size"], d, "normal"))
    return t


def init_params(cfg):
    """the initialisation of param_init_host, in float32"""
    seed = cfg["seed"]
    out = {}
    for ti, (name, rows, cols, kind) in enumerate(param_table(cfg)):
        n = rows * cols
        k0 = (seed & M32) ^ 0x5EED1A17
        k1 = ((seed >> 32) + ti) & M32
        if kind == "zero":
            w = np.zeros(n, np.float32)
        elif kind == "one":
            w = np.ones(n, np.float32)
        elif kind == "xavier":   # Glorot uniform
            a = np.sqrt(np.float32(6.0) / np.float32(rows + cols), dtype=np.float32)
            i = np.arange(0, n, 4, dtype=np.uint64)
            r = philox4x32([i >> np.uint64(2), i >> np.uint64(34), np.full(i.shape, 0x1417, np.uint64),
                            np.zeros(i.shape, np.uint64)], k0, k1)
            u = np.stack([uniform24(x) for x in r], axis=1).reshape(-1)[:n].astype(np.float32)
            w = a * (np.float32(2.0) * u - np.float32(1.0))
        else:                    # N(0, 1/d_model), Box-Muller
            sd = float(np.float32(1.0) / np.sqrt(np.float32(cfg["d_model"]), dtype=np.float32))
            i = np.arange(0, n, 2, dtype=np.uint64)
            r = philox4x32([i >> np.uint64(2), i >> np.uint64(34), np.full(i.shape, 0x2417, np.uint64),
                            np.zeros(i.shape, np.uint64)], k0, k1)
            o = (i & np.uint64(2)).astype(np.int64)
            ra = np.choose(o, r)
            rb = np.choose(o + 1, r)
            u1 = ((ra >> np.uint64(8)).astype(np.float64) + 1.0) / 16777217.0
            u2 = (rb >> np.uint64(8)).astype(np.float64) / 16777216.0
            rad = np.sqrt(-2.0 * np.log(u1))
            w = np.empty(len(i) * 2, np.float64)
            w[0::2] = sd * rad * np.cos(2 * math.pi * u2)
            w[1::2] = sd * rad * np.sin(2 * math.pi * u2)
            w = w[:n].astype(np.float32)
        out[name] = w.reshape(rows, cols) if cols > 1 else w
    return out


# ------------------------------------------------------------------ model

SITE_SRC_EMB, SITE_TGT_EMB, SITE_ENC, SITE_DEC = 1, 2, 16, 16 + 4 * 256


class Dropout:
    """Dropout with the C code's counter-based masks: element (b, t, j) of a
    [B, T, d] tensor uses (sentence id of b, position t, feature j)."""

    def __init__(self, cfg, step, sent_id, train):
        self.cfg, self.step, self.sent_id, self.train = cfg, step, sent_id, train

    def __call__(self, x, site):
        p = self.cfg["dropout"]
        if not self.train or p == 0:
            return x
        B, T, d = x.shape
        keep = dropout_keep(self.cfg["seed"], self.step, site, p, np.asarray(self.sent_id)[:, None, None],
                            np.arange(T)[None, :, None], np.arange(d)[None, None, :])
        scale = 1.0 / (1.0 - float(np.float32(p)))
        return x * torch.from_numpy(keep.astype(np.float64)) * scale


class LayerNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(d))
        self.beta = torch.nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + self.eps) * self.gamma + self.beta


class MultiHeadAttention(torch.nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)  (section 3.2.2)"""

    def __init__(self, d, h, dk, dv):
        super().__init__()
        self.h, self.dk, self.dv = h, dk, dv
        self.W_q = torch.nn.Linear(d, h * dk, bias=False)
        self.W_k = torch.nn.Linear(d, h * dk, bias=False)
        self.W_v = torch.nn.Linear(d, h * dv, bias=False)
        self.W_o = torch.nn.Linear(h * dv, d, bias=False)

    def forward(self, xq, xkv, mask):
        B, Tq, _ = xq.shape
        Tk = xkv.shape[1]
        q = self.W_q(xq).view(B, Tq, self.h, self.dk).transpose(1, 2)
        k = self.W_k(xkv).view(B, Tk, self.h, self.dk).transpose(1, 2)
        v = self.W_v(xkv).view(B, Tk, self.h, self.dv).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)          # eq. 1
        s = s.masked_fill(~mask[:, None, :, :], float("-inf"))
        a = torch.softmax(s, dim=-1)
        ctx = (a @ v).transpose(1, 2).reshape(B, Tq, self.h * self.dv)
        return self.W_o(ctx)


class FFN(torch.nn.Module):
    def __init__(self, d, dff):
        super().__init__()
        self.W_1 = torch.nn.Linear(d, dff)
        self.W_2 = torch.nn.Linear(dff, d)

    def forward(self, x):
        return self.W_2(torch.relu(self.W_1(x)))                  # eq. 2


class EncoderLayer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attention = MultiHeadAttention(c["d_model"], c["n_heads"], c["d_k"], c["d_v"])
        self.self_attention_norm = LayerNorm(c["d_model"], c["ln_eps"])
        self.ffn = FFN(c["d_model"], c["d_ff"])
        self.ffn_norm = LayerNorm(c["d_model"], c["ln_eps"])

    def forward(self, x, mask, drop, site):
        x = self.self_attention_norm(x + drop(self.self_attention(x, x, mask), site))
        return self.ffn_norm(x + drop(self.ffn(x), site + 2))


class DecoderLayer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        a = (c["d_model"], c["n_heads"], c["d_k"], c["d_v"])
        self.self_attention = MultiHeadAttention(*a)
        self.self_attention_norm = LayerNorm(c["d_model"], c["ln_eps"])
        self.cross_attention = MultiHeadAttention(*a)
        self.cross_attention_norm = LayerNorm(c["d_model"], c["ln_eps"])
        self.ffn = FFN(c["d_model"], c["d_ff"])
        self.ffn_norm = LayerNorm(c["d_model"], c["ln_eps"])

    def forward(self, y, mem, self_mask, cross_mask, drop, site):
        y = self.self_attention_norm(y + drop(self.self_attention(y, y, self_mask), site))
        y = self.cross_attention_norm(y + drop(self.cross_attention(y, mem, cross_mask), site + 1))
        return self.ffn_norm(y + drop(self.ffn(y), site + 2))


class Transformer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.shared_embedding = torch.nn.Parameter(torch.zeros(c["vocab_size"], c["d_model"]))
        if c["positional"] == "learned":
            self.positional_embedding = torch.nn.Parameter(torch.zeros(c["max_len"], c["d_model"]))
        self.encoder = torch.nn.ModuleList([EncoderLayer(c) for _ in range(c["n_layers"])])
        self.decoder = torch.nn.ModuleList([DecoderLayer(c) for _ in range(c["n_layers"])])

    def positions(self, T):
        d = self.c["d_model"]
        if self.c["positional"] == "learned":
            return self.positional_embedding[:T]
        pos = torch.arange(T, dtype=torch.float64)[:, None]
        i2 = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
        pe = torch.zeros(T, d)
        pe[:, 0::2] = torch.sin(pos / 10000 ** (i2 / d))          # section 3.5
        pe[:, 1::2] = torch.cos(pos / 10000 ** (i2 / d))
        return pe

    def embed(self, tok, drop, site):
        x = self.shared_embedding[tok] * math.sqrt(self.c["d_model"]) + self.positions(tok.shape[1])
        return drop(x, site)

    def loss_sum(self, batch, drop):
        src, tgt_in, tgt_out = batch["src"], batch["tgt_in"], batch["tgt_out"]
        B, S = src.shape
        T = tgt_in.shape[1]
        src_len, tgt_len = batch["src_len"], batch["tgt_len"]
        src_keys = torch.arange(S)[None, :] < src_len[:, None]                 # [B, S]
        tgt_keys = torch.arange(T)[None, :] < tgt_len[:, None]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        enc_mask = src_keys[:, None, :].expand(B, S, S)
        self_mask = tgt_keys[:, None, :] & causal[None]
        cross_mask = src_keys[:, None, :].expand(B, T, S)
        x = self.embed(src, drop, SITE_SRC_EMB)
        for l, layer in enumerate(self.encoder):
            x = layer(x, enc_mask, drop, SITE_ENC + 4 * l)
        y = self.embed(tgt_in, drop, SITE_TGT_EMB)
        for l, layer in enumerate(self.decoder):
            y = layer(y, x, self_mask, cross_mask, drop, SITE_DEC + 4 * l)
        logits = y @ self.shared_embedding.t()                                  # section 3.4
        logp = torch.log_softmax(logits, dim=-1)
        V, eps = self.c["vocab_size"], self.c["label_smoothing"]
        q = torch.full_like(logp, eps / V)
        q.scatter_add_(-1, tgt_out[..., None], torch.full(tgt_out.shape + (1,), 1.0 - eps))
        row = -(q * logp).sum(-1)
        real = tgt_out != 0                                                     # padding ignored
        return row[real].sum(), int(real.sum())

    def named_c_params(self):
        """parameters under the C code's names"""
        out = {"shared_embedding": self.shared_embedding}
        if self.c["positional"] == "learned":
            out["positional_embedding"] = self.positional_embedding
        for side, layers in (("encoder", self.encoder), ("decoder", self.decoder)):
            for l, layer in enumerate(layers):
                for n, p in layer.named_parameters():
                    n = n.replace("W_1.weight", "W_1").replace("W_1.bias", "b_1")
                    n = n.replace("W_2.weight", "W_2").replace("W_2.bias", "b_2")
                    n = n.replace(".weight", "").replace(".", "/")
                    out["%s/layer_%02d/%s" % (side, l, n)] = p
        return out


def make_batch():
    """three sentence pairs, right-padded as src/batch.c builds them:
    src = x EOS, tgt_in = BOS y, tgt_out = y EOS, padding 0"""
    rng = np.random.RandomState(1234)
    srcs = [rng.randint(4, 11, n).tolist() for n in (4, 2, 6)]
    tgts = [rng.randint(4, 11, n).tolist() for n in (3, 5, 1)]
    S = max(len(s) for s in srcs) + 1
    T = max(len(t) for t in tgts) + 1
    B = len(srcs)
    src = np.zeros((B, S), np.int32)
    tin = np.zeros((B, T), np.int32)
    tout = np.zeros((B, T), np.int32)
    for b in range(B):
        src[b, :len(srcs[b]) + 1] = srcs[b] + [2]
        tin[b, :len(tgts[b]) + 1] = [1] + tgts[b]
        tout[b, :len(tgts[b]) + 1] = tgts[b] + [2]
    return {"src": src, "tgt_in": tin, "tgt_out": tout,
            "src_len": np.array([len(s) + 1 for s in srcs], np.int32),
            "tgt_len": np.array([len(t) + 1 for t in tgts], np.int32),
            "sent_id": np.array([5, 0, 9], np.uint32)}


def to_torch(batch):
    return {k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()}


def lrate(c, step):
    """eq. 3"""
    return c["lr_factor"] * c["d_model"] ** -0.5 * min(step ** -0.5, step * c["warmup"] ** -1.5)


def run_case(cfg, grad_step):
    init = init_params(cfg)
    batch = make_batch()
    tb = to_torch(batch)
    model = Transformer(cfg)
    params = model.named_c_params()
    table = param_table(cfg)
    assert sorted(params) == sorted(n for n, *_ in table), "name mismatch"
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(torch.from_numpy(init[n].astype(np.float64)).reshape(p.shape))

    # loss and gradients of the summed loss, dropout on (training step grad_step)
    drop = Dropout(cfg, grad_step, batch["sent_id"], True)
    loss, ntok = model.loss_sum(tb, drop)
    model.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in params.items()}
    eval_loss, _ = model.loss_sum(tb, Dropout(cfg, grad_step, batch["sent_id"], False))

    # 10 Adam steps on the same batch, dropout off, loss / target tokens
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(cfg["adam_beta1"], cfg["adam_beta2"]),
                           eps=cfg["adam_eps"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lrate(cfg, i + 1))
    nodrop = Dropout(cfg, 0, batch["sent_id"], False)
    losses = []
    for step in range(1, 11):
        opt.zero_grad()
        l, n = model.loss_sum(tb, nodrop)
        (l / n).backward()
        losses.append(float(l) / n)
        opt.step()
        sched.step()
    with torch.no_grad():
        final = float(model.loss_sum(tb, nodrop)[0]) / ntok

    offs, o = [], 0
    for n, r, c, _ in table:
        offs.append(o)
        o += r * c
    flat_init = np.concatenate([init[n].reshape(-1) for n, *_ in table]).astype(np.float32)
    flat_grad = np.concatenate([grads[n].reshape(-1) for n, *_ in table]).astype(np.float64)
    return {"batch": batch, "params": flat_init, "grads": flat_grad, "loss_sum": float(loss),
            "eval_loss_sum": float(eval_loss), "n_tokens": ntok, "adam_losses": np.array(losses),
            "adam_final_loss": final, "names": [n for n, *_ in table], "offsets": np.array(offs, np.int64),
            "shapes": np.array([[r, c] for _, r, c, _ in table], np.int64)}


BASE = dict(n_layers=2, d_model=8, n_heads=2, d_k=3, d_v=5, d_ff=12, vocab_size=11, max_len=10,
            ln_eps=1e-6, dropout=0.1, label_smoothing=0.1, warmup=4, lr_factor=1.0, adam_beta1=0.9,
            adam_beta2=0.98, adam_eps=1e-9, seed=20171206)
INT_KEYS = ("n_layers", "d_model", "n_heads", "d_k", "d_v", "d_ff", "vocab_size", "max_len", "warmup")
FLOAT_KEYS = ("ln_eps", "dropout", "label_smoothing", "lr_factor", "adam_beta1", "adam_beta2", "adam_eps")
GRAD_STEP = 5


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/torch_reference/fixtures.h5"
    with h5py.File(out, "w") as f:
        f.attrs["generator"] = "tests/torch_reference/make_fixtures.py, torch %s, float64" % torch.__version__
        for positional in ("sinusoid", "learned"):
            cfg = dict(BASE, positional=positional)
            r = run_case(cfg, GRAD_STEP)
            g = f.create_group(positional)
            for k in INT_KEYS:
                g.attrs[k] = np.int64(cfg[k])
            for k in FLOAT_KEYS:
                g.attrs[k] = np.float64(cfg[k])
            g.attrs["seed"] = np.uint64(cfg["seed"])
            g.attrs["positional"] = np.bytes_(positional)
            g.attrs["grad_step"] = np.int64(GRAD_STEP)
            g.attrs["loss_sum"] = np.float64(r["loss_sum"])
            g.attrs["eval_loss_sum"] = np.float64(r["eval_loss_sum"])
            g.attrs["n_tokens"] = np.int64(r["n_tokens"])
            g.attrs["adam_final_loss"] = np.float64(r["adam_final_loss"])
            for k, v in r["batch"].items():
                g.create_dataset(k, data=v)
            g.create_dataset("params", data=r["params"])
            g.create_dataset("grads", data=r["grads"])
            g.create_dataset("adam_losses", data=r["adam_losses"])
            g.create_dataset("tensor_names", data=np.array(r["names"], dtype="S96"))
            g.create_dataset("tensor_offsets", data=r["offsets"])
            g.create_dataset("tensor_shapes", data=r["shapes"])
            print("%s: loss_sum %.6f (eval %.6f) over %d tokens; Adam losses %s -> %.6f" % (
                positional, r["loss_sum"], r["eval_loss_sum"], r["n_tokens"],
                " ".join("%.4f" % x for x in r["adam_losses"]), r["adam_final_loss"]))


if __name__ == "__main__":
    main()
