"""analysis/heads.py and prune_heads.py on a head-statistics file made here
(the C side, `transformer heads`, is tested by tests/test_heads.sh)."""

import h5py
import numpy as np

import heads as H
import prune_heads as P
from conftest import assert_figure, assert_public, cli, cli_error, script

KINDS = ("enc", "dec_self", "cross")


def make_file(path, N=2, h=3, curves=True):
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "transformer-heads"
        f.attrs["checkpoint"], f.attrs["data"], f.attrs["split"], f.attrs["mask_heads"] = "c.h5", "synthetic", "dev", ""
        for k, kind in enumerate(KINDS):
            g = f.create_group(kind)
            imp = rng.uniform(0.1, 1, (N, h))
            imp[0, 0] = 10.0 if kind == "cross" else imp[0, 0]   # the one most important head
            g["importance"] = imp
            g["importance_norm"] = imp / np.linalg.norm(imp, axis=1, keepdims=True)
            for name in ("confidence", "frac_prev", "frac_next", "frac_self"):
                g[name] = rng.uniform(0, 1, (N, h))
        if curves:
            for name in ("importance", "random_0", "random_1"):
                c = f.create_group(f"prune/{name}")
                c["fraction"] = np.arange(4) / 4
                c["bleu"] = np.array([30.0, 29, 25, 10])
                c["ppl"] = np.array([5.0, 5.5, 7, 20])
    return path


def test_table_ranks_by_raw_importance(tmp_path):
    d = H.load(str(make_file(tmp_path / "h.h5")))
    rows = H.table_rows(d, 2)
    assert [r["group"] for r in rows] == ["most", "most", "least", "least"]
    imp = d["importance"].reshape(-1)
    assert rows[0]["importance"] == imp.max() and rows[2]["importance"] == imp.min()
    assert rows[0]["head"] == "cross:0:0"


def test_all_figures_and_tables(tmp_path):
    f = make_file(tmp_path / "h.h5")
    cli("heads.py", "all", f, "--out", tmp_path / "figs" / "x")
    assert_figure(str(tmp_path / "figs" / "x_importance"))
    assert_figure(str(tmp_path / "figs" / "x_pruning"))
    md = (tmp_path / "figs" / "x_table.md").read_text().splitlines()
    assert md[0].startswith("| group | head | importance") and len(md) == 2 + 18   # 18 heads: 9 most + 9 least
    assert_public(str(tmp_path / "figs" / "x_table.csv"))


def test_curve_needs_prune_results(tmp_path):
    f = make_file(tmp_path / "h.h5", curves=False)
    assert "run analysis/prune_heads.py" in cli_error("heads.py", "curve", f, "--out", tmp_path / "x")


