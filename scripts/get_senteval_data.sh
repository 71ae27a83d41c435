#!/usr/bin/env bash
# Fetch SentEval's downstream data (the tasks `vat evaluate` knows) into DEST, in the
# layout and preprocessing of facebookresearch/SentEval's data/downstream/get_transfer_data.bash.
#
#   scripts/get_senteval_data.sh [DEST]            # from the original hosts, then tokenize
#   scripts/get_senteval_data.sh --simcse [DEST]   # SimCSE's preprocessed copy (same files)
#   export VAT_SENTEVAL_DIR=DEST                   # then vat evaluate finds it
#
# DEST defaults to data/senteval. Needs curl, unzip, tar, perl and git (for the Moses tokenizer
# scripts). MRPC comes from SentEval's S3 copy of the two text files (Microsoft ships an .msi).
# Nothing is downloaded by the test suite; this script needs network access and cannot run in
# our offline CI (it was written from SentEval's script and checked with `bash -n` only).
#
# Preprocessing, as SentEval does it: STS12-16 and STSBenchmark sentences are Moses-tokenized
# and lowercased; SICK sentences Moses-tokenized; MR/CR/SUBJ/MPQA go through SentEval's PTB
# sed tokenizer; TREC loses backquotes and apostrophes. Hosts change: if one is down, use
# --simcse, which fetches the same processed files in one tarball.
# Licences differ per dataset (see PROVENANCE.md beside the shared copy); check them before
# redistributing anything.
set -euo pipefail

MODE=original
if [[ "${1:-}" == "--simcse" ]]; then MODE=simcse; shift; fi
DEST=$(realpath -m "${1:-data/senteval}")
mkdir -p "$DEST"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

fetch() { # url file
  echo "fetch $1" >&2
  curl -fL --retry 3 -o "$2" "$1"
}

if [[ $MODE == simcse ]]; then
  fetch https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/senteval.tar "$WORK/senteval.tar"
  tar -xf "$WORK/senteval.tar" -C "$WORK"
  cp -r "$WORK"/SentEval/data/downstream/. "$DEST"/ 2>/dev/null || cp -r "$WORK"/downstream/. "$DEST"/
  echo "SentEval data in $DEST (SimCSE copy); export VAT_SENTEVAL_DIR=$DEST" >&2
  exit 0
fi

# --- tools: Moses tokenizer/lowercaser and SentEval's PTB-style sed tokenizer
git clone --depth 1 https://github.com/moses-smt/mosesdecoder.git "$WORK/moses" >&2
MOSES_TOK="perl $WORK/moses/scripts/tokenizer/tokenizer.perl -threads 4 -l en -no-escape -q"
MOSES_LOWER="perl $WORK/moses/scripts/tokenizer/lowercase.perl"
fetch https://raw.githubusercontent.com/facebookresearch/SentEval/main/data/downstream/tokenizer.sed "$WORK/tokenizer.sed" ||
  fetch https://raw.githubusercontent.com/facebookresearch/SentEval/master/data/downstream/tokenizer.sed "$WORK/tokenizer.sed"
PTB="sed -f $WORK/tokenizer.sed"

tok_lower() { $MOSES_TOK | $MOSES_LOWER; }

# tokenize column $2 (1-based) of tab-separated file $1 with command $3, keep other columns
retokenize_cols() { # file "cols to tokenize" cmd
  local f=$1 cmd=$3 n i parts=()
  n=$(head -n 1 "$f" | awk -F'\t' '{print NF}')
  for ((i = 1; i <= n; i++)); do
    if [[ " $2 " == *" $i "* ]]; then cut -f"$i" "$f" | $cmd >"$WORK/col$i"; else cut -f"$i" "$f" >"$WORK/col$i"; fi
    parts+=("$WORK/col$i")
  done
  paste "${parts[@]}" >"$f.tmp" && mv "$f.tmp" "$f"
  rm -f "$WORK"/col*
}

