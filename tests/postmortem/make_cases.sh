#!/usr/bin/env bash
# The post-mortem's evaluation runs: `replayscope run` with one startup cause injected each,
# written as events files (one run per file) into OUTDIR.
#
#   bash tests/postmortem/make_cases.sh cuda   OUTDIR   # on a GPU (under 5 minutes on one H200)
#   bash tests/postmortem/make_cases.sh static OUTDIR   # the CPU stand-in (tests/postmortem/cases/cpu)
#
# Needs torch, safetensors and transformers (for the checkpoint of the slow-load case); runs
# from the repository root with the package importable (PYTHONPATH=. is set here).
# tests/postmortem/cases.py labels each case with the first finding the diagnosis must give.
set -u
BACKEND=${1:?usage: make_cases.sh cuda|static OUTDIR}
OUT=${2:?usage: make_cases.sh cuda|static OUTDIR}
case "$BACKEND" in
  cuda) TAG=gpu; PRESET=136m; MANY=128; OOM=1 ;;
  static) TAG=cpu; PRESET=tiny; MANY=512; OOM=0 ;;     # the tiny model's dry runs take milliseconds
  *) echo "backend must be cuda or static, got $BACKEND" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

run_case() {   # NAME, then `replayscope run` flags
  local name=$1; shift
  local started=$SECONDS
  python3 -m replayscope run --quiet --workload decode-only --steps 200 --seed 0 \
    --name "case-$name" --run-id "$TAG-$name" --events "$OUT/$TAG-$name.jsonl" "$@"
  echo "case $TAG-$name: exit $? in $((SECONDS - started)) s"
}

run_case clean --backend "$BACKEND" --preset "$PRESET" --capture-sizes 1,16,24,32   # the sizes its traffic uses
run_case many-sizes --backend "$BACKEND" --preset "$PRESET" --capture-sizes "$(seq -s, 1 "$MANY")"
run_case compile --backend compile --preset tiny --capture-sizes 1,8
run_case failed-capture --backend "$BACKEND" --preset "$PRESET" --fail-capture 16
run_case slow-size --backend "$BACKEND" --preset "$PRESET" --slow-capture 8:3
if [ "$OOM" = 1 ]; then
  # 1b: 2.3 GiB of weights and 0.1 GiB of KV cache under a 2.6 GiB cap: the largest graphs do not fit
  run_case oom-cap --backend "$BACKEND" --preset 1b --memory-cap-gib 2.6 --capture-sizes 1,8,32,256,512
fi

# A real checkpoint read from disk, slowed to 10 MB/s (about 11 s for its bf16 weights).
python3 - "$WORK/ckpt" <<'EOF'
import sys, torch, transformers
config = transformers.LlamaConfig(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
                                  intermediate_size=1408, vocab_size=32000, max_position_embeddings=1024)
torch.manual_seed(0)
transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(sys.argv[1])
EOF
run_case slow-load --backend "$BACKEND" --model-dir "$WORK/ckpt" --slow-load-mbps 10

# Stopped (SIGINT, as Ctrl-C) while the 4-size capture sleeps: the run ends interrupted during startup.
started=$SECONDS
timeout -s INT 25 python3 -m replayscope run --quiet --workload decode-only --steps 200 --seed 0 \
  --name case-interrupted --run-id "$TAG-interrupted" --events "$OUT/$TAG-interrupted.jsonl" \
  --backend "$BACKEND" --preset "$PRESET" --slow-capture 4:600
echo "case $TAG-interrupted: exit $? (130: interrupted, as intended) in $((SECONDS - started)) s"
ls -l "$OUT"
