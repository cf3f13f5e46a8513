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
set -euo pipefail

PYTHON="${PYTHON:-python}"
VERSION=0.28.1
HOROVOD_TF="${HOROVOD_TF:-auto}"
CACHE="${HOROVOD_WHEEL_CACHE:-${HOME}/.cache/lockstep/horovod}"

with_tf=0
if [ "$HOROVOD_TF" != 0 ] && "$PYTHON" -c "import tensorflow" 2>/dev/null; then with_tf=1; fi

installed() {  # horovod $VERSION with its PyTorch ops (and TensorFlow's, when wanted)
    "$PYTHON" -c "import horovod.torch" 2>/dev/null || return 1
    [ "$("$PYTHON" -c 'import horovod; print(horovod.__version__)')" = "$VERSION" ] || return 1
    [ "$with_tf" = 0 ] || "$PYTHON" -c "import horovod.tensorflow" 2>/dev/null
}
if installed; then
    echo "horovod $VERSION already installed for $PYTHON"
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
if [ ${#cached[@]} -gt 0 ]; then
    echo "installing cached ${cached[0]}"
    "$PYTHON" -m pip install --no-deps --force-reinstall "${cached[0]}"
    "$PYTHON" -m pip install cloudpickle psutil pyyaml packaging
    exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m pip download --no-deps --no-binary :all: "horovod==$VERSION" -d "$WORK"
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
"$PYTHON" -m pip install cloudpickle psutil pyyaml packaging wheel
command -v cmake >/dev/null || "$PYTHON" -m pip install "cmake>=3.13,<4"

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
        "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$WORK/dist" . )
}

if [ "$with_tf" = 1 ]; then
    if ! build 1 >"$CACHE/$KEY/build-tf.log" 2>&1; then
        echo "Horovod's TensorFlow ops do not build against this TensorFlow" \
            "(full log: $CACHE/$KEY/build-tf.log); the compiler's first errors:" >&2
        grep -m 8 -E "error:|Error [0-9]|CMake Error" "$CACHE/$KEY/build-tf.log" >&2 || true
        if [ "$HOROVOD_TF" = 1 ]; then exit 1; fi
        echo "building Horovod for PyTorch only" >&2
        build 0
    fi
else
    build 0
fi
wheel=("$WORK"/dist/horovod-"$VERSION"-*.whl)
cp "${wheel[0]}" "$CACHE/$KEY/"
"$PYTHON" -m pip install --no-deps --force-reinstall "${wheel[0]}"
"$PYTHON" -c "import horovod.torch; print('horovod', horovod.__version__, 'installed')"
if [ "$with_tf" = 1 ]; then
    "$PYTHON" -c "import horovod.tensorflow" 2>/dev/null \
        && echo "with its TensorFlow ops" || echo "for PyTorch only"
fi
