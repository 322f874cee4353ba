#!/usr/bin/env bash
# input/prepare.sh's download path, against local mirrors of the public
# files (these machines are offline): file:// URLs and a real HTTP server on
# 127.0.0.1 (python3 -m http.server).  The mirror holds the files in the form
# the public URLs serve them (.gz, .zip, .tgz) built from ../shared/data; the
# manifest is the real input/datasets.manifest with only the URL prefixes
# rewritten (and the sums of re-packed archives, whose bytes differ from the
# originals), so the text files are checked against the published sha256.
# An output file given as ROOT, or a file as ROOT, is refused in one line.
set -u
. "$(dirname "$0")/lib.sh"
S=$SHARED_DATA
for f in multi30k/val.en wmt14/newstest2013.en tatoeba-manythings/tatoeba.en; do
    [ -f "$S/$f" ] || skip "no $S/$f: the download mirror is built from ../shared/data"
done
for t in curl gzip tar unzip; do command -v $t >/dev/null || fail "$t not installed"; done
W=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill $srv 2>/dev/null; rm -rf "$W"' EXIT
MAN=$TOP/input/datasets.manifest
P=$TOP/input/prepare.sh

# ---- the mirror
mkdir -p "$W/mirror/m30k" "$W/mirror/opus" "$W/mirror/tat" "$W/mirror/statmt/training"
for pair in train:train val:val test2016:test_2016_flickr test2017:test_2017_flickr; do
    for l in en de; do gzip -c "$S/multi30k/${pair%%:*}.$l" >"$W/mirror/m30k/${pair#*:}.$l.gz"; done
done
cp "$S"/wmt14/newstest201[34].* "$W/mirror/opus/"
paste "$S/tatoeba-manythings/tatoeba.en" "$S/tatoeba-manythings/tatoeba.de" >"$W/deu.txt"
cp "$S/tatoeba-manythings/_about.txt" "$W/_about.txt"
(cd "$W" && python3 -m zipfile -c mirror/tat/deu-eng.zip deu.txt _about.txt) || fail "zip"
# small real-text stand-ins for the WMT14 training archives (same member names)
for c in europarl-v7 news-commentary-v9; do
    for l in en de; do head -n 300 "$S/multi30k/train.$l" >"$W/mirror/statmt/training/$c.de-en.$l"; done
done
for l in en de; do head -n 200 "$S/multi30k/val.$l" >"$W/mirror/statmt/commoncrawl.de-en.$l"; done
(cd "$W/mirror/statmt" && tar -czf eu.tgz training/europarl-v7.* && tar -czf nc.tgz training/news-commentary-v9.* \
    && tar -czf cc.tgz commoncrawl.*) || fail "tar"
sha() { sha256sum "$1" | cut -d' ' -f1; }

# ---- an HTTP server on 127.0.0.1 (a free port)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$W/mirror" >/dev/null 2>&1 &
srv=$!
# as long as a loaded machine's Python start-up takes, then a line saying so
wait_until $srv curl -fso /dev/null "http://127.0.0.1:$port/" || fail "the test's HTTP server (python3 -m http.server) did not start"

sed -e "s|https://raw.githubusercontent.com/multi30k/dataset/[0-9a-f]*/data/task1/raw|file://$W/mirror/m30k|" \
    -e "s|https://raw.githubusercontent.com/Helsinki-NLP/OPUS-MT-testsets/[0-9a-f]*/testsets/en-de|http://127.0.0.1:$port/opus|" \
    -e "s|https://raw.githubusercontent.com/Helsinki-NLP/OPUS-MT-testsets/[0-9a-f]*/testsets/en-fr|http://127.0.0.1:$port/opus-fr|" \
    -e "s|https://raw.githubusercontent.com/rioyshky/translation/[0-9a-f]*/deu-eng.zip|http://127.0.0.1:$port/tat/deu-eng.zip|" \
    -e "s|b7688f84f99fa33c17397c14d8bd9cef1fdeb2ee0bf50074767023aee8926e28|$(sha "$W/mirror/tat/deu-eng.zip")|" \
    -e "s|http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz|file://$W/mirror/statmt/eu.tgz|" \
    -e "s|http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz|file://$W/mirror/statmt/cc.tgz|" \
    -e "s|http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz|file://$W/mirror/statmt/nc.tgz|" \
    -e "s|0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7|$(sha "$W/mirror/statmt/eu.tgz")|" \
    -e "s|c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5|$(sha "$W/mirror/statmt/cc.tgz")|" \
    "$MAN" >"$W/manifest"
