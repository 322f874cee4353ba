"""Attention statistics on known maps (hand-computed values), and heatmaps,
statistics and their evolution on attention files written by the C program
(`transformer attention` from a checkpoint, and the training probe); the
per-run summaries of a sweep and `attention.py compare` on a planted sweep;
word alignments and AER of planted cross-attention heads, in a summary
(`summary --align`, against a planted silver file) and by row in `compare`."""

import csv
import math
import os
import re

import h5py
import numpy as np
import pytest

import attention as A
from conftest import TINY, assert_figure, cli, cli_error, has_command, script, transformer


# ------------------------------------------------------------ known maps
def one(m):
    """[Tq, Tk] -> [1, 1, Tq, Tk]"""
    return np.asarray(m, dtype=np.float64)[None, None]


def test_one_hot_map_has_entropy_zero_and_all_on_diagonal():
    st = A.head_stats(one(np.eye(5)))
    assert st["entropy"][0, 0] == 0.0
    assert st["diagonal"][0, 0] == 1.0
    assert st["distance"][0, 0] == 0.0
    assert st["previous"][0, 0] == 0.0 and st["next"][0, 0] == 0.0


def test_uniform_map_has_entropy_log_n():
    n = 4
    st = A.head_stats(one(np.full((n, n), 1.0 / n)))
    assert st["entropy"][0, 0] == pytest.approx(math.log(n), abs=1e-12)
    # distances by hand: rows 0..3 have sum_j |i-j| = 6, 4, 4, 6 over 4 keys
    assert st["distance"][0, 0] == pytest.approx((6 + 4 + 4 + 6) / 4 / 4)
    assert st["diagonal"][0, 0] == pytest.approx(0.25)
    assert st["previous"][0, 0] == pytest.approx(0.25)   # rows 1..3
    assert st["next"][0, 0] == pytest.approx(0.25)       # rows 0..2


def test_previous_token_head():
    m = np.zeros((4, 4))
    m[0, 0] = 1.0
    for i in range(1, 4):
        m[i, i - 1] = 1.0
    st = A.head_stats(one(m))
    assert st["previous"][0, 0] == 1.0          # rows 1..3 all on the previous token
    assert st["diagonal"][0, 0] == 0.25         # only row 0
    assert st["distance"][0, 0] == pytest.approx(3 / 4)
    assert st["entropy"][0, 0] == 0.0


def test_causal_uniform_and_hand_computed_distance():
    T = 3
    m = np.tril(np.ones((T, T)))
    m /= m.sum(axis=1, keepdims=True)             # row i uniform over keys 0..i
    st = A.head_stats(one(m))
    assert st["entropy"][0, 0] == pytest.approx((math.log(1) + math.log(2) + math.log(3)) / 3)
    # row 0: 0; row 1: (1 + 0)/2; row 2: (2 + 1 + 0)/3
    assert st["distance"][0, 0] == pytest.approx((0 + 0.5 + 1.0) / 3)
    assert st["next"][0, 0] == 0.0


def test_eos_share_and_rectangular_cross_map():
    m = np.array([[0.5, 0.0, 0.5],
                  [0.2, 0.3, 0.5],
                  [0.0, 0.5, 0.5],
                  [0.1, 0.4, 0.5]])               # 4 target queries x 3 source keys
    st = A.head_stats(one(m), ["a", "b", "</s>"])
    assert st["eos"][0, 0] == pytest.approx(0.5)
    assert st["diagonal"][0, 0] == pytest.approx((0.5 + 0.3 + 0.5) / 3)   # queries 0..2 only
    assert st["next"][0, 0] == pytest.approx((0.0 + 0.5) / 2)             # queries 0, 1
    assert st["previous"][0, 0] == pytest.approx((0.2 + 0.5 + 0.5) / 3)   # queries 1..3
    assert math.isnan(A.head_stats(one(m), ["a", "b", "c"])["eos"][0, 0])


def test_heads_and_layers_are_kept_apart():
    n = 6
    maps = np.stack([np.stack([np.eye(n), np.full((n, n), 1.0 / n)]),
                     np.stack([np.full((n, n), 1.0 / n), np.eye(n)])])   # [2 layers, 2 heads, n, n]
    e = A.head_stats(maps)["entropy"]
    np.testing.assert_allclose(e, [[0, math.log(n)], [math.log(n), 0]], atol=1e-12)


def test_sentencepiece_tokens_for_display():
    assert A.display_tokens(["\u2581The", "\u2581ca", "t", "</s>"]) == ["The", "ca", "##t", "</s>"]
    assert A.display_tokens(["<s>", "17", "5"]) == ["<s>", "17", "5"]


