#!/usr/bin/env bash
# Build and install Horovod 0.28.1 (the last release) with the gloo controller, no MPI.
#
# Horovod 0.28.1 builds against torch >= 2.1 only after its two `CMAKE_CXX_STANDARD 14` lines
# are raised to 17 (horovod/horovod#3996, fixed on master but never released), so this script
# builds it from the PyPI sdist with that patch, without build isolation (the build needs the
# installed torch and TensorFlow headers).
#
# Usage:  PYTHON=/path/to/python bash scripts/install-horovod.sh
#   PYTHON              the interpreter to install into (default: `python` on the PATH)
#   HOROVOD_TF=auto|0|1 build the TensorFlow ops too: auto (default) tries when TensorFlow is
#                       installed and falls back to PyTorch only if TF's headers do not compile
#   HOROVOD_WHEEL_CACHE directory caching the built wheel between runs on one machine
#                       (default: ~/.cache/lockstep/horovod; a fresh machine builds it)
#   HOROVOD_REBUILD=1   build again even when Horovod is installed or its wheel is cached
#
# It says each stage as it starts; the compiler's output goes to a log in the cache directory
# (its path is printed before the build starts) and a line every 30 s says how far it is.
set -euo pipefail

PYTHON="${PYTHON:-python}"
VERSION=0.28.1
HOROVOD_TF="${HOROVOD_TF:-auto}"
CACHE="${HOROVOD_WHEEL_CACHE:-${HOME}/.cache/lockstep/horovod}"
REBUILD="${HOROVOD_REBUILD:-0}"
STARTED=$SECONDS

say() { echo "install-horovod: $*"; }
elapsed() { local s=$((SECONDS - STARTED)); echo "$((s / 60)) min $((s % 60)) s"; }

say "horovod $VERSION for $("$PYTHON" -c 'import sys; print(sys.executable)'): looking at what is installed"

with_tf=0
if [ "$HOROVOD_TF" != 0 ] && "$PYTHON" -c "import tensorflow" 2>/dev/null; then with_tf=1; fi

installed() {  # horovod $VERSION with its PyTorch ops (and TensorFlow's, when wanted)
    "$PYTHON" -c "import horovod.torch" 2>/dev/null || return 1
    [ "$("$PYTHON" -c 'import horovod; print(horovod.__version__)')" = "$VERSION" ] || return 1
    [ "$with_tf" = 0 ] || "$PYTHON" -c "import horovod.tensorflow" 2>/dev/null
}
if [ "$REBUILD" != 1 ] && installed; then
    say "horovod $VERSION already installed for $PYTHON"
    exit 0
fi

# The cache key names the interpreter and the frameworks the wheel was compiled against.
KEY="$("$PYTHON" - <<'EOF'
import importlib.util, sys
parts = [f"py{sys.version_info[0]}{sys.version_info[1]}"]
import torch
parts.append("torch" + torch.__version__.replace("+", "_"))
if importlib.util.find_spec("tensorflow") is not None:
    from importlib.metadata import version
    for name in ("tensorflow", "tensorflow-cpu"):
        try:
            parts.append("tf" + version(name))
            break
        except Exception:
            pass
