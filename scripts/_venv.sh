# Sourced by scripts/demo and scripts/test: create or reuse .venv in the repo and
# install graphpickle (editable) with the extras named in $GP_EXTRAS. The install
# is redone only when pyproject.toml or the extras change.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$repo/.venv"
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "graphpickle needs Python >= 3.11; set PYTHON=/path/to/python3.11+" >&2
    exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv" >&2
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi
stamp="$venv/.graphpickle-installed"
want="$(sha256sum "$repo/pyproject.toml" | cut -c1-16) ${GP_EXTRAS}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing graphpickle[${GP_EXTRAS}] into $venv" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$repo[${GP_EXTRAS}]"
    echo "$want" > "$stamp"
fi
PY="$venv/bin/python"
