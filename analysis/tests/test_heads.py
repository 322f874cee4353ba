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
