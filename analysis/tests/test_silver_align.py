"""The silver word alignment (silver_align.py): words of a dataset's pieces,
grow-diag-final-and by hand, the silver file written and read back (and
refused when malformed), and eflomal run for real on a tiny planted corpus
whose true links are known."""

import random

import h5py
import numpy as np
import pytest

import attention as A
import silver_align as S
from conftest import cli, cli_error


def test_words_merge_pieces_as_attention_does():
    pieces = ["\u2581Ein", "\u2581M", "ann", "\u2581l", "<0xC3>", "<0xA4>", "dt", "\u2581", "<0xC3>", "<0x9F>", "."]
    assert S.sentence_words(pieces) == ["Ein", "Mann", "lädt", "ß."]
    assert len(S.sentence_words(pieces)) == len(A.word_groups(pieces + ["</s>"]))
    assert S.piece_word(["\u2581"]) == "\u2581"                    # never an empty word (eflomal splits on spaces)


def test_grow_diag_final_and_by_hand():
    # forward (source, target): 0-0 1-1 2-1; reverse: 0-0 1-1 1-2 3-3
    fwd, rev = {(0, 0), (1, 1), (2, 1)}, {(0, 0), (1, 1), (1, 2), (3, 3)}
    # intersection {0-0, 1-1}; grow: 2-1 (source 2 unaligned, a neighbour of 1-1) and
    # 1-2 (target 2 unaligned); final-and: 3-3 (both words unaligned)
    assert S.grow_diag_final_and(fwd, rev) == {(0, 0), (1, 1), (2, 1), (1, 2), (3, 3)}
    # a union point whose words are both aligned already is not added
    assert S.grow_diag_final_and({(0, 0), (1, 1)}, {(0, 0), (1, 1), (0, 1)}) == {(0, 0), (1, 1)}
    # final-and adds only points with both words unaligned: 2-0 has source 2 free but target 0 taken
    assert S.grow_diag_final_and({(0, 0), (2, 0)}, {(0, 0)}) == {(0, 0)}


def test_silver_file_round_trip_and_refusals(tmp_path):
    out = tmp_path / "s.h5"
    links = [{(0, 0), (1, 2)}, set(), {(0, 1)}]
    S.write_silver(str(out), [3, 7, 9], [["a", "b", "c"], ["d"], ["e", "f"]], [["x", "y"], ["z"], ["w"]], links,
                   {"split": "dev", "aligner": "eflomal"})
    s = S.load_silver(str(out))
    assert s["split"] == "dev" and s["attrs"]["aligner"] == "eflomal" and len(s["digest"]) == 16
    assert s["sentences"] == {3: (3, 2, {(0, 0), (1, 2)}), 7: (1, 1, set()), 9: (2, 1, {(0, 1)})}
    with h5py.File(out, "r") as f:
        assert f.attrs["format"] == S.SILVER_FORMAT and f["links"].dtype == np.int16
        assert list(f["link_offsets"][()]) == [0, 2, 2, 3]
    bad = tmp_path / "bad.h5"
    S.write_silver(str(bad), [0], [["a"]], [["x"]], [{(0, 3)}], {"split": "dev"})
    with pytest.raises(A.AnalysisError, match="sentence 0: a link outside its 1 target and 1 source words"):
        S.load_silver(str(bad))
    with h5py.File(bad, "a") as f:
        f.attrs["format"] = "something-else"
    with pytest.raises(A.AnalysisError, match="not a silver alignment file"):
        S.load_silver(str(bad))


def test_out_over_the_dataset_refused(tmp_path):
    """--out naming the dataset replaced it with the silver links: refused in
    one line (before eflomal is needed), the dataset unchanged."""
    data = tmp_path / "d.h5"
    data.write_bytes(b"not read: refused before")
    err = cli_error("silver_align.py", data, "--out", f"{tmp_path}/./d.h5")
    assert err == f"{tmp_path}/./d.h5: --out is also an input of silver_align.py ({data}): choose another name", err
    assert data.read_bytes() == b"not read: refused before"


def _planted_corpus(path, n_train=300, n_dev=20, seed=7):
    """A dataset file (docs/data.md layout) of a planted language pair: source
    words s0..s14, target word tK the translation of sK, except that s3 is two
    target words (t3a t3b); same word order.  Some words split into two pieces.
    True links (target word, source word) of the dev split are returned."""
    rnd = random.Random(seed)
    pieces = ["<pad>", "<s>", "</s>", "<unk>"]
    ids = {}

    def piece(p):
        if p not in ids:
            ids[p] = len(pieces)
            pieces.append(p)
        return ids[p]

    def word_ids(w):   # every third word in two pieces
        return [piece("\u2581" + w[:1]), piece(w[1:])] if int(w[1:].rstrip("ab")) % 3 == 0 else [piece("\u2581" + w)]

    splits, truth = {}, []
    for name, n in (("train", n_train), ("dev", n_dev)):
        src, tgt = [], []
        for _ in range(n):
            words = [rnd.randrange(15) for _ in range(rnd.randint(3, 8))]
            tw, links = [], set()
            for k, w in enumerate(words):
                for t in (["t3a", "t3b"] if w == 3 else [f"t{w}"]):
                    links.add((len(tw), k))
                    tw.append(t)
            src.append(sum((word_ids(f"s{w}") for w in words), []))
            tgt.append(sum((word_ids(t) for t in tw), []))
            if name == "dev":
                truth.append(links)
        splits[name] = (src, tgt)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "transformer-dataset"
        f["vocab/pieces"] = np.array([p.encode() for p in pieces], dtype=object)
        for name, sides in splits.items():
            for side, sents in zip(("src", "tgt"), sides):
                f[f"splits/{name}/{side}_ids"] = np.array(sum(sents, []), np.uint16)
                f[f"splits/{name}/{side}_offsets"] = np.cumsum([0] + [len(s) for s in sents]).astype(np.int64)
    return truth


def test_eflomal_recovers_planted_links(tmp_path):
    """eflomal for real (seeded from /dev/urandom, so the margin is wide):
    on 320 pairs of a word-for-word planted pair it finds the true links."""
    try:
        import eflomal  # noqa: F401
    except ImportError:
        pytest.skip("eflomal is not installed (pip install -r analysis/requirements.txt)")
    truth = _planted_corpus(tmp_path / "d.h5")
    out = tmp_path / "silver.h5"
    cli("silver_align.py", tmp_path / "d.h5", "--split", "dev", "--out", out, "--length", "0.2")
    s = S.load_silver(str(out))
    assert sorted(s["sentences"]) == list(range(20)) and s["split"] == "dev"
    with h5py.File(out, "r") as f:
        assert f.attrs["eflomal_version"] and f.attrs["symmetrisation"].startswith("grow-diag-final-and")
        assert f.attrs["trained_on"] == "train (300 pairs) + dev (20 pairs)"
    got = {(k, t, w) for k, (_, _, l) in s["sentences"].items() for t, w in l}
    want = {(k, t, w) for k, l in enumerate(truth) for t, w in l}
    assert A.aer(got, want) < 0.1, A.aer(got, want)      # measured: 0 to 0.032 over 10 runs
    assert "is also the training split" in cli_error("silver_align.py", tmp_path / "d.h5", "--split", "train",
                                                       "--out", out)
    assert "no split 'test'" in cli_error("silver_align.py", tmp_path / "d.h5", "--split", "test", "--out", out)
