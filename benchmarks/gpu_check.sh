#!/usr/bin/env bash
# Everything the course checks on a machine with a GPU, in one run (about 5 minutes on an H100):
#   bash benchmarks/gpu_check.sh OUTDIR
# 1. `make gpu-record`: every lesson's requires-cuda cells run and their real outputs are written under them;
# 2. every assignment (solutions and hidden tests) runs in-process with the GPU present;
# 3. the live widgets are driven on the GPU, their figures written as PNG;
# 4. the capstone script and its fixes are timed (benchmarks/capstone_gpu.py).
# OUTDIR receives the reports, the figures and a tarball of the recorded notebooks and traces. Needs torch,
# numpy, matplotlib, ipywidgets, IPython and nbformat (no Jupyter server). Exits 1 if any step failed.
set -u
out=${1:?usage: bash benchmarks/gpu_check.sh OUTDIR}
mkdir -p "$out"
log="$out/log.txt"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python=${PYTHON:-python3}
failed=0
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
  "$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
} >>"$log" 2>&1

step() {  # step NAME SECONDS COMMAND...: run one step under a time limit, log how it ended
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  timeout "$limit" "$@" 2>>"$log"
  rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s" >>"$log"
  [ "$rc" -eq 0 ] || failed=1
}

step record 360 "$python" benchmarks/gpu_smoke.py record >"$out/record.json"
smoke=$(mktemp -d)
"$python" benchmarks/gpu_smoke.py export "$smoke" 2>>"$log" && rm -f "$smoke"/0*.json  # the lessons ran above
step assignments 240 "$python" benchmarks/gpu_smoke.py run "$smoke" >"$out/assignments.json"
step widgets 300 "$python" benchmarks/gpu_widgets.py --json "$out/widgets.json" --figures "$out" >/dev/null
step capstone 300 "$python" benchmarks/capstone_gpu.py >"$out/capstone.txt"
tar czf "$out/recorded.tgz" notebooks/*.ipynb notebooks/traces 2>>"$log"
exit $failed
