"""The mapping between our checkpoints (docs/checkpoint.md) and Hugging Face's
MarianMT (docs/hf-export.md), shared by hf_export.py and hf_import.py.

Only numpy, h5py and safetensors: neither direction needs torch, which only
the equivalence test (tests/test_hf_export.sh) loads."""

import struct

import numpy as np

# token ids of every dataset (docs/dataset.md, TOK_* of src/batch.h)
PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL = {"<pad>": PAD, "<s>": BOS, "</s>": EOS, "<unk>": UNK}
# Marian's LayerNorms are torch.nn.LayerNorm(d_model) with its default eps;
# MarianConfig has no key for it
MARIAN_LN_EPS = 1e-5
# a key of config.json that transformers keeps as an attribute and ignores:
# what the export knew and Marian's config cannot say (import restores it)
EXTRA_KEY = "transformer_checkpoint"


def safetensors_numpy():
    """safetensors' numpy API, or the one-line error saying where it is."""
    from common import AnalysisError

    try:
        import safetensors.numpy
    except ImportError:
        raise AnalysisError("safetensors", "not installed: run this with .venv-hf/bin/python "
                            "(bash tests/install-deps.sh or make venv-hf; docs/hf-export.md)") from None
    return safetensors.numpy


def check_finite(path, cfg):
    """The config values that go into the JSON files as numbers must be
    finite: "len_alpha = nan" was written as NaN, which is not JSON, and
    transformers could not read the export (CTranslate2 neither, ln_eps)."""
    from common import AnalysisError

    for key in ("len_alpha", "dropout", "ln_eps"):
        if key in cfg:
            try:
                v = float(cfg[key])
            except ValueError:
                v = None
            if v is None or not np.isfinite(v):
                raise AnalysisError(path, f"config {key} = {cfg[key]}: not a finite number")


def check_special_pieces(where, pieces):
    """Our four special tokens at their ids (docs/dataset.md): an export that
    starts decoding from another piece's embedding translates nothing."""
    from common import AnalysisError

    for piece, i in SPECIAL.items():
        if pieces[i] != piece:
            raise AnalysisError(where, f"id {i} is {pieces[i]!r}, ours is {piece!r}")


def check_sizes(where, cfg):
    """The sizes both directions read from our config text (a dict of its
    key = value lines) are positive integers: a damaged config was a
    KeyError or ValueError further on."""
    from common import AnalysisError

    for key in ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "vocab_size", "max_len"):
        v = cfg.get(key)
        if v is None or not v.strip().isdigit() or int(v) < 1:
            raise AnalysisError(where, f"config {key} = {v}: expected a positive integer")   # None: missing


def model_dim_permutation(d):
    """perm[m] = our dimension that is Marian's dimension m.

    Our sinusoids put sin on even and cos on odd dimensions (section 3.5,
    src/model.c positional_sinusoids); Marian's put all sines first and all
    cosines second (MarianSinusoidalPositionalEmbedding), same frequencies.
    So Marian's vector is ours taken at [0, 2, 4, ..., 1, 3, 5, ...]."""
    return np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])


def layer_names(n_layers):
    """(our prefix, Marian prefix, [(our sub-layer, Marian sub-layer, kind)]) per layer."""
    enc = [("self_attention", "self_attn", "attn"), ("self_attention_norm", "self_attn_layer_norm", "norm"),
           ("ffn", None, "ffn"), ("ffn_norm", "final_layer_norm", "norm")]
    dec = [("self_attention", "self_attn", "attn"), ("self_attention_norm", "self_attn_layer_norm", "norm"),
           ("cross_attention", "encoder_attn", "attn"), ("cross_attention_norm", "encoder_attn_layer_norm", "norm"),
           ("ffn", None, "ffn"), ("ffn_norm", "final_layer_norm", "norm")]
    out = []
    for side, subs in (("encoder", enc), ("decoder", dec)):
        for l in range(n_layers):
            out.append((f"{side}/layer_{l:02d}", f"model.{side}.layers.{l}", subs))
    return out


