"""Independent check of an attention-map file (docs/attention.md) against a
NumPy forward pass of the checkpoint (analysis/np_model.py: float64,
written from the paper, not from src/): row sums, masks, shapes, token
strings and every map."""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "analysis"))
from np_model import NumpyTransformer  # noqa: E402

attn_path, ckpt_path = sys.argv[1], sys.argv[2]
A, C = h5py.File(attn_path, "r"), h5py.File(ckpt_path, "r")
cfg = dict(l.split(" = ", 1) for l in C.attrs["config"].splitlines())
N, h = int(cfg["n_layers"]), int(cfg["n_heads"])
params = {}
C["params"].visititems(lambda n, o: params.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
model = NumpyTransformer(cfg, params)
names = {0: "<pad>", 1: "<s>", 2: "</s>", 3: "<unk>"}


def forward(src, tin):
    enc_maps = []
    dec = model.decode(tin, model.encode(src, maps=enc_maps))
    return np.stack(enc_maps), np.stack(dec["decoder_self"]), np.stack(dec["cross"])


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
