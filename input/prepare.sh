#!/usr/bin/env bash
# One command per dataset: fetch (only where the local folder is missing) and
# binarize with `transformer prepare`.
#
#   input/prepare.sh NAME [ROOT] [OUT]
#     NAME  multi30k | wmt14 | wmt14-offline | wmt14-enfr
#     ROOT  data root holding the dataset folders (default ../shared/data):
#             multi30k: ROOT/multi30k            (train, val -> dev, test2016, test2017)
#             wmt14:    ROOT/wmt14-train (Europarl v7, Common Crawl, News Commentary v9)
#                       + ROOT/wmt14 (dev newstest2013, test newstest2014)
#             wmt14-offline: ROOT/newstest-extra + ROOT/tatoeba-manythings (train)
#                       + ROOT/wmt14 (dev newstest2013, test newstest2014)
#             wmt14-enfr: ROOT/wmt14-enfr-train (Europarl v7, Common Crawl, News
#                       Commentary v9, UN, Gigaword fr-en; ~3.5 GB, fetched only
#                       by 'fetch wmt14-enfr-train') + ROOT/wmt14-enfr (dev
#                       newstest2012+2013, test newstest2014); vocabulary 32000
#     OUT   dataset file (default data/NAME.h5)
#   A missing folder is downloaded from the URLs in input/datasets.manifest and
#   every file is checked against its sha256 there (the folder appears only
#   when complete).  Environment: VOCAB (shared BPE vocabulary size), MAX_LEN
#   (positions incl. BOS/EOS; longer training pairs are dropped), SENTENCES
#   (spm_train sample size, any dataset; default: all lines, wmt14 and
#   wmt14-enfr 4000000), JOBS (prepare's workers, default: cores),
#   MANIFEST, TRANSFORMER (the binary).
#   `input/prepare.sh fetch FOLDER [ROOT]` only fetches one folder.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
MANIFEST=${MANIFEST:-$TOP/input/datasets.manifest}
TRANSFORMER=${TRANSFORMER:-$TOP/bin/transformer}

die() { echo "error: $*" >&2; exit 2; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# download URL to FILE (file://, http(s)://, or local:PATH inside the folder)
download() {
    local url=$1 out=$2 dir=$3
    case $url in
        local:*) cp -- "$dir/${url#local:}" "$out" ;;
        *) command -v curl >/dev/null || die "$url: curl is not installed (apt-get install curl)"
           curl -fsSL --retry 2 --connect-timeout 30 -o "$out" -- "$url" 2>/dev/null \
               || die "$url: download failed (offline? use a local folder instead)" ;;
    esac
}

# fetch FOLDER into ROOT/FOLDER unless it is there; all or nothing
fetch() {
    local folder=$1 root=$2
    [ -d "$root/$folder" ] && return 0
    grep -q "^$folder " "$MANIFEST" || die "$root/$folder: missing, and $MANIFEST has no source for it"
    echo "fetch: $root/$folder is missing; downloading from $MANIFEST"
    mkdir -p "$root"
    local part="$root/.$folder.partial.$$"
    rm -rf "$part"; mkdir -p "$part/.download"
    trap 'rm -rf "$part"' EXIT
    local f sum url how tmp got
    while read -r fol f sum url how; do
        [ "$fol" = "$folder" ] || continue
        tmp="$part/$f.tmp"
        mkdir -p "$(dirname "$tmp")"
        case ${how:-none} in
            none) download "$url" "$tmp" "$part" ;;
            gunzip) download "$url" "$tmp.gz" "$part"
                    gzip -dc "$tmp.gz" >"$tmp" 2>/dev/null || die "$url: not a gzip file"; rm -f "$tmp.gz" ;;
            untar:*) local src="$part/${url#local:}"
                     tar -xzOf "$src" "${how#untar:}" >"$tmp" 2>/dev/null || die "$src: has no member ${how#untar:}" ;;
            untargz:*) local src="$part/${url#local:}"
                       { tar -xOf "$src" "${how#untargz:}" | gzip -dc >"$tmp"; } 2>/dev/null \
                           || die "$src: has no gzip member ${how#untargz:}" ;;
            unzip:*) local src="$part/${url#local:}"
                     unzip -p "$src" "${how#unzip:}" >"$tmp" 2>/dev/null || die "$src: has no member ${how#unzip:}" ;;
            zipcol:*) local spec=${how#zipcol:} src="$part/${url#local:}"
                      unzip -p "$src" "${spec%:*}" >"$tmp.tsv" 2>/dev/null || die "$src: has no member ${spec%:*}"
                      cut -f"${spec##*:}" "$tmp.tsv" >"$tmp"; rm -f "$tmp.tsv" ;;
            *) die "$MANIFEST: unknown HOW '$how' for $folder/$f" ;;
        esac
        got=$(sha_of "$tmp")
        case $sum in
            -) ;;
            unknown) echo "fetch: warning: $folder/$f: no published sha256; computed $got" >&2 ;;
            *) [ "$got" = "$sum" ] || die "$url: sha256 mismatch for $folder/$f (expected $sum, got $got)" ;;
        esac
        mv "$tmp" "$part/$f"
        echo "fetch: $folder/$f ok"
    done < <(grep -v '^#' "$MANIFEST")
    rm -rf "$part/.download"
    mv "$part" "$root/$folder"
    trap - EXIT
}