def tensor_map(n_layers):
    """[(our name, Marian name, how)]: how says which axes carry d_model.
    'in' = columns (inputs of y = x W^T), 'out' = rows, 'vec' = a d_model
    vector, 'emb' = embedding columns; biases Marian has and we do not are
    listed by marian_zero_biases()."""
    m = [("shared_embedding", "model.shared.weight", "emb")]
    for ours, hf, subs in layer_names(n_layers):
        for o_sub, h_sub, kind in subs:
            if kind == "attn":
                for w, p in (("W_q", "q_proj"), ("W_k", "k_proj"), ("W_v", "v_proj")):
                    m.append((f"{ours}/{o_sub}/{w}", f"{hf}.{h_sub}.{p}.weight", "in"))
                m.append((f"{ours}/{o_sub}/W_o", f"{hf}.{h_sub}.out_proj.weight", "out"))
            elif kind == "norm":
                m.append((f"{ours}/{o_sub}/gamma", f"{hf}.{h_sub}.weight", "vec"))
                m.append((f"{ours}/{o_sub}/beta", f"{hf}.{h_sub}.bias", "vec"))
            else:
                m.append((f"{ours}/{o_sub}/W_1", f"{hf}.fc1.weight", "in"))
                m.append((f"{ours}/{o_sub}/b_1", f"{hf}.fc1.bias", "none"))
                m.append((f"{ours}/{o_sub}/W_2", f"{hf}.fc2.weight", "out"))
                m.append((f"{ours}/{o_sub}/b_2", f"{hf}.fc2.bias", "vec"))
    return m


def expected_shape(name, cfg):
    """The shape of our tensor `name` under config cfg (docs/checkpoint.md)."""
    d, dff, V = int(cfg["d_model"]), int(cfg["d_ff"]), int(cfg["vocab_size"])
    hk, hv = int(cfg["n_heads"]) * int(cfg["d_k"]), int(cfg["n_heads"]) * int(cfg["d_v"])
    leaf = name.rsplit("/", 1)[-1]
    return {"shared_embedding": (V, d), "positional_embedding": (int(cfg["max_len"]), d),
            "W_q": (hk, d), "W_k": (hk, d), "W_v": (hv, d), "W_o": (d, hv), "gamma": (d,), "beta": (d,), "W_1": (dff, d), "b_1": (dff,), "W_2": (d, dff), "b_2": (d,)}[leaf]


def check_shapes(where, cfg, params):
    """Every tensor the exports read is present with the shape cfg gives it:
    a damaged or hand-edited checkpoint stops here with one line, not as a
    broadcast error or a silently wrong model further on."""
    from common import AnalysisError

    names = [ours for ours, _, _ in tensor_map(int(cfg["n_layers"]))]
    if cfg.get("positional", "sinusoid") == "learned":
        names.append("positional_embedding")   # row E's table, which ct2_export.py exports
    for ours in names:
        if ours not in params:
            raise AnalysisError(where, f"checkpoint lacks params/{ours}")
        got, want = tuple(params[ours].shape), expected_shape(ours, cfg)
        if got != want:
            raise AnalysisError(where, f"params/{ours} has shape {list(got)}, its config says {list(want)}")


# mask_heads' kinds (docs/attention.md) and the attention block of each
HEAD_BLOCKS = {"enc": "encoder/layer_{:02d}/self_attention", "dec_self": "decoder/layer_{:02d}/self_attention",
               "cross": "decoder/layer_{:02d}/cross_attention"}


def _indices(text, n):
    """'*': all of range(n); a number below n: it; else None (src/head_mask.c)."""
    if text == "*":
        return range(n)
    return [int(text)] if text.isdigit() and int(text) < n else None