# ------------------------------------------------------------ files of the C program
@pytest.fixture(scope="module")
def c_files(tmp_path_factory):
    if not has_command("attention"):
        pytest.skip("bin/transformer has no 'attention' command yet (HDF5 issue)")
    top = tmp_path_factory.mktemp("attn")
    run = top / "run"
    keys = dict(TINY, n_layers="2", n_heads="4", d_k="4", d_v="4", train_steps="30", attn_steps="10",
                ckpt_steps="30", eval_steps="0")
    transformer("train", f"run_dir={run}", *[f"{k}={v}" for k, v in keys.items()])
    ckpts = sorted(p for p in os.listdir(run) if p.startswith("ckpt") and p.endswith(".h5"))
    assert ckpts, os.listdir(run)
    attn = top / "attn.h5"
    transformer("attention", "--checkpoint", str(run / ckpts[-1]), "--data", "synthetic",
                "--sentences", "0-2", "--output", str(attn), "--greedy")
    probe = run / "attention_probe.h5"
    assert probe.exists()
    return {"top": top, "attn": attn, "probe": probe, "run": run, "L": 2, "H": 4}


def _strings(ds):
    return [t.decode() if isinstance(t, bytes) else str(t) for t in ds[()]]


def test_heatmap_shape_matches_tokens(c_files):
    data = A.load(str(c_files["attn"]))
    _, sents = A.pick_step("f", data, None)
    assert len(sents) == 3
    with h5py.File(c_files["attn"], "r") as f:
        g = f["sentences"][sorted(f["sentences"])[1]]
        src, tgt = _strings(g["src_tokens"]), _strings(g["tgt_tokens"])
        cross = g["cross"][1, 3]
    sent = A.pick_sentence("f", sents, "1")
    fig = A.heatmap_figure("f", sent, "cross", 1, 3)
    ax = fig.axes[0]
    img = ax.images[0].get_array()
    assert img.shape == (len(tgt), len(src)) == cross.shape
    np.testing.assert_allclose(np.asarray(img), cross, rtol=1e-6)
    assert [t.get_text() for t in ax.get_xticklabels()] == src
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt
    assert src[-1] == "</s>" and tgt[0] == "<s>"
    # the grid of all heads of a layer: one image per head, encoder self-attention is [S, S]
    fig = A.heatmap_figure("f", sent, "encoder_self", 0, None)
    imgs = [a.images[0] for a in fig.axes if a.images]
    assert len(imgs) == c_files["H"]
    assert all(i.get_array().shape == (len(src), len(src)) for i in imgs)


def test_heatmap_cli_writes_png_and_pdf(c_files, tmp_path):
    p = script("attention.py", "heatmap", c_files["attn"], "--sentence", "2", "--kind", "decoder_self",
               "--layer", "1", "--head", "0", "--out", tmp_path / "one")
    assert p.stdout.split() == [str(tmp_path / "one.png"), str(tmp_path / "one.pdf")]
    assert_figure(str(tmp_path / "one"))
    cli("attention.py", "heatmap", c_files["attn"], "--sentence", "0", "--kind", "cross", "--layer", "0",
        "--greedy", "--out", tmp_path / "grid")
    assert_figure(str(tmp_path / "grid"))
    cli("attention.py", "heatmap", c_files["probe"], "--step", "20", "--out", tmp_path / "probe")
    assert_figure(str(tmp_path / "probe"))


def reference_stats(m, key_tokens):
    """Straightforward loops, independent of the vectorised code."""
    Tq, Tk = m.shape
    ent, dist, diag, prev, eos = [], [], [], [], []
    for i in range(Tq):
        row = m[i]
        ent.append(-sum(p * math.log(p) for p in row if p > 0))
        dist.append(sum(row[j] * abs(i - j) for j in range(Tk)))
        if i < Tk:
            diag.append(row[i])
        if 1 <= i <= Tk:
            prev.append(row[i - 1])
        eos.append(sum(row[j] for j in range(Tk) if key_tokens[j] == "</s>"))
    return {"entropy": np.mean(ent), "distance": np.mean(dist), "diagonal": np.mean(diag),
            "previous": np.mean(prev), "eos": np.mean(eos)}


