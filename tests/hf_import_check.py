"""Import of Marian directories built in transformers (run by
tests/test_hf_import.sh under .venv-hf; issue 45, docs/hf-export.md).

    hf_import_check.py WORK

Builds a tiny MarianMTModel with random weights in our conventions (ReLU,
scaled tied embeddings, pad 0, decoder start 1, EOS 2, a SentencePiece model
trained here), saves it with save_pretrained, then damages copies of it the
ways a user's directory can be damaged.  Every refusal must be exit 2 with
one stderr line naming the file and the problem, and leave no file behind;
every accepted variant must give the parameters of the undamaged import,
bitwise.  Where the damage matters to transformers (stored positions, vocab
order), transformers itself is the reference that it does."""

import json
import os
import random
import shutil
import subprocess
import sys

import h5py
import numpy as np
import sentencepiece as spm
import torch
from safetensors.torch import save_file
from transformers import MarianConfig, MarianMTModel, MarianTokenizer

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPORT = [sys.executable, os.path.join(TOP, "analysis", "hf_import.py")]
EN = "a the man woman dog cat sees eats big small red blue house tree runs sleeps".split()


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def train_spm(work):
    """A SentencePiece model with our special ids (src/cmd/prepare.c)."""
    r = random.Random(3)
    with open(f"{work}/text.txt", "w") as f:
        for _ in range(400):
            f.write(" ".join(r.choice(EN) for _ in range(r.randint(3, 8))) + ".\n")
    spm.SentencePieceTrainer.train(input=f"{work}/text.txt", model_prefix=f"{work}/sp", vocab_size=60,
                                   model_type="bpe", pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                                   character_coverage=1.0, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=f"{work}/sp.model")
    return [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]


def base_model(V):
    cfg = MarianConfig(vocab_size=V, decoder_vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1,
                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                       decoder_ffn_dim=32, max_position_embeddings=64, activation_function="relu",
                       scale_embedding=True, pad_token_id=0, eos_token_id=2, decoder_start_token_id=1,
                       share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
                       forced_eos_token_id=None)   # generation settings: none in config.json
    torch.manual_seed(0)
    return MarianMTModel(cfg).eval()


def save_dir(model, d, work, **kw):
    """save_pretrained plus the tokenizer files MarianTokenizer reads."""
    model.save_pretrained(d, safe_serialization=True, **kw)
    for name in ("source.spm", "target.spm"):
        shutil.copy(f"{work}/sp.model", f"{d}/{name}")
    pieces = PIECES
    with open(f"{d}/vocab.json", "w") as f:
        json.dump({p: i for i, p in enumerate(pieces)}, f)


def variant(work, name, base="base"):
    d = f"{work}/{name}"
    shutil.copytree(f"{work}/{base}", d)
    return d


