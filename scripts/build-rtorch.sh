#!/usr/bin/env bash
# build-rtorch.sh: build R torch 0.11.0 from source against a system (Debian) libtorch, for
# machines that reach neither CRAN nor download.pytorch.org. Nothing is downloaded by this script
# except Debian packages through apt-get; R torch itself is built with TORCH_INSTALL=0.
#
# Usage:
#   scripts/build-rtorch.sh TORCH_SRC CORO_SRC PREFIX
#   scripts/build-rtorch.sh --apt-only      step 1 alone: the Debian packages the build needs
#
#   TORCH_SRC  a source checkout of mlverse/torch at v0.11.0 (holds DESCRIPTION and src/lantern)
#   CORO_SRC   a source checkout of r-lib/coro (any release >= 1.0.2, e.g. v1.1.0)
#   PREFIX     where everything goes (created if missing):
#                PREFIX/Rlib        the R library holding coro and torch   -> KL_RTORCH_LIB
#                PREFIX/torch-home  R torch's TORCH_HOME: lib/liblantern.so (built here) and
#                                   lib/libtorch.so, libtorch_cpu.so, libc10.so, ... (symlinks
#                                   to the system libtorch)                 -> TORCH_HOME
#                PREFIX/build       build trees (lantern's CMake tree, a copy of the torch
#                                   package source that R CMD INSTALL compiles in)
#   The source directories are only read, never modified.
#
# What it does:
#   1. apt-get install (as root, unless RTORCH_APT=0): R (r-base-core, r-base-dev), torch's R
#      dependencies from Debian (r-cran-*), libtorch-dev (Debian's libtorch 1.13.1, CPU only)
#      and the tool chain to compile lantern (cmake, g++, make); skipped when all are installed.
#   2. Builds lantern (TORCH_SRC/src/lantern) with CMake against the system libtorch. That
#      release's CMakeLists reads TORCH_PATH only as a -D variable (the environment variable is
#      ignored) and downloads libtorch when TORCH_PATH does not exist, so TORCH_PATH is always
#      passed and must exist. Debian's libtorch 1.13.1 needs `-include fstream` in CXXFLAGS.
#   3. Lays out TORCH_HOME: lib/liblantern.so, and symlinks named as R torch looks for them
#      (R torch checks lib/libtorch.so and lib/liblantern.so, then dlopen()s liblantern.so).
#   4. R CMD INSTALL coro, then torch (its R side; lantern is not rebuilt there), into PREFIX/Rlib.
#   5. Loads torch once with the new library and TORCH_HOME, and prints the variables to export.
#
# Environment (all optional):
#   JOBS               parallel compile jobs (default 2)
#   RTORCH_APT         1 (default) installs the Debian packages, 0 skips that step
#   RTORCH_APT_UPDATE  1 (default) runs `apt-get update` first, 0 skips it
#   LIBTORCH_LIBDIR    where the system libtorch .so files are (default /usr/lib/x86_64-linux-gnu)
#   TORCH_CMAKE_DIR    the directory holding TorchConfig.cmake (default LIBTORCH_LIBDIR/cmake/Torch)
#   LANTERN_CXXFLAGS   extra C++ flags for lantern (default "-include fstream")
#   RTORCH_OPT         the optimisation flags of lantern and of R torch's own C++ (default "-O1 -g0"): both are
#                      glue around libtorch, whose kernels compute every value, so a lighter build gives the same
#                      results for a little over half the compile time (docs/guide/rtorch.md says how it was checked)
#   RSCRIPT, R_CMD     the Rscript and R to use (default: Rscript and R on PATH)
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

die() { echo "build-rtorch: $*" >&2; exit 1; }
step() { echo; echo "=== build-rtorch: $* ($(date '+%H:%M:%S'))"; }
RTORCH_APT=${RTORCH_APT:-1}
RTORCH_APT_UPDATE=${RTORCH_APT_UPDATE:-1}
APT_PACKAGES=(
  r-base-core r-base-dev
  r-cran-rcpp r-cran-r6 r-cran-withr r-cran-rlang r-cran-bit64 r-cran-magrittr r-cran-callr
  r-cran-cli r-cran-glue r-cran-desc r-cran-jsonlite r-cran-scales r-cran-processx r-cran-ellipsis
  libtorch-dev
  cmake g++ make
)