def test_stats_table_equals_reference_on_c_maps(c_files, tmp_path):
    cli("attention.py", "stats", c_files["attn"], "--out", tmp_path / "st")
    assert_figure(str(tmp_path / "st"))
    with open(tmp_path / "st.csv") as f:
        rows = list(csv.DictReader(f))
    L, H = c_files["L"], c_files["H"]
    assert len(rows) == 3 * L * H
    assert [(r["kind"], int(r["layer"]), int(r["head"])) for r in rows] == \
        [(k, l, h) for k in A.KINDS for l in range(L) for h in range(H)]
    got = {(r["kind"], int(r["layer"]), int(r["head"])): r for r in rows}
    with h5py.File(c_files["attn"], "r") as f:
        groups = [f["sentences"][n] for n in sorted(f["sentences"])]
        for kind, (l, h) in [("encoder_self", (0, 0)), ("cross", (1, 2)), ("decoder_self", (1, 3))]:
            per = []
            for g in groups:
                keys = _strings(g["tgt_tokens"] if kind == "decoder_self" else g["src_tokens"])
                per.append(reference_stats(g[kind][l, h].astype(np.float64), keys))
            for s in ("entropy", "distance", "diagonal", "previous"):
                assert float(got[(kind, l, h)][s]) == pytest.approx(np.mean([p[s] for p in per]), rel=1e-9), (kind, s)
            if kind == "decoder_self":
                assert got[(kind, l, h)]["next"] == got[(kind, l, h)]["eos"] == ""  # causal; no EOS among the keys
            else:
                assert float(got[(kind, l, h)]["eos"]) == pytest.approx(np.mean([p["eos"] for p in per]), rel=1e-9)
    md = (tmp_path / "st.md").read_text()
    assert md.count("| **0** | mean |") == 3 and "### encoder-decoder attention" in md


def test_evolution_over_training_from_probe(c_files, tmp_path):
    cli("attention.py", "evolution", c_files["probe"], "--out", tmp_path / "ev")
    assert_figure(str(tmp_path / "ev"))
    with h5py.File(c_files["probe"], "r") as f:
        steps = sorted(int(f[g].attrs["step"]) for g in f if g.startswith("step_"))
    assert steps == [10, 20, 30]
    with open(tmp_path / "ev.csv") as f:
        rows = list(csv.DictReader(f))
    L, H = c_files["L"], c_files["H"]
    assert len(rows) == len(steps) * 3 * L * H
    assert sorted({int(r["step"]) for r in rows}) == steps
    # the per-step statistics equal those of the maps of that step
    data = A.load(str(c_files["probe"]))
    st = A.file_stats("p", data["steps"][20])
    r = next(r for r in rows if r["step"] == "20" and r["kind"] == "cross" and r["layer"] == "1" and r["head"] == "2")
    assert float(r["entropy"]) == pytest.approx(st["cross"]["entropy"][1, 2], rel=1e-12)


def test_errors(c_files, tmp_path):
    f = c_files["attn"]
    # the command line: one line 'error: ...', exit 2
    p = script("attention.py", "heatmap", f, "--layer", "7", expect=2)
    assert "layer 7 out of range" in p.stderr
    assert "head 9 out of range" in cli_error("attention.py", "heatmap", f, "--layer", "0", "--head", "9")
    assert "no sentence '99'" in cli_error("attention.py", "heatmap", f, "--sentence", "99")
    assert "no maps of step 15" in cli_error("attention.py", "heatmap", c_files["probe"], "--step", "15")
    assert "no greedy maps" in cli_error("attention.py", "stats", c_files["probe"], "--greedy")
    assert "not a probe file" in cli_error("attention.py", "evolution", f)
    metrics = c_files["run"] / "metrics.h5"      # ours, but not an attention file
    assert "not an attention file" in cli_error("attention.py", "stats", metrics)
    assert "no such file" in cli_error("attention.py", "stats", tmp_path / "none.h5")
    (tmp_path / "text.h5").write_text("hello\n")
    assert "not an HDF5 file" in cli_error("attention.py", "stats", tmp_path / "text.h5")


# ------------------------------------------------------------ planted heads: every statistic
def test_planted_heads_every_statistic():
    """Identity, uniform, previous-token, next-token and all-on-EOS heads of one
    map of n keys: each statistic of each head as computed by hand."""
    n = 5
    prev, nxt, eos = np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n))
    prev[0, 0], nxt[n - 1, n - 1] = 1.0, 1.0
    for i in range(1, n):
        prev[i, i - 1] = 1.0
        nxt[i - 1, i] = 1.0
    eos[:, n - 1] = 1.0
    maps = np.stack([np.eye(n), np.full((n, n), 1.0 / n), prev, nxt, eos])[None]   # [1 layer, 5 heads, n, n]
    st = A.head_stats(maps, ["a", "b", "c", "d", "</s>"])
    want = {   # identity, uniform, previous, next, EOS
        "entropy": [0, math.log(n), 0, 0, 0],
        "diagonal": [1, 1 / n, 1 / n, 1 / n, 1 / n],
        "previous": [0, 1 / n, 1, 0, 0],
        "next": [0, 1 / n, 0, 1, 1 / (n - 1)],
        "eos": [1 / n, 1 / n, 0, 2 / n, 1],       # the next head: rows n-2 and n-1 on the EOS key
        # uniform: sum_j |i-j| / n averaged over i; EOS head: mean of n-1-i
        "distance": [0, sum(abs(i - j) for i in range(n) for j in range(n)) / n / n, (n - 1) / n, (n - 1) / n,
                     sum(n - 1 - i for i in range(n)) / n],
    }
    for k, v in want.items():
        np.testing.assert_allclose(st[k][0], v, atol=1e-12, err_msg=k)