[ $# -ge 1 ] || { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
name=$1
if [ "$name" = fetch ]; then
    [ $# -ge 2 ] || die "usage: input/prepare.sh fetch FOLDER [ROOT]"
    fetch "$2" "${3:-$TOP/../shared/data}"
    exit 0
fi
root=${2:-$TOP/../shared/data}
out=${3:-$TOP/data/$name.h5}
# the output given in ROOT's place would become a folder of downloads
case $root in
    *.h5) die "$root: ROOT is the folder of the dataset folders, not the output file (input/prepare.sh NAME [ROOT] [OUT]; \"\" for the default ROOT)" ;;
esac
[ ! -e "$root" ] || [ -d "$root" ] || die "$root: ROOT is not a folder (input/prepare.sh NAME [ROOT] [OUT])"
# SENTENCES: spm_train's sample of every dataset (prepare --sentences; 0:
# every line); checked before anything is fetched (prepare checks its range)
case ${SENTENCES:-} in
    *[!0-9]*) die "SENTENCES='$SENTENCES': not a number of lines (spm_train's sample size for the vocabulary; 0: every line)" ;;
esac
mkdir -p "$(dirname "$out")"
max_len=${MAX_LEN:-256}
args=()
sentences=""   # the dataset's default sample: all lines
case $name in
    multi30k)
        fetch multi30k "$root"
        d=$root/multi30k
        vocab=${VOCAB:-8000}
        args=(--split train "$d/train.en" "$d/train.de" --split dev "$d/val.en" "$d/val.de"
              --split test2016 "$d/test2016.en" "$d/test2016.de" --split test2017 "$d/test2017.en" "$d/test2017.de") ;;
    wmt14)
        fetch wmt14-train "$root"; fetch wmt14 "$root"
        t=$root/wmt14-train
        vocab=${VOCAB:-37000}
        for c in europarl-v7 commoncrawl news-commentary-v9; do
            args+=(--split train "$t/$c.de-en.en" "$t/$c.de-en.de")
        done
        # 4.5M pairs: spm_train learns the merges from a 4M-line sample
        sentences=4000000 ;;
    wmt14-offline)
        fetch newstest-extra "$root"; fetch tatoeba-manythings "$root"; fetch wmt14 "$root"
        vocab=${VOCAB:-16000}
        for f in "$root"/newstest-extra/*.en; do
            args+=(--split train "$f" "${f%.en}.de")
        done
        args+=(--split train "$root/tatoeba-manythings/tatoeba.en" "$root/tatoeba-manythings/tatoeba.de") ;;
    wmt14-enfr)
        # 3.5 GB: never downloaded behind the user's back
        t=$root/wmt14-enfr-train
        [ -d "$t" ] || die "$t: missing (fetch it with: input/prepare.sh fetch wmt14-enfr-train $root; about 3.5 GB from statmt.org)"
        fetch wmt14-enfr "$root"
        vocab=${VOCAB:-32000}
        for c in europarl-v7.fr-en commoncrawl.fr-en news-commentary-v9.fr-en undoc.2000.fr-en giga-fren.release2.fixed; do
            args+=(--split train "$t/$c.en" "$t/$c.fr")
        done
        w=$root/wmt14-enfr
        args+=(--split dev "$w/newstest2012.en" "$w/newstest2012.fr" --split dev "$w/newstest2013.en" "$w/newstest2013.fr"
               --split test "$w/newstest2014.en" "$w/newstest2014.fr")
        # ~40M pairs: the 32000 word-pieces are learned from a 4M-line sample
        sentences=4000000 ;;
    *) die "$name: unknown dataset (multi30k, wmt14, wmt14-offline, wmt14-enfr)" ;;
esac
case $name in wmt14|wmt14-offline)
    w=$root/wmt14
    args+=(--split dev "$w/newstest2013.en" "$w/newstest2013.de" --split test "$w/newstest2014.en" "$w/newstest2014.de") ;;
esac
sentences=${SENTENCES:-$sentences}
[ -n "$sentences" ] && args+=(--sentences "$sentences")
[ -n "${JOBS:-}" ] && args+=(--jobs "$JOBS")
[ -x "$TRANSFORMER" ] || die "$TRANSFORMER: not built (run make)"
exec "$TRANSFORMER" prepare --out "$out" "${args[@]}" vocab_size="$vocab" max_len="$max_len"