def masked_heads(where, cfg):
    """{(kind, layer, head)} that the config key mask_heads masks."""
    from common import AnalysisError

    spec, N, H = cfg.get("mask_heads", "").strip(), int(cfg["n_layers"]), int(cfg["n_heads"])
    out = set()
    for e in spec.split(",") if spec else []:
        kind, layer, heads = e.split(":") if e.count(":") == 2 else ("", "", "")
        layers, hs = _indices(layer, N), [_indices(h, H) for h in heads.split("+")]
        if kind not in HEAD_BLOCKS or layers is None or any(h is None for h in hs):
            raise AnalysisError(where, f"config mask_heads = {spec}: {e!r} is not KIND:LAYER:HEADS of this model")
        out |= {(kind, l, h) for l in layers for g in hs for h in g}
    return out


def apply_head_mask(where, cfg, params):
    """params with the W_o columns of every head mask_heads masks set to 0:
    our gate of 0 on a head's output before W_o (docs/attention.md) is that
    same function, and neither Marian nor CTranslate2 has a gate (their
    exports computed every head of a pruned model)."""
    dv, out = int(cfg["d_v"]), dict(params)
    for kind, l, h in sorted(masked_heads(where, cfg)):
        name = HEAD_BLOCKS[kind].format(l) + "/W_o"
        out[name] = np.array(out[name], np.float32)
        out[name][:, h * dv:(h + 1) * dv] = 0
    return out


def marian_zero_biases(n_layers):
    """Marian's attention biases (q/k/v/out_proj.bias): our attention has none
    (section 3.2.2), so they are exported as zeros; the output bias
    final_logits_bias [1, V] likewise (our pre-softmax layer is E alone)."""
    names = []
    for _, hf, subs in layer_names(n_layers):
        for _, h_sub, kind in subs:
            if kind == "attn":
                names += [f"{hf}.{h_sub}.{p}.bias" for p in ("q_proj", "k_proj", "v_proj", "out_proj")]
    return names


def to_marian(w, how, perm):
    """Our tensor -> Marian's (a permutation: exact, no arithmetic)."""
    if how in ("in", "emb"):
        return np.ascontiguousarray(w[:, perm])
    if how == "out":
        return np.ascontiguousarray(w[perm, :])
    if how == "vec":
        return np.ascontiguousarray(w[perm])
    return np.ascontiguousarray(w)


def from_marian(w, how, perm):
    """Marian's tensor -> ours (the inverse permutation)."""
    return to_marian(w, how, np.argsort(perm))


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & 0xFFFFFFFFFFFFFFFF


def checksum64(data):
    """checksum64 of src/util.c over bytes (the per-tensor 'checksum' attribute)."""
    M = 0xFFFFFFFFFFFFFFFF
    P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
    n = len(data)
    nw = n // 32
    # four independent lanes over 64-bit words; Python's integers with an
    # explicit mask are 4x faster here than numpy's uint64 on 4-element rows
    a0, a1, a2, a3 = (P1 + P2) & M, P2, 0, (-P1) & M
    for w0, w1, w2, w3 in struct.iter_unpack("<4Q", memoryview(data)[:nw * 32]):
        x = (a0 + w0 * P2) & M
        a0 = (((x << 31) | (x >> 33)) * P1) & M
        x = (a1 + w1 * P2) & M
        a1 = (((x << 31) | (x >> 33)) * P1) & M
        x = (a2 + w2 * P2) & M
        a2 = (((x << 31) | (x >> 33)) * P1) & M
        x = (a3 + w3 * P2) & M
        a3 = (((x << 31) | (x >> 33)) * P1) & M
    h = (_rotl(a0, 1) + _rotl(a1, 7) + _rotl(a2, 12) + _rotl(a3, 18) + n) & M
    for b in data[nw * 32:]:
        h = (_rotl(h ^ ((b * P3) & M), 11) * P1) & M
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    h ^= h >> 32
    return h


def vocab_hash(pieces):
    """dataset_vocab_hash of src/dataset.c: FNV-1a 64 over the int32 vocab
    size, then every piece with its NUL, in id order."""
    h = 1469598103934665603
    data = len(pieces).to_bytes(4, "little") + b"".join(p.encode("utf-8") + b"\0" for p in pieces)
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


# dtypes of a safetensors header we read, and their numpy layout; bf16 has
# none in numpy: its 16 bits are the high half of a float32
SAFETENSORS_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2)}
# safetensors' own limit on the JSON header (a larger length is a damaged file)
SAFETENSORS_MAX_HEADER = 100_000_000