print("-".join(parts))
EOF
)"
mkdir -p "$CACHE/$KEY"
shopt -s nullglob
cached=("$CACHE/$KEY"/horovod-"$VERSION"-*.whl)
if [ "$REBUILD" != 1 ] && [ ${#cached[@]} -gt 0 ]; then
    say "installing the cached wheel ${cached[0]}"
    "$PYTHON" -m pip install --no-deps --force-reinstall "${cached[0]}"
    "$PYTHON" -m pip install cloudpickle psutil pyyaml packaging
    exit 0
fi

WORK="$(mktemp -d)"
trap 'if [ -n "${REPORTER:-}" ]; then kill "$REPORTER" 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT
# Ctrl-C stops the script, even when the command it interrupted handled it and exited
# quietly (python does): bash runs this once that command has ended, maybe inside the build,
# whose output goes to its log: the word goes to the terminal's stderr, kept as fd 3.
exec 3>&2
trap 'say "interrupted; nothing was installed" >&3; exit 130' INT TERM
say "[1/4] downloading the horovod $VERSION source"
"$PYTHON" -m pip download -q --no-deps --no-binary :all: "horovod==$VERSION" -d "$WORK"
tar xzf "$WORK/horovod-$VERSION.tar.gz" -C "$WORK"
SRC="$WORK/horovod-$VERSION"
# The two lines of horovod#3996: torch >= 2.1 headers need C++17.
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
    "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"
# Horovod's XLA ops include tensorflow/compiler/xla/client/xla_builder.h, which TensorFlow
# >= 2.16 no longer ships (XLA moved to xla/); they only serve jit_compile'd graphs, so the
# TensorFlow ops are built without them.
sed -i '/xla_mpi_ops.cc/d' "$SRC/horovod/tensorflow/CMakeLists.txt"
# setup.py needs these at build time; the build is not isolated.
say "[2/4] installing the build requirements"
"$PYTHON" -m pip install -q cloudpickle psutil pyyaml packaging wheel
command -v cmake >/dev/null || "$PYTHON" -m pip install -q "cmake>=3.13,<4"

# The build's last "[ 42%]" (cmake's progress) in log $1, or nothing before cmake starts.
percent() { grep -oE '\[ *[0-9]+%\]' "$1" 2>/dev/null | tail -n 1 | tr -d '[] ' || true; }

report_progress() {  # a line every 30 s saying how far the build logging to $1 is
    local ticks=0 done_so_far
    # Until the script ends, however it ends: a background job ignores Ctrl-C.
    while kill -0 $$ 2>/dev/null && sleep 1; do
        ticks=$((ticks + 1))
        if [ $((ticks % 30)) = 0 ]; then
            done_so_far="$(percent "$1")"
            say "      compiling: ${done_so_far:+$done_so_far done, }$(elapsed) so far"
        fi
    done
}

REPORTER=""
compile() {  # $1: 1 to build the TensorFlow ops too; $2: the log
    local what="Horovod's C++ ops for PyTorch" status=0
    if [ "$1" = 1 ]; then what="Horovod's C++ ops for PyTorch and TensorFlow"; fi
    say "[3/4] compiling $what: 5 min on 2 free cores, 10 or more when they are busy"
    : >"$2"  # there to follow (tail -f) from the moment its path is shown
    say "      the compiler's output: $2"
    report_progress "$2" &
    REPORTER=$!
    build "$1" >"$2" 2>&1 || status=$?
    kill "$REPORTER" 2>/dev/null || true
    wait "$REPORTER" 2>/dev/null || true
    REPORTER=""
    if [ "$status" != 0 ]; then say "      the build failed after $(elapsed); its log: $2" >&2; fi
    return "$status"
}

build() {  # $1: 1 to build the TensorFlow ops too
    rm -rf "$SRC/build" "$WORK/dist"
    local tf_flags=(HOROVOD_WITHOUT_TENSORFLOW=1)
    if [ "$1" = 1 ]; then
        # TensorFlow's headers include their bundled libraries (farmhash, highwayhash, ...)
        # as <farmhash.h>: put TensorFlow's include/external/* on the include path.
        local include
        include="$("$PYTHON" -c 'import tensorflow as tf; print(tf.sysconfig.get_include())')"
        local extra=""
        for dir in "$include"/external/*/ "$include"/external/*/src "$include"/external/*/include; do
            if [ -d "$dir" ]; then extra="$extra:$dir"; fi
        done
        tf_flags=(HOROVOD_WITH_TENSORFLOW=1 "CPLUS_INCLUDE_PATH=${CPLUS_INCLUDE_PATH:-}$extra")
    fi
    (cd "$SRC" && env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITH_GLOO=1 \
        HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=GLOO "${tf_flags[@]}" \
        MAKEFLAGS="-j$(nproc)" \
        "$PYTHON" -m pip wheel -v --no-build-isolation --no-deps -w "$WORK/dist" . )
}

if [ "$with_tf" = 1 ]; then
    if ! compile 1 "$CACHE/$KEY/build-tf.log"; then
        echo "Horovod's TensorFlow ops do not build against this TensorFlow" \
            "(full log: $CACHE/$KEY/build-tf.log); the compiler's first errors:" >&2
        grep -m 8 -E "error:|Error [0-9]|CMake Error" "$CACHE/$KEY/build-tf.log" >&2 || true
        if [ "$HOROVOD_TF" = 1 ]; then exit 1; fi
        echo "building Horovod for PyTorch only" >&2
        compile 0 "$CACHE/$KEY/build.log"
    fi
else
    compile 0 "$CACHE/$KEY/build.log"
fi
wheel=("$WORK"/dist/horovod-"$VERSION"-*.whl)
cp "${wheel[0]}" "$CACHE/$KEY/"
say "[4/4] installing the wheel (built in $(elapsed)); it is cached in $CACHE/$KEY"
"$PYTHON" -m pip install -q --no-deps --force-reinstall "${wheel[0]}"
"$PYTHON" -c "import horovod.torch; print('horovod', horovod.__version__, 'installed')"
if [ "$with_tf" = 1 ]; then
    "$PYTHON" -c "import horovod.tensorflow" 2>/dev/null \
        && echo "with its TensorFlow ops" || echo "for PyTorch only"
fi
