#!/usr/bin/env bash
# Lints the AWS deploy artifacts offline: cfn-lint with the SAM translator (without it cfn-lint
# cannot expand the Serverless resources and checks far less) and checkov. Every finding is
# fixed or skipped with its reason beside the resource (Metadata.checkov.skip).
#
# Installs pinned versions into a virtualenv it creates: REAPER_INFRA_VENV, default
# target/venv-infra; reused while the pins are unchanged. Needs python3 with venv, and PyPI.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${REAPER_INFRA_VENV:-$root/target/venv-infra}"
pins=(cfn-lint==1.58.0 aws-sam-translator==1.110.0 checkov==3.3.30)

if [ "$(cat "$venv/reaper-pins.txt" 2>/dev/null)" != "${pins[*]}" ]; then
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
  echo "${pins[*]}" >"$venv/reaper-pins.txt"
fi

templates=("$root/infra/aws/template.yaml" "$root/infra/aws/vercel-oidc.yaml")

echo "cfn-lint ${pins[0]#*==} (SAM translator ${pins[1]#*==}):"
"$venv/bin/cfn-lint" "${templates[@]}"
echo "  clean"

echo "checkov ${pins[2]#*==}:"
# --skip-download: no platform account, no network; the built-in policies are enough.
for t in "${templates[@]}"; do
  "$venv/bin/checkov" --quiet --compact --skip-download --framework cloudformation -f "$t"
done
echo "  clean"