export MANIFEST=$W/manifest
grep -q raw.githubusercontent "$W/manifest" && fail "a URL was not redirected to the mirror"

# ---- 1. fetch from file:// (gunzip) and http:// (plain, zip) into an empty root
R=$W/root
MANIFEST=$W/manifest "$P" fetch multi30k "$R" 2>"$W/err" || { cat "$W/err"; fail "fetch multi30k"; }
"$P" fetch wmt14 "$R" 2>"$W/err" || { cat "$W/err"; fail "fetch wmt14"; }
"$P" fetch tatoeba-manythings "$R" 2>"$W/err" || { cat "$W/err"; fail "fetch tatoeba"; }
for f in multi30k/{train,val,test2016,test2017}.{en,de} wmt14/newstest201{3,4}.{en,de} \
         tatoeba-manythings/tatoeba.{en,de} tatoeba-manythings/_about.txt; do
    cmp -s "$R/$f" "$S/$f" || fail "$f differs from the shared copy"
done
[ -e "$R/tatoeba-manythings/.download" ] && fail "download cache left in the folder"
ok "fetched multi30k (file://, gunzip), wmt14 (http), tatoeba (http, zip columns): identical, sha256 verified"

# ---- 2. archives (untar), the unknown-sum warning
"$P" fetch wmt14-train "$R" 2>"$W/err" || { cat "$W/err"; fail "fetch wmt14-train"; }
grep -q "warning: wmt14-train/.download/training-parallel-nc-v9.tgz: no published sha256" "$W/err" || fail "no warning for the unverified archive"
cmp -s "$R/wmt14-train/commoncrawl.de-en.de" "$W/mirror/statmt/commoncrawl.de-en.de" || fail "untar"
ok "fetched wmt14-train from tar archives"

# ---- 3. a corrupted download: sha256 mismatch, nothing left behind
R2=$W/root2
gzip -dc "$W/mirror/m30k/val.de.gz" | sed '5s/Mann/Frau/' | gzip -c >"$W/mirror/m30k/val.de.gz.new"
mv "$W/mirror/m30k/val.de.gz.new" "$W/mirror/m30k/val.de.gz"
expect_error 2 "val.de.gz: sha256 mismatch for multi30k/val.de" "$P" fetch multi30k "$R2"
[ -e "$R2/multi30k" ] && fail "a folder was created despite the mismatch"
ls -a "$R2" | grep -q partial && fail "partial download left behind"

# ---- 4. offline: the server is gone
kill $srv; wait $srv 2>/dev/null; srv=
expect_error 2 "newstest2013.de: download failed (offline?" "$P" fetch wmt14 "$R2"
[ -e "$R2/wmt14" ] && fail "a folder was created although the download failed"

# ---- 5. a present folder is used as is (no download), end to end to a dataset
VOCAB=1000 MAX_LEN=64 "$P" multi30k "$R" "$W/m.h5" >"$W/log" 2>&1 || { cat "$W/log"; fail "prepare.sh multi30k"; }
grep -q "fetch:" "$W/log" && fail "downloaded although the folder is present"
h5dump -a /split_names "$W/m.h5" | grep -q '"test2017"' || fail "dataset lacks test2017"
ok "input/prepare.sh multi30k built $(h5dump -a /splits/train/n_pairs "$W/m.h5" | awk '/\(0\)/ {print $2}') training pairs"

# ---- 6. the output file given in ROOT's place, or a file as ROOT: refused,
# no folder of downloads made under the output's name
expect_error 2 "^error: $W/m2.h5: ROOT is the folder of the dataset folders, not the output file" "$P" multi30k "$W/m2.h5"
expect_error 2 "^error: $W/log: ROOT is not a folder" "$P" multi30k "$W/log" "$W/m3.h5"
[ ! -e "$W/m2.h5" ] && [ ! -e "$W/m3.h5" ] || fail "a refused prepare.sh left $(ls -d "$W"/m[23].h5)"
echo "test_data_fetch: all checks passed"
