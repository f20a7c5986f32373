# Sourced by scripts/demo and scripts/test: create or reuse a virtual environment
# in the repo and install graphpickle (editable) with the extras named in
# $GP_EXTRAS. The install is redone only when pyproject.toml, the extras or the
# constraints change. $GP_VENV names the environment (.venv unless set; the
# variants below add to the name: .venv-3.12, .venv-3.11-floor).
#
#   PYTHON=3.12 scripts/test      # another interpreter (a version or a path): .venv-3.12
#   GP_FLOOR=1 scripts/test       # every declared dependency at its floor: .venv-3.11-floor
#   PYTHON=3.14 scripts/test      # in Debian unstable's chroot (scripts/debian-python)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# A version number names an interpreter: python3.12 on the PATH, else one that
# pyenv installed (its shims only run the versions pyenv was told to use).
resolve_python() {
    local wanted=$1 candidate
    case "$wanted" in
        [0-9]*)
            for candidate in "python$wanted" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$wanted"*/bin/python"$wanted"; do
                if "$candidate" -c 'pass' >/dev/null 2>&1; then
                    echo "$candidate"
                    return 0
                fi
            done
            echo "no Python $wanted found (looked for python$wanted and pyenv's versions)" >&2
            return 1
            ;;
        *) echo "$wanted" ;;
    esac
}

# A version the machine lacks (3.14, 3.15) runs the calling script again inside
# Debian unstable's chroot (scripts/debian-python), which has it.
if [[ "${PYTHON:-}" == [0-9]* && -z "${GP_IN_CHROOT:-}" ]] && ! resolve_python "$PYTHON" >/dev/null 2>&1; then
    case "$PYTHON" in
        3.14 | 3.15)
            echo "Python $PYTHON: running $(basename "$0") in Debian unstable's chroot" >&2
            cd "$repo"
            exec "$repo/scripts/debian-python" run env GP_IN_CHROOT=1 "$repo/scripts/$(basename "$0")" "$@"
            ;;
    esac
fi
python=$(resolve_python "${PYTHON:-python3}")
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "graphpickle needs Python >= 3.11; set PYTHON=3.11 (or a path to python3.11+)" >&2
    exit 1
fi
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
name=${GP_VENV:-.venv}
venv="$repo/$name"
[ -n "${PYTHON:-}" ] && venv="$repo/$name-$version"
constraints=()
if [ -n "${GP_FLOOR:-}" ]; then
    venv="$repo/$name-$version-floor"
    constraints=(-c "$repo/.ci/floor-constraints.txt")
fi
# Installs take turns (.ci/run installs from two lanes at once): each writes the
# tree's egg-info and build/, and an editable install builds the extensions in place.
exec {install_lock}>"$repo/.venv-install.lock"
flock "$install_lock"
if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv with $python" >&2
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
fi
stamp="$venv/.graphpickle-installed"
want="$(cat "$repo/pyproject.toml" ${GP_FLOOR:+"$repo/.ci/floor-constraints.txt"} | sha256sum | cut -c1-16) ${GP_EXTRAS}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing graphpickle[${GP_EXTRAS}] into $venv" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check ${constraints[@]+"${constraints[@]}"} \
        -e "$repo[${GP_EXTRAS}]"
    echo "$want" > "$stamp"
fi
exec {install_lock}>&-
PY="$venv/bin/python"