def run_import(work, d, data_out=True, data_path=None):
    """(rc, stdout, stderr, files written) of hf_import.py d into a fresh folder."""
    out = f"{work}/out_{os.path.basename(d)}"
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cmd = IMPORT + [d, f"{out}/m.h5"] + (["--data-out", data_path or f"{out}/v.h5"] if data_out else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, sorted(os.listdir(out)), out


def refused(work, d, file_part, problem, what, **kw):
    rc, _, err, left, _ = run_import(work, d, **kw)
    lines = err.strip().splitlines()
    if rc != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
        fail(f"{what}: exit {rc}, {len(lines)} stderr lines, expected exit 2 and one 'error:' line: {err[-600:]}")
    if file_part not in lines[0] or problem not in lines[0]:
        fail(f"{what}: the line lacks {file_part!r} or {problem!r}: {lines[0]}")
    if left:
        fail(f"{what}: refused, yet left {left}")
    print(f"ok: {what}: exit 2, nothing written: {lines[0]}")


def params(path):
    with h5py.File(path, "r") as f:
        out = {}
        f["params"].visititems(lambda n, o: out.__setitem__(n, o[()].tobytes()) if isinstance(o, h5py.Dataset) else None)
    return out


def accepted(work, d, what, note=None):
    """Import d; its parameters must be the undamaged import's, bitwise."""
    rc, out, err, left, folder = run_import(work, d)
    if rc != 0:
        fail(f"{what}: exit {rc}: {err.strip()}")
    if note and note not in out:
        fail(f"{what}: stdout lacks {note!r}: {out}")
    if left != ["m.h5", "v.h5"]:
        fail(f"{what}: wrote {left}")
    if BASE and params(f"{folder}/m.h5") != BASE:
        fail(f"{what}: parameters differ from the undamaged import")
    print(f"ok: {what}: imported, parameters bitwise those of the undamaged import"
          + (f"; says '{note}'" if note else ""))
    return f"{folder}/m.h5"


def logits(d):
    m = MarianMTModel.from_pretrained(d).eval()
    with torch.no_grad():
        return m(input_ids=torch.tensor([[5, 9, 14, 7, 2]]), decoder_input_ids=torch.tensor([[1, 6, 11, 8]])).logits


def state_with_positions(model, change=None):
    """The state dict as safetensors holds it, positions included (which
    save_pretrained leaves out), optionally altered."""
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if change:
        change(sd)
    return sd


def check_positions(work, model):
    d = variant(work, "pos_sin")
    save_file(state_with_positions(model), f"{d}/model.safetensors", metadata={"format": "pt"})
    accepted(work, d, "stored positions equal to the sinusoids")
    g = torch.Generator().manual_seed(1)
    d = variant(work, "pos_learned")
    key = "model.decoder.embed_positions.weight"
    save_file(state_with_positions(model, lambda sd: sd[key].add_(0.1 * torch.randn(sd[key].shape, generator=g))),
              f"{d}/model.safetensors", metadata={"format": "pt"})
    delta = float((logits(d) - logits(f"{work}/base")).abs().max())
    if delta < 1e-2:
        fail(f"stored positions: transformers' logits change by only {delta:.2e} (the reference must use them)")
    refused(work, d, "embed_positions.weight", "is not the sinusoids",
            f"altered stored positions (transformers' logits change by {delta:.2f})")


def check_vocab(work):
    d = variant(work, "vocab_shuffled")
    ids = list(range(4, len(PIECES)))
    random.Random(5).shuffle(ids)
    order = list(range(4)) + ids
    with open(f"{d}/vocab.json", "w") as f:
        json.dump({PIECES[j]: i for i, j in enumerate(order)}, f)
    text = "a big red dog sees the small cat."
    ours = spm.SentencePieceProcessor(model_file=f"{work}/sp.model").encode(text) + [2]
    hf = MarianTokenizer.from_pretrained(d)(text)["input_ids"]
    if hf == ours:
        fail("shuffled vocab.json: MarianTokenizer's ids equal SentencePiece's (the reference must differ)")
    refused(work, d, "vocab.json", "ids differ from source.spm", "vocab.json ids shuffled (4..V-1), --data-out")
    refused(work, d, "vocab.json", "ids differ from source.spm", "vocab.json ids shuffled, checkpoint only",
            data_out=False)
    d = variant(work, "vocab_foreign_piece")
    with open(f"{d}/vocab.json", "w") as f:
        json.dump({("\u2581notapiece" if i == 10 else p): i for i, p in enumerate(PIECES)}, f)
    refused(work, d, "vocab.json", "'\u2581notapiece', SentencePiece's", "a vocab.json piece SentencePiece cannot produce")
    d = variant(work, "no_spm")
    os.remove(f"{d}/source.spm")
    os.remove(f"{d}/target.spm")
    refused(work, d, "no_spm", "no source.spm", "--data-out without source.spm")


def check_damaged(work):
    """Damaged weights; safetensors' own reader is the reference that they are."""
    from safetensors.numpy import load_file

    raw = open(f"{work}/base/model.safetensors", "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = raw[8:8 + n].replace(b'"data_offsets":[', b'"data_offsets":{', 1)
    cases = [("empty", b"", "empty file"), ("truncated", raw[:len(raw) // 2], "truncated"),
             ("random", random.Random(9).randbytes(4096), "not a safetensors file"),
             ("header", raw[:8] + header + raw[8 + n:], "damaged safetensors header"),
             ("short_header", raw[:5], "truncated")]
    for name, data, problem in cases:
        d = variant(work, f"st_{name}")
        with open(f"{d}/model.safetensors", "wb") as f:
            f.write(data)
        try:
            load_file(f"{d}/model.safetensors")
            fail(f"{name} model.safetensors: safetensors reads it (the reference must refuse)")
        except Exception:   # noqa: BLE001: any refusal of safetensors' reader
            pass
        refused(work, d, f"st_{name}/model.safetensors", problem, f"{name} model.safetensors")


def check_dtypes(work, model):
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        low = base_model(len(PIECES))
        low.load_state_dict(model.state_dict())
        low = low.to(dtype)
        save_dir(low, f"{work}/{tag}", work)
        up = base_model(len(PIECES))
        up.load_state_dict({k: v.float() for k, v in low.state_dict().items()})   # torch's upcast: the reference
        save_dir(up, f"{work}/{tag}_up", work)
        rc, _, err, _, folder = run_import(work, f"{work}/{tag}_up")
        if rc:
            fail(f"{tag} upcast by torch: {err}")
        global BASE
        saved, BASE = BASE, params(f"{folder}/m.h5")
        accepted(work, f"{work}/{tag}", f"{tag} weights (= torch's float32 upcast)",
                 note=f"{tag} weights upcast to float32")
        BASE = saved


def check_sharded(work, model):
    d = f"{work}/sharded"
    save_dir(model, d, work, max_shard_size="20KB")
    shards = [f for f in os.listdir(d) if f.startswith("model-") and f.endswith(".safetensors")]
    if len(shards) < 2 or not os.path.exists(f"{d}/model.safetensors.index.json"):
        fail(f"sharded save: {sorted(os.listdir(d))}")
    accepted(work, d, f"sharded safetensors ({len(shards)} shards and model.safetensors.index.json)")
    d = variant(work, "sharded_missing", "sharded")
    os.remove(f"{d}/{sorted(shards)[-1]}")
    refused(work, d, "model.safetensors.index.json", "is not a file", "a shard named by the index missing")
    d = variant(work, "bin_only")
    os.remove(f"{d}/model.safetensors")
    torch.save(model.state_dict(), f"{d}/pytorch_model.bin")
    refused(work, d, "bin_only", "only pytorch_model.bin", "pytorch_model.bin only")


def check_normalize_before(work):
    d = variant(work, "prenorm")
    c = json.load(open(f"{d}/config.json"))
    c["normalize_before"] = True
    json.dump(c, open(f"{d}/config.json", "w"))
    if not torch.equal(logits(d), logits(f"{work}/base")):
        fail("normalize_before: transformers' logits change (the reference says it ignores the key)")
    accepted(work, d, "normalize_before = true (transformers' logits unchanged by it)",
             note="normalize_before = True ignored")


def check_config_types(work):
    d = variant(work, "config_string")
    c = json.load(open(f"{d}/config.json"))
    c["d_model"] = "16"
    json.dump(c, open(f"{d}/config.json", "w"))
    refused(work, d, "config_string/config.json", "d_model = '16', not a positive integer", "a size as a string")


def check_write_failure(work):
    """The dataset cannot be written after the checkpoint was: neither stays."""
    rc, _, err, left, _ = run_import(work, f"{work}/base", data_path=f"{work}/no/such/dir/v.h5")
    lines = err.strip().splitlines()
    if rc != 2 or len(lines) != 1 or "no/such/dir" not in lines[0] or left:
        fail(f"unwritable --data-out: exit {rc}, left {left}: {err[-400:]}")
    print(f"ok: unwritable --data-out: exit 2, no checkpoint left: {lines[0]}")


def main(work):
    global PIECES, BASE
    torch.set_num_threads(1)
    PIECES, BASE = train_spm(work), None
    model = base_model(len(PIECES))
    save_dir(model, f"{work}/base", work)
    BASE = params(accepted(work, f"{work}/base", "the undamaged directory"))
    check_positions(work, model)
    check_vocab(work)
    check_damaged(work)
    check_dtypes(work, model)
    check_sharded(work, model)
    check_normalize_before(work)
    check_config_types(work)
    check_write_failure(work)


PIECES, BASE = None, None

if __name__ == "__main__":
    main(sys.argv[1])