# ------------------------------------------------------------ sweep: summaries and compare
def _maps_file(path, heads, n_sent=3, n=4, idx=None, layers=None):
    """A `transformer attention` file of planted heads (list of [n, n] maps:
    the same for every kind and sentence, layer 0 only; or layers, a list of
    such lists) for n_sent sentences of n tokens: n - 1 words and </s>."""
    idx = list(range(0, 2 * n_sent, 2)) if idx is None else idx
    toks = np.array([f"w{i}".encode() for i in range(n - 1)] + [b"</s>"])
    m = np.stack([np.stack(h) for h in (layers or [heads])])
    with h5py.File(path, "w") as f:
        f.attrs.update(format="transformer-attention", n_layers=m.shape[0], n_heads=m.shape[1], split="dev",
                       data="planted", checkpoint="ckpt_00000100.h5", checkpoint_step=100)
        f["sentence_index"] = np.array(idx, np.int64)
        for i in idx:
            g = f.create_group(f"sentences/{i:06d}")
            g.attrs.update(index=i, src_len=n, tgt_len=n)
            g["src_tokens"] = toks
            g["tgt_tokens"] = np.array([b"<s>"] + list(toks[:-1]))
            g["tgt_out_tokens"] = toks
            for kind in A.KINDS:
                g[kind] = (np.tril(m) / np.tril(m).sum(axis=3, keepdims=True) if kind == "decoder_self" else m)
    return path


def _uniform_eye_mix(w, n=4):
    """A head (1-w) identity + w uniform: entropy grows with w."""
    return (1 - w) * np.eye(n) + w * np.full((n, n), 1.0 / n)


@pytest.fixture(scope="module")
def planted_sweep(tmp_path_factory):
    """2 rows x 2 seeds: base's heads sharper than A1's, A1 with a higher dev NLL;
    plus B1 and C1 with one seed each (no interval): entropy and NLL rise together."""
    from conftest import cli as run

    top = tmp_path_factory.mktemp("sweep")
    runs = {"base": (0.0, 5.0), "base-seed2": (0.1, 5.1), "A1": (0.5, 6.0), "A1-seed2": (0.7, 6.2), "B1": (0.3, 5.5),
            "C1": (0.9, 7.0)}
    for name, (w, ppl) in runs.items():
        run("row_result.py", "--out", top / "results" / f"{name}.h5", "--row", name, "--dev-ppl", ppl,
            "--status", "done")
        _maps_file(top / f"{name}.maps.h5", [_uniform_eye_mix(w), np.eye(4)])
        run("attention.py", "summary", top / f"{name}.maps.h5", "--out", top / "attention" / f"{name}.h5")
    return {"top": top, "runs": runs}


def test_summary_file(planted_sweep):
    with h5py.File(planted_sweep["top"] / "attention" / "A1.h5", "r") as g:
        assert g.attrs["format"] == A.SUMMARY_FORMAT and g.attrs["run"] == "A1"
        assert list(g["sentence_index"][()]) == [0, 2, 4] and g.attrs["n_sentences"] == 3
        m = g["cross/mean"][()]
        assert m.shape == (len(A.STATS), 1, 2)
        e = A.STATS.index("entropy")
        assert m[e, 0, 1] == 0.0                                       # the identity head
        assert np.all(g["cross/sd"][()][e] == pytest.approx(0.0, abs=1e-12))   # every sentence the same
        assert np.all(g["cross/count"][()][e] == 3)
        assert np.isnan(g["decoder_self/mean"][()][A.STATS.index("next")]).all()