def _header(path, data):
    """The JSON header of a safetensors file, checked, as {name: entry}."""
    import json

    from common import AnalysisError

    if len(data) == 0:
        raise AnalysisError(path, "empty file (not a safetensors file)")
    if len(data) < 8:
        raise AnalysisError(path, f"truncated: {len(data)} bytes, less than the 8-byte header length")
    n = int.from_bytes(data[:8], "little")
    if n > SAFETENSORS_MAX_HEADER:
        raise AnalysisError(path, f"not a safetensors file (header length {n} bytes)")
    if 8 + n > len(data):
        raise AnalysisError(path, f"truncated: header of {n} bytes, the file has {len(data) - 8} after its length")
    try:
        h = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise AnalysisError(path, "damaged safetensors header (not JSON)") from None
    if not isinstance(h, dict):
        raise AnalysisError(path, "damaged safetensors header (not a JSON object)")
    h.pop("__metadata__", None)
    return h, 8 + n


def _entry(path, name, e, size):
    """(dtype, shape, begin, end) of one header entry, checked against the data size."""
    from common import AnalysisError

    try:
        dtype, shape, (b, end) = e["dtype"], [int(s) for s in e["shape"]], [int(o) for o in e["data_offsets"]]
    except (TypeError, KeyError, ValueError):
        raise AnalysisError(path, f"damaged safetensors header: entry {name!r}") from None
    if not 0 <= b <= end:
        raise AnalysisError(path, f"damaged safetensors header: {name} has offsets [{b}, {end}]")
    if end > size:
        raise AnalysisError(path, f"truncated: {name} ends at byte {end} of the data, the file holds {size}")
    if dtype in SAFETENSORS_DTYPES and end - b != int(np.prod(shape)) * SAFETENSORS_DTYPES[dtype][1]:
        raise AnalysisError(path, f"damaged safetensors header: {name} {dtype} {shape} with {end - b} bytes")
    return dtype, shape, b, end


def to_float32(raw, dtype, shape):
    """float32 of a tensor's little-endian bytes: F16 and BF16 upcast exactly."""
    a = np.frombuffer(raw, dtype=SAFETENSORS_DTYPES[dtype][0])
    if dtype == "BF16":
        a = (a.astype("<u4") << 16).view("<f4")
    return a.astype(np.float32).reshape(shape)


def read_safetensors(path, wanted):
    """{name: float32 array} for the names in `wanted` present in a
    safetensors file, and {name: stored dtype}.  Read here rather than by
    safetensors.numpy, which has no bf16 and raises a traceback on a damaged
    file: each problem is one AnalysisError naming the file."""
    from common import AnalysisError

    try:
        with open(path, "rb") as f:
            data = memoryview(f.read())
    except OSError as e:
        raise AnalysisError(path, f"unreadable: {e.strerror}") from None
    header, start = _header(path, data)
    size = len(data) - start
    entries = {name: _entry(path, name, e, size) for name, e in header.items()}
    end = max((e[3] for e in entries.values()), default=0)
    if end != size:
        raise AnalysisError(path, f"damaged: the tensors end at byte {end} of the data, the file holds {size}")
    out, dtypes = {}, {}
    for name in wanted:
        if name not in entries:
            continue
        dtype, shape, b, e = entries[name]
        if dtype not in SAFETENSORS_DTYPES:
            raise AnalysisError(path, f"{name} is {dtype}: only F32, F16 and BF16 weights are read")
        out[name], dtypes[name] = to_float32(data[start + b:start + e], dtype, shape), dtype
    return out, dtypes


def marian_sinusoids(n_pos, d):
    """MarianSinusoidalPositionalEmbedding's table [n_pos, d] (all sines,
    then all cosines), computed as transformers does: float64, then float32."""
    j = np.arange(d)
    angle = np.arange(n_pos)[:, None] / np.power(10000, 2 * (j // 2) / d)[None, :]
    return np.concatenate([np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])], axis=1).astype(np.float32)
