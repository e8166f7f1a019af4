# Sourced (". tests/python/torch_line.sh") by the scripts that run torch: picks the torch
# line from TORCH_LINE and sets PYTHON, PYDIR (the package built for that interpreter, put
# first on PYTHONPATH), NO_TORCH (why it is absent) and have_torch.
#   debian (default)  Debian's interpreter (PYTHON, default /usr/bin/python3) with its
#                     torch 1.13, on $BUILD/python
#   pip               the interpreter configure found with torch 2.x from pip (PIP_PYTHON
#                     in $BUILD/config.mk), on $BUILD/python-pip
# Needs BUILD set.
config() { sed -n "s/^$1 *:= *//p" "$BUILD/config.mk" 2>/dev/null; }
case "${TORCH_LINE:-debian}" in
debian)
    PYTHON=${PYTHON:-/usr/bin/python3}
    PYDIR=$BUILD/python
    have_torch() { [ "$(config HAVE_TORCH)" = 1 ]; }
    NO_TORCH="built without the torch backend (apt-get install python3-torch libtorch-dev)"
    ;;
pip)
    PYTHON=$(config PIP_PYTHON)
    PYDIR=$BUILD/python-pip
    have_torch() { [ "$(config HAVE_PIP_TORCH)" = 1 ]; }
    NO_TORCH="no torch 2.x (pip install torch into the python3 first on PATH, then make)"
    ;;
*)
    echo "TORCH_LINE=$TORCH_LINE: debian or pip" >&2
    exit 2
    ;;
esac
export PYTHONPATH="$PYDIR${PYTHONPATH:+:$PYTHONPATH}"