def test_compare_end_to_end(planted_sweep, tmp_path):
    top, runs = planted_sweep["top"], planted_sweep["runs"]
    out = tmp_path / "cmp"
    cli("attention.py", "compare", top, "--out", out, "--kind", "cross", "--stat", "entropy")
    for suffix in ("_layers", "_heads_cross_entropy", "_dnll_cross_entropy"):
        assert_figure(str(out) + suffix)
    with open(str(out) + ".csv") as f:
        rows = list(csv.DictReader(f))
    # 4 rows x 3 kinds x 6 stats x (all + layer 0 + 2 heads)
    assert len(rows) == 4 * 3 * len(A.STATS) * 4
    get = {(r["row"], r["kind"], r["layer"], r["head"], r["stat"]): r for r in rows}
    ent = lambda w: A.head_stats(_uniform_eye_mix(w)[None, None])["entropy"][0, 0]
    r = get[("A1", "cross", "0", "0", "entropy")]
    e = [ent(runs["A1"][0]), ent(runs["A1-seed2"][0])]
    assert float(r["mean"]) == pytest.approx(np.mean(e), rel=1e-5)
    half = 12.706204736 * np.std(e, ddof=1) / math.sqrt(2)            # t(0.975, 1 df)
    assert float(r["lo"]) == pytest.approx(np.mean(e) - half, rel=1e-4)
    assert float(r["hi"]) == pytest.approx(np.mean(e) + half, rel=1e-4)
    assert r["runs"] == "2" and len(r["per_seed"].split()) == 2
    one = get[("C1", "cross", "all", "mean", "entropy")]
    assert one["runs"] == "1" and one["lo"] == one["hi"] == ""          # one seed: no interval
    assert float(get[("base", "encoder_self", "0", "1", "diagonal")]["mean"]) == pytest.approx(1.0)
    md = (str(out) + ".md")
    text = open(md).read()
    assert "## encoder-decoder attention" in text and "| C1 | 1 |" in text
    # B1 < A1 < C1 in Δ entropy and in Δ NLL: ρ = +1 over the 3 rows, which
    # 2 of the 3! pairings reach: permutation p about 1/3
    rho = re.search(r"\| encoder-decoder attention \| \+1\.00 \(n=3, p (0\.\d+)\)", text)
    assert rho and float(rho.group(1)) == pytest.approx(1 / 3, abs=0.02)
    assert re.search(r"Holm-adjusted over the \d+ ρ: \d\.\d{3}", text)


def test_rho_pairs_both_deltas_over_matched_seeds(planted_sweep):
    """The ρ's two Δ are row − base of the same seed, as Table 3's converged
    protocol compares rows: B1 (seed 1) against base's seed 1, not against
    the mean of base's two seeds; A1 the mean of its two pairs."""
    top, runs = planted_sweep["top"], planted_sweep["runs"]
    rows, _, _ = A.read_sweep_summaries(str(top), None)
    names, ds, dn, rho, p = A.delta_vs_nll(rows, "cross", "entropy")
    ent = lambda run: A.head_stats(_uniform_eye_mix(runs[run][0])[None, None])["entropy"][0, 0] / 2
    nll = lambda run: math.log(runs[run][1])
    want = {"A1": ((ent("A1") - ent("base") + ent("A1-seed2") - ent("base-seed2")) / 2,
                   (nll("A1") - nll("base") + nll("A1-seed2") - nll("base-seed2")) / 2),
            "B1": (ent("B1") - ent("base"), nll("B1") - nll("base")),
            "C1": (ent("C1") - ent("base"), nll("C1") - nll("base"))}
    assert sorted(names) == sorted(want)
    for n, d_stat, d_nll in zip(names, ds, dn):
        assert d_stat == pytest.approx(want[n][0], rel=1e-5) and d_nll == pytest.approx(want[n][1], rel=1e-6)
    # unpaired, B1's Δ would be against base's mean of two seeds: another number
    assert ds[names.index("B1")] != pytest.approx(ent("B1") - (ent("base") + ent("base-seed2")) / 2, rel=1e-3)
    assert rho == pytest.approx(1.0) and 0 < p <= 1


def test_compare_paired_over_seeds(planted_sweep, tmp_path):
    """Δ against base pairs seed s of a row with base's seed s: A1 (2 pairs)
    gets the paired t interval of its two differences, B1 (1 pair) none."""
    top, runs = planted_sweep["top"], planted_sweep["runs"]
    out = tmp_path / "cmp"
    cli("attention.py", "compare", top, "--out", out)
    text = open(str(out) + ".md").read()
    part = text[text.index("## Δ against base, paired"):text.index("## Δ statistic against")]
    cross = part[part.index("encoder-decoder attention:"):]
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]]
             for ln in cross.splitlines() if ln.startswith("| ") and not ln.startswith("| row")}
    ent = lambda w: A.head_stats(_uniform_eye_mix(w)[None, None])["entropy"][0, 0] / 2   # head 1: identity, 0
    d = [ent(runs["A1"][0]) - ent(runs["base"][0]), ent(runs["A1-seed2"][0]) - ent(runs["base-seed2"][0])]
    half = 12.706204736 * np.std(d, ddof=1) / math.sqrt(2)            # t(0.975, 1 df)
    assert cells["A1"][0] == "2"
    assert cells["A1"][1] == f"{np.mean(d):+.3f} [{np.mean(d) - half:+.3f}, {np.mean(d) + half:+.3f}]"
    # unpaired, the same numbers would give another interval: pairing is what is computed
    assert cells["B1"][:2] == ["1", f"{ent(runs['B1'][0]) - ent(runs['base'][0]):+.3f}"]
    assert "base" not in cells


