"""encoder_spread.py and np_model.py: the numpy forward of a checkpoint
reproduces the cross-attention maps that `transformer attention` wrote for
it (an independent implementation against the C code), and the spread
falls to 0 where a planted checkpoint makes every encoder position alike."""

import os
import random
import shutil

import h5py
import numpy as np
import pytest

import encoder_spread as ES
import hf_marian as hm
from common import AnalysisError
from conftest import TINY, cli, cli_error, transformer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A dataset prepared from a planted word-for-word pair, a 2-layer model
    trained on it for 40 steps, and its attention file of dev pairs 0-3."""
    if not shutil.which("spm_train"):
        pytest.skip("no spm_train (Debian package sentencepiece): cannot prepare a dataset")
    top = tmp_path_factory.mktemp("spread")
    rnd = random.Random(3)
    en = "a the man woman dog cat sees eats big small red blue house tree runs sleeps".split()
    de = "ein der Mann Frau Hund Katze sieht isst gross klein rot blau Haus Baum rennt schlaeft".split()
    for name, n in (("train", 600), ("dev", 8)):
        with open(top / f"{name}.en", "w") as s, open(top / f"{name}.de", "w") as t:
            for _ in range(n):
                idx = [rnd.randrange(len(en)) for _ in range(rnd.randint(3, 7))]
                s.write(" ".join(en[i] for i in idx) + ".\n")
                t.write(" ".join(de[i] for i in idx) + ".\n")
    data = top / "d.h5"
    transformer("prepare", "--out", str(data), "--split", "train", str(top / "train.en"), str(top / "train.de"),
                "--split", "dev", str(top / "dev.en"), str(top / "dev.de"), "vocab_size=330", "max_len=24",
                "--jobs", "1")
    run = top / "run"
    keys = dict(TINY, n_layers="2", train_steps="40", ckpt_steps="40", eval_steps="0", max_len="24", vocab_size="330",
                lr_peak="3e-3")      # the paper's rule at d_model 16 peaks at 0.08: a collapsed encoder
    transformer("train", f"data={data}", f"run_dir={run}", *[f"{k}={v}" for k, v in keys.items()])
    ckpt = run / "ckpt_00000040.h5"
    attn = top / "attn.h5"
    transformer("attention", "--checkpoint", str(ckpt), "--data", str(data), "--sentences", "0-3",
                "--output", str(attn))
    return {"top": top, "data": data, "ckpt": ckpt, "attn": attn}


def test_forward_reproduces_the_c_models_cross_attention(trained, capsys):
    cli("encoder_spread.py", trained["ckpt"], trained["data"], "--check", trained["attn"])
    out = capsys.readouterr().out
    assert "4 sentences of split dev; cross-attention equal to the attention file's within" in out
    spreads = [float(l.split()[-1]) for l in out.splitlines() if l.startswith("  ")]
    assert len(spreads) == 1 + 2 * 2 and all(0.2 < v < 1.5 for v in spreads), out


def _collapse(src, dst):
    """A copy of checkpoint src whose last encoder LayerNorm has gamma 0:
    every source position's state is then its beta, the same vector. Its
    checksum is rewritten, as for an edit made on purpose: the readers
    refuse a tensor that fails it."""
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        g = f["params/encoder/layer_01/ffn_norm/gamma"]
        g[...] = np.zeros(g.shape, g.dtype)
        g.attrs["checksum"] = np.uint64(hm.checksum64(np.zeros(g.shape, "<f4").tobytes()))


def test_planted_collapse_reads_zero_spread_and_uniform_cross_attention(trained, tmp_path, capsys):
    ckpt = tmp_path / "collapsed.h5"
    _collapse(trained["ckpt"], ckpt)
    cli("encoder_spread.py", ckpt, trained["data"], "--sentences", "3")
    out = capsys.readouterr().out
    lines = {l.strip().rsplit(" ", 1)[0].strip(): l.split()[-1] for l in out.splitlines() if l.startswith("  ")}
    assert lines["layer 1 ffn"] == "0.000" and float(lines["embedding"]) > 0.5, out
    assert out.splitlines()[-1].endswith("0.000 0.000"), out              # keys of both decoder layers
    # the forward's maps of the collapsed model: every query attends uniformly
    import hf_export
    from np_model import NumpyTransformer

    cfg, _, _, params = hf_export.read_checkpoint(str(ckpt))
    (src, tgt), = ES.read_pairs(str(trained["data"]), "dev", [0], cfg)
    m = NumpyTransformer(cfg, params)
    for a in m.decode(tgt, m.encode(src))["cross"]:
        np.testing.assert_allclose(a, 1.0 / len(src), rtol=1e-9)


def test_check_refuses_another_checkpoints_file(trained, tmp_path):
    ckpt = tmp_path / "collapsed.h5"
    _collapse(trained["ckpt"], ckpt)
    err = cli_error("encoder_spread.py", ckpt, trained["data"], "--check", trained["attn"])
    assert err.startswith(f"{trained['attn']}: cross-attention differs from this forward by"), err
    assert len(err.splitlines()) == 1
    # a file whose maps are of another shape (another max_len, another model) is named, not broadcast
    other = tmp_path / "other.h5"
    shutil.copyfile(trained["attn"], other)
    with h5py.File(other, "r+") as f:
        g = f["sentences"][sorted(f["sentences"])[0]]
        cut = g["cross"][()][:, :, :-1]
        del g["cross"]
        g["cross"] = cut
    err = cli_error("encoder_spread.py", trained["ckpt"], trained["data"], "--check", other)
    assert "cross maps" in err and "this forward" in err, err


def test_errors(trained, tmp_path):
    assert "not a transformer dataset" in cli_error("encoder_spread.py", trained["ckpt"], trained["ckpt"])
    assert "no split 'nope'" in cli_error("encoder_spread.py", trained["ckpt"], trained["data"], "--split", "nope")
    assert "not a transformer checkpoint" in cli_error("encoder_spread.py", trained["data"], trained["data"])
    assert "not an attention file (format 'transformer-dataset')" in cli_error(
        "encoder_spread.py", trained["ckpt"], trained["data"], "--check", trained["data"])
    with pytest.raises(AnalysisError, match="has 8 pairs: no pair 9"):
        ES.read_pairs(str(trained["data"]), "dev", [9], {"vocab_size": "330", "max_len": "24"})
    assert os.path.exists(trained["ckpt"])