# Installs the Debian packages that are not installed yet (none: no apt-get at all).
install_debian_packages() {
  local missing=() pkg
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    echo "all installed: ${APT_PACKAGES[*]}"
    return
  fi
  if [ "$RTORCH_APT" != 1 ]; then
    echo "skipped (RTORCH_APT=0); missing: ${missing[*]}"
    return
  fi
  local sudo=
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "installing Debian packages needs root (or set RTORCH_APT=0)"
    sudo=sudo
  fi
  if [ "$RTORCH_APT_UPDATE" = 1 ]; then
    $sudo apt-get update
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
}

if [ "$#" -eq 1 ] && [ "$1" = --apt-only ]; then
  install_debian_packages
  exit 0
fi
if [ "$#" -ne 3 ]; then
  usage >&2
  exit 2
fi

TORCH_SRC=$(cd "$1" 2>/dev/null && pwd) || die "TORCH_SRC '$1' is not a directory"
CORO_SRC=$(cd "$2" 2>/dev/null && pwd) || die "CORO_SRC '$2' is not a directory"
mkdir -p "$3"
PREFIX=$(cd "$3" && pwd)

JOBS=${JOBS:-2}
LIBTORCH_LIBDIR=${LIBTORCH_LIBDIR:-/usr/lib/x86_64-linux-gnu}
TORCH_CMAKE_DIR=${TORCH_CMAKE_DIR:-$LIBTORCH_LIBDIR/cmake/Torch}
LANTERN_CXXFLAGS=${LANTERN_CXXFLAGS:--include fstream}
RTORCH_OPT=${RTORCH_OPT:--O1 -g0}

RLIB=$PREFIX/Rlib
THOME=$PREFIX/torch-home
BUILD=$PREFIX/build

# Never let R torch download anything, during the build or the check at the end.
export TORCH_INSTALL=0
unset TORCH_URL LANTERN_URL LANTERN_BASE_URL BUILD_LANTERN || true
# Debian's libtorch is CPU only. CUDA must stay unset: lantern's CMakeLists turns on its CUDA
# sources (and -D__NVCC__) whenever the CUDA environment variable is non-empty, even "cpu".
unset CUDA || true

desc_field() { sed -n "s/^$2:[[:space:]]*//p" "$1/DESCRIPTION" | head -n 1; }

[ -f "$TORCH_SRC/DESCRIPTION" ] && [ "$(desc_field "$TORCH_SRC" Package)" = torch ] \
  || die "$TORCH_SRC has no DESCRIPTION of the R package torch"
[ -f "$TORCH_SRC/src/lantern/CMakeLists.txt" ] || die "$TORCH_SRC/src/lantern/CMakeLists.txt is missing"
[ -f "$CORO_SRC/DESCRIPTION" ] && [ "$(desc_field "$CORO_SRC" Package)" = coro ] \
  || die "$CORO_SRC has no DESCRIPTION of the R package coro"
TORCH_PKG_VERSION=$(desc_field "$TORCH_SRC" Version)
if [ "$TORCH_PKG_VERSION" != 0.11.0 ]; then
  echo "build-rtorch: warning: torch source is version $TORCH_PKG_VERSION, this script is made for 0.11.0" >&2
fi

# ---------------------------------------------------------------------------------------------
step "1/5 Debian packages"
install_debian_packages

RSCRIPT=${RSCRIPT:-$(command -v Rscript || true)}
R_CMD=${R_CMD:-$(command -v R || true)}
[ -n "$RSCRIPT" ] && [ -n "$R_CMD" ] || die "R and Rscript are not on PATH"
[ -f "$TORCH_CMAKE_DIR/TorchConfig.cmake" ] || die "no TorchConfig.cmake in $TORCH_CMAKE_DIR (is libtorch-dev installed?)"
[ -e "$LIBTORCH_LIBDIR/libtorch.so" ] || die "no libtorch.so in $LIBTORCH_LIBDIR"

mkdir -p "$RLIB" "$THOME/lib" "$BUILD"