def test_compare_errors(planted_sweep, tmp_path):
    top = planted_sweep["top"]
    assert "no such sweep directory" in cli_error("attention.py", "compare", tmp_path / "none")
    (tmp_path / "empty").mkdir()
    assert "no attention summaries" in cli_error("attention.py", "compare", tmp_path / "empty")
    # a summary of other sentences than the rest's: refused, naming it
    other = tmp_path / "other"
    import shutil

    shutil.copytree(top, other)
    _maps_file(other / "x.maps.h5", [np.eye(4), np.eye(4)], idx=[1, 3, 5])
    cli("attention.py", "summary", other / "x.maps.h5", "--out", other / "attention" / "C1.h5")
    assert "a sample other than" in cli_error("attention.py", "compare", other)
    (other / "attention" / "C1.h5").write_bytes(open(top / "results" / "C1.h5", "rb").read())
    assert "not an attention summary" in cli_error("attention.py", "compare", other)
    assert "not an attention file" in cli_error("attention.py", "summary", top / "attention" / "A1.h5",
                                                "--out", tmp_path / "s.h5")


def test_compare_writes_nothing_when_a_figure_fails(planted_sweep, tmp_path, monkeypatch):
    """compare makes its tables and figures before it writes the first: a
    figure that fails leaves no new table beside the old figures."""
    from common import AnalysisError

    out = str(tmp_path / "cmp")

    def broken(*args):
        raise AnalysisError(out, "planted failure while drawing")

    monkeypatch.setattr(A, "compare_scatter", broken)
    with pytest.raises(AnalysisError, match="planted failure"):
        A.compare_sweep(str(planted_sweep["top"]), None, out, "cross", "entropy")
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------ cross-attention as alignment (AER)
def test_aer_of_planted_heads():
    n = 5
    identity = {(i, i) for i in range(n)}
    src = [f"\u2581w{i}" for i in range(n)] + ["</s>"]
    tgt = [f"\u2581v{i}" for i in range(n)] + ["</s>"]                  # what each position predicts
    eye = np.zeros((n + 1, n + 1))
    eye[np.arange(n + 1), np.arange(n + 1)] = 1.0
    assert A.alignment_links(eye, src, tgt) == identity
    assert A.aer(A.alignment_links(eye, src, tgt), identity) == 0.0
    # uniform: every row ties, the first source word wins: A = {(t, 0)}, |A ∩ S| = 1
    uni = np.full((n + 1, n + 1), 1.0 / (n + 1))
    assert A.alignment_links(uni, src, tgt) == {(t, 0) for t in range(n)}
    assert A.aer(A.alignment_links(uni, src, tgt), identity) == pytest.approx(1 - 2 * 1 / (2 * n))
    # sure and possible links, Och and Ney's definition by hand
    assert A.aer({(0, 0), (1, 2)}, {(0, 0)}, {(1, 2)}) == pytest.approx(1 - (1 + 2) / (2 + 1))


def test_alignment_merges_subword_pieces():
    # source "▁a ▁bc d </s>": words a, bcd; target pieces "▁x ▁y z </s>": words x, yz
    src, tgt = ["\u2581a", "\u2581bc", "d", "</s>"], ["\u2581x", "\u2581y", "z", "</s>"]
    m = np.array([[0.6, 0.3, 0.1, 0.0],     # x: a 0.6 vs bcd 0.4
                  [0.5, 0.25, 0.25, 0.0],   # y alone: a 0.5 = bcd 0.5, a tie (a wins);
                  [0.4, 0.4, 0.2, 0.0],    # y and z averaged: a 0.45, bcd 0.55
                  [0.0, 0.0, 0.0, 1.0]])
    assert A.word_groups(src) == [[0], [1, 2]]
    assert A.alignment_links(m, src, tgt) == {(0, 0), (1, 1)}


# ------------------------------------------------------------ AER in summaries and compare
def _prev_map(n=4):
    """Each target position on the previous source position (row 0 on 0)."""
    m = np.zeros((n, n))
    m[0, 0] = 1.0
    m[np.arange(1, n), np.arange(n - 1)] = 1.0
    return m


