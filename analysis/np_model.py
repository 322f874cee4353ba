"""Our Transformer's forward pass in numpy (float64, evaluation mode: no
dropout), from a checkpoint's parameters as hf_export.read_checkpoint reads
them, for diagnostics that need activations no command writes.  It mirrors
src/model.c: embeddings x sqrt(d_model) plus the positional encoding
(section 3.4-3.5), post-norm sublayers LayerNorm(x + Sublayer(x))
(section 3.1), scaled dot-product attention (eq. 1) over the sequence's real
tokens, the position-wise FFN (eq. 2); written from the paper, not from
src/, so that it is an independent reference: tests/attention_check.py
compares every map of `transformer attention` with it, and
encoder_spread.py --check the cross-attention it measures."""

import math

import numpy as np


def sinusoids(n_pos, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section 3.5)."""
    pos = np.arange(n_pos)[:, None]
    i2 = np.arange(0, d, 2)[None, :]
    pe = np.zeros((n_pos, d))
    pe[:, 0::2] = np.sin(pos / 10000 ** (i2 / d))
    pe[:, 1::2] = np.cos(pos / 10000 ** (i2 / d))
    return pe


class NumpyTransformer:
    """cfg: the checkpoint's config (str values); params: {name: array} under
    the checkpoint's names (docs/checkpoint.md)."""

    def __init__(self, cfg, params):
        self.p = {k: np.asarray(v, np.float64) for k, v in params.items()}
        self.n_layers, self.d = int(cfg["n_layers"]), int(cfg["d_model"])
        self.h, self.d_k, self.d_v = int(cfg["n_heads"]), int(cfg["d_k"]), int(cfg["d_v"])
        self.eps = float(cfg.get("ln_eps", 1e-6))
        self.learned = cfg.get("positional", "sinusoid") == "learned"

    def embed(self, ids):
        x = self.p["shared_embedding"][ids] * math.sqrt(self.d)
        return x + (self.p["positional_embedding"][:len(ids)] if self.learned else sinusoids(len(ids), self.d))

    def layer_norm(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.p[name + "/gamma"] + self.p[name + "/beta"]

    def attention(self, name, xq, xkv, causal=False):
        """(output [Tq, d], weights [h, Tq, Tk], keys [h, Tk, d_k]) of multi-head attention (section 3.2.2)."""
        w = lambda m: self.p[f"{name}/{m}"]
        q = (xq @ w("W_q").T).reshape(len(xq), self.h, self.d_k).transpose(1, 0, 2)
        k = (xkv @ w("W_k").T).reshape(len(xkv), self.h, self.d_k).transpose(1, 0, 2)
        v = (xkv @ w("W_v").T).reshape(len(xkv), self.h, self.d_v).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(self.d_k)
        if causal:
            s = s + np.triu(np.full(s.shape[1:], -np.inf), 1)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        out = (a @ v).transpose(1, 0, 2).reshape(len(xq), self.h * self.d_v) @ w("W_o").T
        return out, a, k

    def ffn(self, name, x):
        p = lambda m: self.p[f"{name}/{m}"]
        return np.maximum(x @ p("W_1").T + p("b_1"), 0.0) @ p("W_2").T + p("b_2")

    def encode(self, src_ids, trace=None, maps=None):
        """The encoder's output [S, d]; trace (a list) gets x after the
        embedding and after each sublayer (1 + 2 N arrays), maps (a list)
        each layer's self-attention weights [h, S, S]."""
        x = self.embed(src_ids)
        keep = trace.append if trace is not None else (lambda _: None)
        keep(x)
        for l in range(self.n_layers):
            p = f"encoder/layer_{l:02d}/"
            o, a, _ = self.attention(p + "self_attention", x, x)
            if maps is not None:
                maps.append(a)
            x = self.layer_norm(x + o, p + "self_attention_norm")
            keep(x)
            x = self.layer_norm(x + self.ffn(p + "ffn", x), p + "ffn_norm")
            keep(x)
        return x

    def decode(self, tgt_in_ids, memory):
        """Per decoder layer, the target input teacher-forced: its
        self-attention weights [h, T, T], encoder-decoder attention weights
        [h, T, S] and that attention's keys [h, S, d_k], as lists under
        'decoder_self', 'cross' and 'cross_keys'."""
        y, out = self.embed(tgt_in_ids), {"decoder_self": [], "cross": [], "cross_keys": []}
        for l in range(self.n_layers):
            p = f"decoder/layer_{l:02d}/"
            o, a, _ = self.attention(p + "self_attention", y, y, causal=True)
            out["decoder_self"].append(a)
            y = self.layer_norm(y + o, p + "self_attention_norm")
            o, a, k = self.attention(p + "cross_attention", y, memory)
            out["cross"].append(a)
            out["cross_keys"].append(k)
            y = self.layer_norm(y + o, p + "cross_attention_norm")
            y = self.layer_norm(y + self.ffn(p + "ffn", y), p + "ffn_norm")
        return out
