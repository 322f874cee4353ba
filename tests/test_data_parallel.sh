#!/usr/bin/env bash
# prepare encodes each file in --jobs pieces at once (cut at line starts,
# one spm_encode per piece, fed through a pipe): the dataset's arrays are
# the same with 1, 2 and 3 workers, byte for byte (ids and offsets of
# every split, and the vocabulary; spm_train runs with threads=1 in every
# run so that only the encoding differs; the model file differs anyway, as
# it records its work path).  The corpus has the
# cases a cut could get wrong: empty lines, a last line without '\n', a
# split of 2 lines for 3 workers, a line longer than a piece.
set -u
. "$(dirname "$0")/lib.sh"
command -v spm_train >/dev/null || skip "no spm_train (Debian package sentencepiece)"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
text_corpus 4000 1 "$W/a.en" "$W/a.xx"
sed -i '5s/.*//; 777s/.*//' "$W/a.en"                       # empty source lines
text_corpus 999 2 "$W/b.en" "$W/b.xx"
printf '%s' "$(cat "$W/b.xx")" >"$W/b.nonl.xx"             # last line without '\n'
text_corpus 2 3 "$W/c.en" "$W/c.xx"
{ for i in $(seq 400); do printf 'w%d ' $((i % 50)); done; echo; } >"$W/d.en"
echo "v1 v2" >"$W/d.xx"
for j in 1 2 3; do
    "$BIN" prepare --out "$W/j$j.h5" --jobs $j threads=1 vocab_size=400 max_len=512 \
        --split train "$W/a.en" "$W/a.xx" --split train "$W/b.en" "$W/b.nonl.xx" \
        --split dev "$W/c.en" "$W/c.xx" --split test "$W/d.en" "$W/d.xx" >"$W/p$j.log" 2>&1 \
        || fail "prepare --jobs $j: $(tail -2 "$W/p$j.log")"
done
grep -q "in 4 pieces\|in 8 pieces" "$W/p1.log" || fail "--jobs 1: $(grep spm_encode "$W/p1.log")"
grep "spm_encode" "$W/p3.log"
for a in /splits/train/src_ids /splits/train/tgt_ids /splits/train/src_offsets /splits/train/tgt_offsets \
         /splits/dev/src_ids /splits/dev/tgt_offsets /splits/test/src_ids /splits/test/src_offsets; do
    h5dump -d $a -b LE -o "$W/1.bin" "$W/j1.h5" >/dev/null || fail "h5dump $a"
    for j in 2 3; do
        h5dump -d $a -b LE -o "$W/$j.bin" "$W/j$j.h5" >/dev/null || fail "h5dump $a"
        cmp -s "$W/1.bin" "$W/$j.bin" || fail "$a differs between --jobs 1 and --jobs $j"
    done
done
for j in 2 3; do
    cmp -s <(h5dump -d /vocab/pieces "$W/j1.h5" | tail -n +2) <(h5dump -d /vocab/pieces "$W/j$j.h5" | tail -n +2) ||
        fail "the vocabularies of --jobs 1 and --jobs $j differ"
done
n=$(h5dump -a /splits/train/n_pairs "$W/j3.h5" | awk '/\(0\)/ { print $2 }')
[ "$n" = 4999 ] || fail "train has $n pairs, expected 4999"
ok "--jobs 1, 2 and 3 write the same ids, offsets and vocabulary ($n training pairs; 3 workers: $(grep -o 'in [0-9]* pieces' "$W/p3.log"))"
