#!/usr/bin/env bash
# input/prepare.sh wmt14-enfr on generated data (no download here): the
# code path of the real corpus, small.
#  - the training folder missing: one error line naming the fetch command,
#    exit 2, no download attempted;
#  - fetch wmt14-enfr-train from a local mirror of the five archives, laid
#    out as statmt.org's (tgz members, and the Gigaword tar of .gz members:
#    HOW untargz), through the real manifest's lines for the folder;
#  - prepare: five training corpora in order, dev = newstest2012 + 2013,
#    test = newstest2014, 16-bit ids, JOBS workers.
set -u
. "$(dirname "$0")/lib.sh"
command -v spm_train >/dev/null || skip "no spm_train (Debian package sentencepiece)"
GEN=$TOP/bin/tests/gen_corpus
[ -x "$GEN" ] || fail "$GEN: not built (make tests)"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
P=$TOP/input/prepare.sh

expect_error 2 "wmt14-enfr-train: missing (fetch it with: input/prepare.sh fetch wmt14-enfr-train" "$P" wmt14-enfr "$W/root" "$W/x.h5"
[ -e "$W/x.h5" ] || [ -d "$W/root/wmt14-enfr" ] && fail "the failed run left files"
[ "$("$P" wmt14-enfr "$W/root" "$W/x.h5" 2>&1 | wc -l)" = 1 ] || fail "the error is not one line"

# ---- a mirror of the archives (generated text under the real member names)
M=$W/mirror; mkdir -p "$M/src/training" "$M/src/un" "$M/test"
seed=1
gen() { "$GEN" text "$1" $((seed++)) "$2.en" "$2.fr" || fail "gen_corpus $2"; }
gen 300 "$M/src/training/europarl-v7.fr-en"
gen 200 "$M/src/commoncrawl.fr-en"
gen 100 "$M/src/training/news-commentary-v9.fr-en"
gen 250 "$M/src/un/undoc.2000.fr-en"
gen 400 "$M/src/giga-fren.release2.fixed"
gzip -n "$M/src/giga-fren.release2.fixed.en" "$M/src/giga-fren.release2.fixed.fr"
( cd "$M/src" && tar -czf "$M/training-parallel-europarl-v7.tgz" training/europarl-v7.fr-en.* &&
  tar -czf "$M/training-parallel-commoncrawl.tgz" commoncrawl.fr-en.* &&
  tar -czf "$M/training-parallel-nc-v9.tgz" training/news-commentary-v9.fr-en.* &&
  tar -czf "$M/training-parallel-un.tgz" un/undoc.2000.fr-en.* &&
  tar -cf "$M/training-giga-fren.tar" giga-fren.release2.fixed.*.gz ) || fail "tar"
for y in 2012 2013 2014; do gen $((30 + y % 10)) "$M/test/newstest$y"; done
# the real manifest's En-Fr lines, the URLs on the mirror, the sums of the
# generated files not checked ('unknown')
awk -v m="file://$M" '$1 == "wmt14-enfr-train" || $1 == "wmt14-enfr" {
        if ($4 ~ /^http/) { n = split($4, p, "/"); $4 = m "/" ($1 == "wmt14-enfr" ? "test/" : "") p[n] }
        if ($3 != "-") $3 = "unknown"; print }' "$TOP/input/datasets.manifest" >"$W/manifest"
[ "$(wc -l <"$W/manifest")" = 21 ] || fail "the manifest has $(wc -l <"$W/manifest") En-Fr lines, expected 21"
MANIFEST=$W/manifest "$P" fetch wmt14-enfr-train "$W/root" >"$W/fetch.log" 2>&1 || fail "fetch: $(tail -3 "$W/fetch.log")"
cmp -s <(gzip -dc "$M/src/giga-fren.release2.fixed.fr.gz") "$W/root/wmt14-enfr-train/giga-fren.release2.fixed.fr" ||
    fail "the Gigaword member was not unpacked (untargz)"
ok "fetch wmt14-enfr-train: $(ls "$W/root/wmt14-enfr-train" | wc -l) files from the five archives"

# ---- prepare
MANIFEST=$W/manifest VOCAB=600 JOBS=2 "$P" wmt14-enfr "$W/root" "$W/enfr.h5" >"$W/prep.log" 2>&1 ||
    fail "prepare.sh wmt14-enfr: $(tail -3 "$W/prep.log")"
attr() { h5dump -a "$1" "$W/enfr.h5" | awk '/\(0\)/ { print $2 }'; }
train=$(attr /splits/train/n_input_pairs) dev=$(attr /splits/dev/n_pairs) test=$(attr /splits/test/n_pairs)
[ "$train" = 1250 ] && [ "$dev" = $((32 + 33)) ] && [ "$test" = 34 ] ||
    fail "pairs: train $train (1250), dev $dev (65), test $test (34)"
[ "$(attr /id_bits)" = 16 ] && [ "$(attr /vocab_size)" = 600 ] || fail "id_bits $(attr /id_bits), vocab $(attr /vocab_size)"
order=$(h5dump -a /splits/train/src_files "$W/enfr.h5" | grep -o '[a-z0-9.-]*\.en"' | tr -d '"' | tr '\n' ' ')
[ "$order" = "europarl-v7.fr-en.en commoncrawl.fr-en.en news-commentary-v9.fr-en.en undoc.2000.fr-en.en giga-fren.release2.fixed.en " ] ||
    fail "training files: $order"
ok "prepare.sh wmt14-enfr: train $train pairs from 5 corpora, dev $dev (newstest2012+2013), test $test (newstest2014), 16-bit ids"