def test_not_a_heads_file(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.attrs["format"] = "transformer-attention"
    script("heads.py", "all", tmp_path / "a.h5", "--out", tmp_path / "x", expect=2)
    script("prune_heads.py", tmp_path / "a.h5", expect=2)


def test_prune_needs_the_checkpoint(tmp_path):
    f = make_file(tmp_path / "h.h5")   # its checkpoint "c.h5" does not exist here
    assert "is not found from this directory" in cli_error("prune_heads.py", f)


def test_mask_spec_groups_heads_by_layer():
    assert P.mask_spec([(2, 1, 3), (0, 0, 1), (2, 1, 0)]) == "enc:0:1,cross:1:0+3"
    assert P.mask_spec([]) == ""


def _seed_file(path, d_bleu, d_lo):
    """a heads file with prune_heads.py's curves: importance with the given
    Δ BLEU and interval ends, a per-kind curve and a random one"""
    make_file(path, curves=False)
    with h5py.File(path, "a") as f:
        for name, d, lo in (("importance", d_bleu, d_lo), ("importance_cross", d_bleu, d_lo),
                            ("random_0", [0, -3, -6, -9, -12], [0, -4, -7, -10, -13])):
            c = f.create_group(f"prune/{name}")
            c["fraction"] = np.arange(5) / 5
            c["n_pruned"] = np.arange(5) * 4
            c["sacrebleu"] = 30 + np.asarray(d, float)
            c["d_bleu"], c["d_bleu_lo"] = np.asarray(d, float), np.asarray(lo, float)
            c["d_bleu_hi"] = np.asarray(d, float) + 1
            c.attrs["split"] = "test2016"
    return path


def test_seeds_safe_fraction_by_hand(tmp_path):
    import heads_seeds as S

    # estimate: -1.5 at 60% breaks the run, the later -0.2 does not count
    a = _seed_file(tmp_path / "a.h5", [0, -0.5, -0.9, -1.5, -0.2], [0, -0.8, -1.2, -2, -1])
    b = _seed_file(tmp_path / "b.h5", [0, -0.2, -0.4, -0.8, -2.0], [0, -0.5, -0.9, -1.4, -3])
    curves, split = S.load_curves(str(a))
    assert split == "test2016"
    assert S.safe_fraction(curves["importance"], "d_bleu") == 0.4
    assert S.safe_fraction(curves["importance"], "d_bleu_lo") == 0.2
    cli("heads_seeds.py", a, b, "--out", tmp_path / "s", "--label", "seed1", "seed2")
    assert_figure(str(tmp_path / "s_seeds"))
    md = (tmp_path / "s_seeds.md").read_text()
    assert "| importance order, all heads | 40% / 20% | 60% / 40% | 50% / 30% |" in md
    assert "| encoder-decoder only | 40% / 20% | 60% / 40% | 50% / 30% |" in md
    assert "on test2016" in md


def test_seeds_refuses_files_without_curves_or_other_levels(tmp_path):
    bare = make_file(tmp_path / "bare.h5", curves=False)
    assert "no pruning curves" in cli_error("heads_seeds.py", bare, "--out", tmp_path / "x")
    a = _seed_file(tmp_path / "a.h5", [0, -1, -2, -3, -4], [0, -1, -2, -3, -4])
    b = _seed_file(tmp_path / "b.h5", [0, -1, -2, -3, -4], [0, -1, -2, -3, -4])
    with h5py.File(b, "a") as f:
        del f["prune/importance/fraction"]
        f["prune/importance/fraction"] = np.arange(5) / 4
    assert "other levels" in cli_error("heads_seeds.py", a, b, "--out", tmp_path / "x")


def test_single_head_masks_each_head_alone():
    """--single: every head masked alone, once, BLEU and PPL in [kind, layer, head]
    (the masks reach `transformer` through Runner.measure, tested end to end
    by tests/test_heads.sh)"""
    seen = []

    class FakeRunner:
        def measure(self, heads):
            seen.append(P.mask_spec(heads))
            (k, l, h), = heads
            return 30.0 - (k * 100 + l * 10 + h) / 100, None, 5.0 + k + l / 10 + h / 100

    bleu, ppl = P.single_head(FakeRunner(), (3, 2, 4))
    assert len(seen) == 24 == len(set(seen)) and seen[0] == "enc:0:0" and seen[-1] == "cross:1:3"
    assert bleu[2, 1, 3] == 30.0 - 2.13 and ppl[1, 0, 2] == 5.0 + 1 + 0.02


def test_counts_below_their_least_are_usage_errors(tmp_path):
    """--top -1 made an empty table and --levels 0 no curve, silently: now
    one error line (common.ArgumentParser, exit 2) naming the option and its
    least value."""
    f = make_file(tmp_path / "h.h5")
    for name, args, msg in (("heads.py", ["table", f, "--out", tmp_path / "x", "--top", "-1"],
                             "argument --top: -1: must be at least 1"),
                            ("heads.py", ["table", f, "--out", tmp_path / "x", "--top", "two"],
                             "argument --top: 'two': not an integer"),
                            ("prune_heads.py", [f, "--levels", "0"], "argument --levels: 0: must be at least 1"),
                            ("prune_heads.py", [f, "--random-orders", "-2"],
                             "argument --random-orders: -2: must be at least 0")):
        p = script(name, *args, expect=2)
        assert msg in p.stderr and p.stderr.startswith(f"error: {name}: argument --") \
            and p.stderr.count("\n") == 1, (name, args, p.stderr)
    assert not list(tmp_path.glob("x*")), "a refused command wrote its output"