def _silver(path, links_by_index, words=3, split="dev"):
    """A planted silver file (silver_align.write_silver): sentences of `words`
    source and target words and the given (target word, source word) links."""
    import silver_align as S

    idx = sorted(links_by_index)
    w = [["x"] * words for _ in idx]
    S.write_silver(str(path), idx, w, w, [links_by_index[i] for i in idx], {"split": split, "aligner": "planted"})
    return path


IDENTITY3 = {(0, 0), (1, 1), (2, 2)}


def test_summary_aer_equals_hand_computation(tmp_path):
    """Two sentences, 2 layers x 2 heads.  Silver: sentence 0 identity, sentence 2
    with words 1 and 2 crossed.  Pooled over both (|A| = |S| = 6):
    identity head: 4 of 6 links right, AER 1 - 8/12 = 1/3; uniform head (every
    target word on source word 0): 2 right, 2/3; previous head (0->0, 1->0,
    2->1): 1 + 2 right, 1/2.  Layer 0 averaged (identity + uniform) aligns as
    the identity, 1/3; layer 1 (previous + identity) ties, the first (previous)
    wins, 1/2."""
    maps = _maps_file(tmp_path / "m.h5", None, n_sent=2,
                      layers=[[np.eye(4), np.full((4, 4), 0.25)], [_prev_map(), np.eye(4)]])
    silver = _silver(tmp_path / "silver.h5", {0: IDENTITY3, 2: {(0, 0), (1, 2), (2, 1)}})
    cli("attention.py", "summary", maps, "--out", tmp_path / "s.h5", "--align", silver)
    with h5py.File(tmp_path / "s.h5", "r") as g:
        np.testing.assert_allclose(g["alignment/aer_head"][()], [[1 / 3, 2 / 3], [1 / 2, 1 / 3]], atol=1e-12)
        np.testing.assert_allclose(g["alignment/aer_layer"][()], [1 / 3, 1 / 2], atol=1e-12)
        assert g["alignment"].attrs["n_links"] == 6 and A.attr_str(g["alignment"], "silver") == str(silver)
        assert A.attr_str(g["alignment"], "silver_aligner") == "planted"
    cli("attention.py", "summary", maps, "--out", tmp_path / "plain.h5")
    with h5py.File(tmp_path / "plain.h5", "r") as g:
        assert "alignment" not in g                                     # without --align: no AER


def test_summary_align_errors(tmp_path):
    maps = _maps_file(tmp_path / "m.h5", [np.eye(4)], n_sent=2)
    out = tmp_path / "s.h5"
    cases = [
        (tmp_path / "none.h5", "none.h5: no such file"),
        (_silver(tmp_path / "four.h5", {0: IDENTITY3, 2: IDENTITY3}, words=4),
         "four.h5: sentence 0: 4 source and 4 target words, the maps"),
        (_silver(tmp_path / "test.h5", {0: IDENTITY3, 2: IDENTITY3}, split="test2016"),
         "test.h5: links of split 'test2016', the maps"),
        (_silver(tmp_path / "other.h5", {0: IDENTITY3, 1: IDENTITY3}), "other.h5: no links of sentence 2"),
        (maps, "m.h5: not a silver alignment file"),
    ]
    for silver, want in cases:
        err = cli_error("attention.py", "summary", maps, "--out", out, "--align", silver)
        assert want in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".s.h5")]


def test_summary_output_over_input_refused(tmp_path):
    """--out naming the maps or the silver file (also through a link) replaced
    that input with the summary: refused in one line, both unchanged."""
    maps = _maps_file(tmp_path / "m.h5", [np.eye(4)], n_sent=2)
    silver = _silver(tmp_path / "silver.h5", {0: IDENTITY3, 2: IDENTITY3})
    os.symlink(maps, tmp_path / "m.link")
    before = [p.read_bytes() for p in (maps, silver)]
    for out, inp in ((maps, maps), (tmp_path / "m.link", maps), (silver, silver)):
        err = cli_error("attention.py", "summary", maps, "--out", out, "--align", silver)
        assert err == f"{out}: --out is also an input of attention.py summary ({inp}): choose another name", err
    assert [p.read_bytes() for p in (maps, silver)] == before