# --- STS12-16: SemEval zips; folder names and the STS16 file prefix differ per year
declare -A STS_URL=(
  [STS12]=http://ixa2.si.ehu.es/stswiki/images/4/40/STS2012-en-test.zip
  [STS13]=http://ixa2.si.ehu.es/stswiki/images/2/2f/STS2013-en-test.zip
  [STS14]=http://ixa2.si.ehu.es/stswiki/images/8/8c/STS2014-en-test.zip
  [STS15]=http://ixa2.si.ehu.es/stswiki/images/d/da/STS2015-en-test.zip
  [STS16]=http://ixa2.si.ehu.es/stswiki/images/9/98/STS2016-en-test.zip)
declare -A STS_DIR=([STS12]=test-gold [STS13]=test-gs [STS14]=sts-en-test-gs-2014
  [STS15]=test_evaluation_task2a [STS16]=sts2016-english-with-gs-v1.0)
declare -A STS_SETS=([STS12]="MSRpar MSRvid SMTeuroparl surprise.OnWN surprise.SMTnews"
  [STS13]="FNWN headlines OnWN" [STS14]="deft-forum deft-news headlines images OnWN tweet-news"
  [STS15]="answers-forums answers-students belief headlines images"
  [STS16]="answer-answer headlines plagiarism postediting question-question")
mkdir -p "$DEST/STS"
for task in STS12 STS13 STS14 STS15 STS16; do
  fetch "${STS_URL[$task]}" "$WORK/$task.zip"
  unzip -qo "$WORK/$task.zip" -d "$WORK/$task"
  out="$DEST/STS/$task-en-test"
  rm -rf "$out" && mv "$WORK/$task/${STS_DIR[$task]}" "$out"
  for set in ${STS_SETS[$task]}; do
    if [[ $task == STS16 ]]; then
      mv "$out/STS2016.input.$set.txt" "$out/STS.input.$set.txt"
      mv "$out/STS2016.gs.$set.txt" "$out/STS.gs.$set.txt"
    fi
    f="$out/STS.input.$set.txt"
    cut -f1 "$f" | tok_lower >"$WORK/a"
    cut -f2 "$f" | tok_lower >"$WORK/b"
    paste "$WORK/a" "$WORK/b" >"$f"
  done
done

# --- STSBenchmark: sentences in columns 6 and 7
fetch http://ixa2.si.ehu.es/stswiki/images/4/48/Stsbenchmark.tar.gz "$WORK/stsb.tgz"
tar -xzf "$WORK/stsb.tgz" -C "$WORK"
rm -rf "$DEST/STS/STSBenchmark" && mv "$WORK/stsbenchmark" "$DEST/STS/STSBenchmark"
for split in train dev test; do
  f="$DEST/STS/STSBenchmark/sts-$split.csv"
  cut -f1-5 "$f" >"$WORK/meta"
  cut -f6 "$f" | tok_lower >"$WORK/a"
  cut -f7 "$f" | tok_lower >"$WORK/b"
  paste "$WORK/meta" "$WORK/a" "$WORK/b" >"$f"
done

# --- SICK (SemEval 2014 task 1): sentences in columns 2 and 3, header kept
mkdir -p "$DEST/SICK"
for split in train trial test_annotated; do
  fetch "http://alt.qcri.org/semeval2014/task1/data/uploads/sick_$split.zip" "$WORK/sick.zip"
  unzip -qo "$WORK/sick.zip" -d "$WORK/sick"
  f="$DEST/SICK/SICK_$split.txt"
  head -n 1 "$WORK/sick/SICK_$split.txt" >"$f"
  sed 1d "$WORK/sick/SICK_$split.txt" >"$WORK/body"
  retokenize_cols "$WORK/body" "2 3" "$MOSES_TOK"
  cat "$WORK/body" >>"$f"
done

# --- MR, CR, SUBJ, MPQA (SentEval's bundle of the NB-SVM ACL12 data)
fetch https://s3.amazonaws.com/senteval/senteval_data/datasmall_NB_ACL12.zip "$WORK/bin.zip"
unzip -qo "$WORK/bin.zip" -d "$WORK/bin"
B="$WORK/bin/data"
mkdir -p "$DEST"/{MR,CR,SUBJ,MPQA}
for pair in "rt10662/rt-polarity.pos MR" "rt10662/rt-polarity.neg MR" "customerr/custrev.pos CR" \
  "customerr/custrev.neg CR" "subj/subj.subjective SUBJ" "subj/subj.objective SUBJ" \
  "mpqa/mpqa.pos MPQA" "mpqa/mpqa.neg MPQA"; do
  set -- $pair
  cat -v "$B/$1" | $PTB >"$DEST/$2/$(basename "$1")"
done

# --- SST binary (PrincetonML/SIF) and fine-grained (AcademiaSinicaNLPLab)
mkdir -p "$DEST/SST/binary" "$DEST/SST/fine"
for split in train dev test; do
  fetch "https://raw.githubusercontent.com/PrincetonML/SIF/master/data/sentiment-$split" "$DEST/SST/binary/sentiment-$split"
  fetch "https://raw.githubusercontent.com/AcademiaSinicaNLPLab/sentiment_dataset/master/data/stsa.fine.$split" \
    "$DEST/SST/fine/sentiment-$split"
done

# --- TREC (cogcomp): backquotes and apostrophes removed, as SentEval does
mkdir -p "$DEST/TREC"
for split in train_5500 TREC_10; do
  fetch "http://cogcomp.cs.illinois.edu/Data/QA/QC/$split.label" "$DEST/TREC/$split.label"
  sed -i -e 's/`//g' -e "s/'//g" "$DEST/TREC/$split.label"
done

# --- MRPC: SentEval's copy of the two text files (Microsoft ships an .msi)
mkdir -p "$DEST/MRPC"
for split in train test; do
  fetch "https://s3.amazonaws.com/senteval/senteval_data/msr_paraphrase_$split.txt" "$DEST/MRPC/msr_paraphrase_$split.txt"
done

echo "SentEval data in $DEST; export VAT_SENTEVAL_DIR=$DEST" >&2
