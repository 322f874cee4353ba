"""Independent check of an attention-map file (docs/attention.md) against a
NumPy forward pass of the checkpoint (float64, written from the paper, not
from src/): row sums, masks, shapes, token strings and every map."""
import sys
import h5py
import numpy as np

attn_path, ckpt_path = sys.argv[1], sys.argv[2]
A, C = h5py.File(attn_path, "r"), h5py.File(ckpt_path, "r")
cfg = dict(l.split(" = ", 1) for l in C.attrs["config"].splitlines())
N, d, h, dk, dv = (int(cfg[k]) for k in ("n_layers", "d_model", "n_heads", "d_k", "d_v"))
eps = float(cfg["ln_eps"])
P = lambda n: C["params/" + n][()].astype(np.float64)
E = P("shared_embedding")
names = {0: "<pad>", 1: "<s>", 2: "</s>", 3: "<unk>"}


def pe(T):
    pos = np.arange(T)[:, None]
    j = np.arange(d)[None, :]
    a = pos / 10000.0 ** ((j - j % 2) / d)
    return np.where(j % 2 == 0, np.sin(a), np.cos(a))


def embed(tok):
    return E[tok] * np.sqrt(d) + pe(len(tok))


def ln(r, pre):
    mu = r.mean(-1, keepdims=True)
    var = ((r - mu) ** 2).mean(-1, keepdims=True)
    return (r - mu) / np.sqrt(var + eps) * P(pre + "/gamma") + P(pre + "/beta")


def mha(x, mem, pre, causal):
    Q, K, V = x @ P(pre + "/W_q").T, mem @ P(pre + "/W_k").T, mem @ P(pre + "/W_v").T
    maps, ctx = [], []
    for i in range(h):
        s = Q[:, i * dk:(i + 1) * dk] @ K[:, i * dk:(i + 1) * dk].T / np.sqrt(dk)
        if causal:
            s = np.where(np.tri(len(x), len(mem), dtype=bool), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        maps.append(p)
        ctx.append(p @ V[:, i * dv:(i + 1) * dv])
    return np.concatenate(ctx, -1) @ P(pre + "/W_o").T, np.stack(maps)


def ffn(x, pre):
    hid = np.maximum(0, x @ P(pre + "/W_1").T + P(pre + "/b_1"))
    return hid @ P(pre + "/W_2").T + P(pre + "/b_2")


def forward(src, tin):
    x, enc_maps = embed(src), []
    for l in range(N):
        p = f"encoder/layer_{l:02d}"
        a, m = mha(x, x, p + "/self_attention", False); enc_maps.append(m)
        x = ln(x + a, p + "/self_attention_norm")
        x = ln(x + ffn(x, p + "/ffn"), p + "/ffn_norm")
    y, dec_maps, crs_maps = embed(tin), [], []
    for l in range(N):
        p = f"decoder/layer_{l:02d}"
        a, m = mha(y, y, p + "/self_attention", True); dec_maps.append(m)
        y = ln(y + a, p + "/self_attention_norm")
        a, m = mha(y, x, p + "/cross_attention", False); crs_maps.append(m)
        y = ln(y + a, p + "/cross_attention_norm")
        y = ln(y + ffn(y, p + "/ffn"), p + "/ffn_norm")
    return np.stack(enc_maps), np.stack(dec_maps), np.stack(crs_maps)


def ids(ds):
    out = []
    for t in ds[()]:
        t = t.decode() if isinstance(t, bytes) else t
        out.append({v: k for k, v in names.items()}.get(t, None) if not t.isdigit() else int(t))
    return np.array(out)


def check_group(g, src, tol=2e-5):
    tin = ids(g["tgt_tokens"])
    tout = ids(g["tgt_out_tokens"])
    S, T = len(src), len(tin)
    assert tin[0] == 1 and tout[-1] == 2 and (tin[1:] == tout[:-1]).all()
    enc, dec, crs = (g[k][()] for k in ("encoder_self", "decoder_self", "cross")) if "encoder_self" in g else \
        (None, g["decoder_self"][()], g["cross"][()])
    assert dec.shape == (N, h, T, T) and crs.shape == (N, h, T, S), (dec.shape, crs.shape)
    assert np.allclose(dec.sum(-1), 1, atol=1e-5) and np.allclose(crs.sum(-1), 1, atol=1e-5)
    assert (np.triu(np.ones((T, T)), 1)[None, None] * dec == 0).all(), "decoder self-attention not lower-triangular"
    re, rd, rc = forward(src, tin)
    err = max(np.abs(dec - rd).max(), np.abs(crs - rc).max())
    if enc is not None:
        assert enc.shape == (N, h, S, S)
        assert np.allclose(enc.sum(-1), 1, atol=1e-5)
        err = max(err, np.abs(enc - re).max())
    assert err < tol, f"maps differ from the NumPy forward pass by {err}"
    return err


worst, n = 0.0, 0
# a `transformer attention` file has /sentences; a training probe /step_*/sentences
tops = [A["sentences"]] if "sentences" in A else [A[k]["sentences"] for k in A if k.startswith("step_")]
assert tops
for g in (top[k] for top in tops for k in top):
    src = ids(g["src_tokens"])
    assert src[-1] == 2 and len(src) == g.attrs["src_len"] and g["tgt_tokens"].shape[0] == g.attrs["tgt_len"]
    worst = max(worst, check_group(g, src))
    n += 1
    if "greedy" in g:
        worst = max(worst, check_group(g["greedy"], src))
print("ok", n, worst)