# ---------------------------------------------------------------------------------------------
step "2/5 lantern (CMake, against $TORCH_CMAKE_DIR)"
cmake -S "$TORCH_SRC/src/lantern" -B "$BUILD/lantern" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="$RTORCH_OPT -DNDEBUG" \
  -DTORCH_PATH="$TORCH_CMAKE_DIR" \
  -DTorch_DIR="$TORCH_CMAKE_DIR" \
  -DCMAKE_CXX_FLAGS="$LANTERN_CXXFLAGS" \
  -DCMAKE_INSTALL_PREFIX="$THOME" \
  -DCMAKE_INSTALL_MESSAGE=LAZY
cmake --build "$BUILD/lantern" --target lantern --parallel "$JOBS"
cmake --install "$BUILD/lantern" --config Release

# ---------------------------------------------------------------------------------------------
step "3/5 TORCH_HOME at $THOME"
[ -f "$THOME/lib/liblantern.so" ] || die "lantern was built but $THOME/lib/liblantern.so is missing"
# R torch's torch_is_installed() wants lib/libtorch.so and lib/liblantern.so; liblantern.so itself
# needs libtorch.so.1.13, libtorch_cpu.so.1.13 and libc10.so.1.13, found through its RPATH
# ($ORIGIN) or the system library path. Link every libtorch library under both names.
for name in torch torch_cpu c10 torch_global_deps shm; do
  for lib in "$LIBTORCH_LIBDIR"/lib"$name".so "$LIBTORCH_LIBDIR"/lib"$name".so.[0-9]*; do
    [ -e "$lib" ] || continue
    ln -sfn "$lib" "$THOME/lib/$(basename "$lib")"
  done
done
[ -e "$THOME/lib/libtorch.so" ] || die "could not link libtorch.so into $THOME/lib"
ls -l "$THOME/lib"

# ---------------------------------------------------------------------------------------------
step "4/5 R packages into $RLIB"
export R_LIBS="$RLIB${R_LIBS:+:$R_LIBS}"
export MAKEFLAGS="-j$JOBS"
# R CMD INSTALL compiles with R's own flags (Debian's: -g -O2); the user Makevars below replaces them
printf '%s\n' "CFLAGS = $RTORCH_OPT" "CXXFLAGS = $RTORCH_OPT" "CXX11FLAGS = $RTORCH_OPT" "CXX14FLAGS = $RTORCH_OPT" \
  "CXX17FLAGS = $RTORCH_OPT" "CXX20FLAGS = $RTORCH_OPT" > "$BUILD/Makevars"
export R_MAKEVARS_USER="$BUILD/Makevars"
export TORCH_HOME="$THOME"
"$R_CMD" CMD INSTALL --no-docs --no-multiarch --library="$RLIB" "$CORO_SRC"
# R CMD INSTALL compiles in the source tree and its Makevars rewrites R/RcppExports.R
# (tools/renamelib.R), so it works on a copy; src/lantern was built above and is left out.
rm -rf "$BUILD/torch-pkg"
mkdir -p "$BUILD/torch-pkg"
tar -C "$TORCH_SRC" --exclude=./src/lantern --exclude=./build-lantern --exclude='./src/*.o' \
  --exclude='./src/*.so' --exclude=./src/Makevars -cf - . | tar -C "$BUILD/torch-pkg" -xf -
"$R_CMD" CMD INSTALL --no-docs --no-multiarch --library="$RLIB" "$BUILD/torch-pkg"

# ---------------------------------------------------------------------------------------------
step "5/5 check"
"$RSCRIPT" --no-init-file -e '
  suppressPackageStartupMessages(library(torch))
  stopifnot(torch_is_installed())
  cat("R", as.character(getRversion()), "| torch", as.character(packageVersion("torch")),
      "from", find.package("torch"), "| TORCH_HOME", torch_install_path(), "\n")
  x <- torch_tensor(c(0.1, 0.2)); print(nnf_kl_div(x, torch_tensor(c(0.5, 0.5)), reduction = "sum"))
'

echo
echo "R torch is built. Export:"
echo "export KL_RTORCH_LIB=$RLIB"
echo "export TORCH_HOME=$THOME"