@pytest.fixture(scope="module")
def aer_sweep(tmp_path_factory):
    """base and A1, 2 seeds each, scored against identity links of 3 sentences;
    C1 (one seed) summarised without --align.  Per seed (best head; layer average):
    base [identity, uniform] (0; 0), base-seed2 [identity, previous] (0; 2/3),
    A1 [uniform, uniform] (2/3; 2/3), A1-seed2 [previous, uniform] (2/3; 2/3)."""
    from conftest import cli as run

    top = tmp_path_factory.mktemp("aer_sweep")
    uni = np.full((4, 4), 0.25)
    runs = {"base": [np.eye(4), uni], "base-seed2": [np.eye(4), _prev_map()], "A1": [uni, uni],
            "A1-seed2": [_prev_map(), uni], "C1": [np.eye(4), uni]}
    silver = _silver(top / "silver.h5", {0: IDENTITY3, 2: IDENTITY3, 4: IDENTITY3})
    for name, heads in runs.items():
        run("row_result.py", "--out", top / "results" / f"{name}.h5", "--row", name, "--dev-ppl", 5.0,
            "--status", "done")
        _maps_file(top / f"{name}.maps.h5", heads)
        align = [] if name == "C1" else ["--align", silver]
        run("attention.py", "summary", top / f"{name}.maps.h5", "--out", top / "attention" / f"{name}.h5", *align)
    return top


def test_compare_aer_with_intervals(aer_sweep, tmp_path):
    out = tmp_path / "cmp"
    cli("attention.py", "compare", aer_sweep, "--out", out, "--no-plot")
    with open(str(out) + ".csv") as f:
        rows = [r for r in csv.DictReader(f) if r["stat"] == "aer"]
    get = {(r["row"], r["layer"], r["head"]): r for r in rows}
    assert len(rows) == 2 * (1 + 1 + 2)                       # base, A1: best, layer average, 2 heads
    t1 = 12.706204736                                         # t(0.975, 1 df)
    half = t1 * np.std([0, 2 / 3], ddof=1) / math.sqrt(2)
    r = get[("base", "0", "layer_average")]
    assert float(r["mean"]) == pytest.approx(1 / 3, abs=1e-5) and r["runs"] == "2"
    assert float(r["lo"]) == pytest.approx(1 / 3 - half, rel=1e-4) and float(r["hi"]) == pytest.approx(1 / 3 + half, rel=1e-4)
    assert [float(x) for x in r["per_seed"].split()] == pytest.approx([0, 2 / 3], abs=1e-5)
    best = get[("base", "all", "best")]
    assert float(best["mean"]) == float(best["lo"]) == float(best["hi"]) == 0.0        # both seeds: a perfect head
    assert float(get[("A1", "all", "best")]["mean"]) == pytest.approx(2 / 3, abs=1e-5)
    assert float(get[("base", "0", "1")]["mean"]) == pytest.approx(2 / 3, abs=1e-5)   # uniform and previous
    assert not any(k[0] == "C1" for k in get)
    text = open(str(out) + ".md").read()
    assert "## Cross-attention as alignment" in text and "not with human alignments" in text
    assert f"| base | 2 | 0.000 [0.000, 0.000] (0:0) | 0.333 [{1 / 3 - half:.3f}, {1 / 3 + half:.3f}] |" in text
    assert "| A1 | 2 | 0.667 [0.667, 0.667] (0:0) | 0.667 [0.667, 0.667] |" in text
    assert "C1: no AER for C1 (summary written without --align)" in text
    # paired over seeds: A1's best head minus base's, 2/3 - 0 for both seeds; C1 has no AER
    paired = text[text.index("Best head's AER (per seed"):]
    assert "| A1 | 2 | +0.667 [+0.667, +0.667] |" in paired and "| C1 |" not in paired.split("##")[0]


def test_compare_refuses_two_silver_files(aer_sweep, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(aer_sweep, other)
    silver = _silver(other / "silver2.h5", {0: IDENTITY3, 2: IDENTITY3, 4: {(0, 1), (1, 1), (2, 2)}})
    cli("attention.py", "summary", other / "C1.maps.h5", "--out", other / "attention" / "C1.h5", "--align", silver)
    err = cli_error("attention.py", "compare", other, "--no-plot")
    assert "C1.h5: AER against other silver links" in err and len(err.strip().splitlines()) == 1, err


def test_summary_aer_of_pairs_cut_at_max_len(tmp_path):
    """A pair longer than max_len is cut (max_len - 1 pieces and </s>): its
    maps keep 3 of the silver's 4 words a side, and only the links between
    kept words count (identity head: AER 0).  Without max_len in the maps'
    config the same file is refused (test_summary_align_errors)."""
    maps = _maps_file(tmp_path / "m.h5", [np.eye(4)], n_sent=1)
    with h5py.File(maps, "a") as f:
        f.attrs["config"] = "n_layers = 1\nmax_len = 4\n"
    silver = _silver(tmp_path / "silver.h5", {0: IDENTITY3 | {(3, 3)}}, words=4)
    cli("attention.py", "summary", maps, "--out", tmp_path / "s.h5", "--align", silver)
    with h5py.File(tmp_path / "s.h5", "r") as g:
        assert g["alignment/aer_head"][0, 0] == 0.0 and g["alignment"].attrs["n_links"] == 3
