#!/usr/bin/env bash
# Installs what building stoke needs when it is missing, and nothing when it is there:
#  - cmake (turbojpeg-sys builds libjpeg-turbo with it): when `cmake` is not on PATH,
#    `python3 -m pip install cmake==$CMAKE_PIN` into .venv-tools/cmake (PyPI; no root needed);
#  - nasm (libjpeg-turbo's SIMD code; without it the CPU decoder builds without SIMD and
#    decodes about 1.5x slower): `apt-get install nasm` as root, `sudo -n apt-get install nasm`
#    where sudo needs no password, else `apt-get download nasm` + `dpkg -x` into
#    .venv-tools/nasm (Debian's package, no root). When none works it says so and goes on.
# It writes .venv-tools/env.sh (PATH additions, CMAKE=<the real cmake>). Messages go to stderr.
#
# Nobody needs to call it by hand: cargo's build of libjpeg-turbo runs it through scripts/cmake
# (.cargo/config.toml points the cmake crate there), so `cargo run --release -- bench`,
# `cargo test`, scripts/test.sh and `pip install .` install what is missing themselves.
#
#   scripts/setup.sh                   # install what is missing
#   eval "$(scripts/setup.sh --env)"   # the same, and export the environment into this shell
#   scripts/setup.sh --rebuild-jpeg    # after a build without SIMD: get nasm, then make cargo
#                                      # rebuild libjpeg-turbo (cargo clean -p turbojpeg-sys)
#   scripts/setup.sh --quiet           # print nothing unless something is installed or missing
#   scripts/setup.sh --no-warn         # not even the no-nasm warning (scripts/cmake's later calls)
#
# STOKE_SETUP_NASM=apt|sudo|download|none forces one nasm route (for testing each of them);
# it is ignored when nasm is already on PATH or in .venv-tools.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.venv-tools"
CMAKE_PIN=3.31.10
print_env=0 quiet=0 rebuild=0 warn=1
for a in "$@"; do
  case "$a" in
    --env) print_env=1 ;;
    --quiet) quiet=1 ;;
    --no-warn) warn=0 ;;
    --rebuild-jpeg) rebuild=1 ;;
    *) echo "setup: unknown argument $a (expected --env, --quiet, --no-warn, --rebuild-jpeg)" >&2; exit 2 ;;
  esac
done
log() { echo "setup: $*" >&2; }
# A warning the user must see even where the caller hides the build's output (pip does):
# on stderr, and on the terminal when there is one and stderr is not it.
shout() {
  echo "setup: $*" >&2
  if [ ! -t 2 ] && { : > /dev/tty; } 2>/dev/null; then echo "stoke setup: $*" > /dev/tty 2>/dev/null || true; fi
}
mkdir -p "$tools"
# One setup at a time (cargo may build libjpeg-turbo for two profiles at once).
exec 9> "$tools/.lock"
flock 9

path_add=()
add_path() { case ":$PATH:" in *":$1:"*) ;; *) path_add+=("$1"); export PATH="$1:$PATH" ;; esac; }

# --- cmake
cmake_bin=""
if command -v cmake >/dev/null 2>&1; then
  cmake_bin="$(command -v cmake)"
else
  # The wheel's real binary (no Python needed to run it); bin/ also has ctest and cpack.
  pip_cmake="$tools/cmake/cmake/data/bin/cmake"
  if [ ! -x "$pip_cmake" ] || ! "$pip_cmake" --version >/dev/null 2>&1; then
    log "cmake not found: python3 -m pip install cmake==$CMAKE_PIN into .venv-tools/cmake"
    rm -rf "$tools/cmake"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
      --target "$tools/cmake" "cmake==$CMAKE_PIN" >&2 \
      || { shout "could not install cmake with pip (python3 -m pip); install it with: sudo apt-get install cmake"; exit 1; }
  fi
  add_path "$(dirname "$pip_cmake")"
  cmake_bin="$pip_cmake"
fi

# --- nasm
nasm_ok() { "$1" -v >/dev/null 2>&1; }
nasm_bin=""
if command -v nasm >/dev/null 2>&1 && nasm_ok "$(command -v nasm)"; then
  nasm_bin="$(command -v nasm)"
elif [ -x "$tools/nasm/usr/bin/nasm" ] && nasm_ok "$tools/nasm/usr/bin/nasm"; then
  nasm_bin="$tools/nasm/usr/bin/nasm"
elif [ -x "$tools/bin/nasm" ] && nasm_ok "$tools/bin/nasm"; then
  nasm_bin="$tools/bin/nasm"
else
  route="${STOKE_SETUP_NASM:-}"
  if [ -z "$route" ]; then
    if [ "$(id -u)" = 0 ]; then route=apt
    elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then route=sudo
    else route=download; fi
  fi
  apt_install() {  # $@: the prefix (empty or sudo -n)
    DEBIAN_FRONTEND=noninteractive "$@" apt-get install -y -qq nasm >/dev/null 2>&1 \
      || { "$@" apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive "$@" apt-get install -y -qq nasm >/dev/null 2>&1; }
  }
  case "$route" in
    apt|sudo)
      prefix=(); [ "$route" = sudo ] && prefix=(sudo -n)
      log "nasm not found: ${prefix[*]:+${prefix[*]} }apt-get install nasm"
      if command -v apt-get >/dev/null 2>&1 && apt_install "${prefix[@]}"; then
        # Normally /usr/bin/nasm, already on PATH; otherwise link it into .venv-tools/bin.
        installed="$(dpkg -L nasm 2>/dev/null | grep '/bin/nasm$' | head -1 || true)"
        if [ -n "$installed" ] && nasm_ok "$installed"; then
          if ! command -v nasm >/dev/null 2>&1; then
            mkdir -p "$tools/bin"; ln -sf "$installed" "$tools/bin/nasm"; installed="$tools/bin/nasm"
          fi
          nasm_bin="$installed"
        fi
      fi ;;
    download)
      log "nasm not found: apt-get download nasm + dpkg -x into .venv-tools/nasm (no root)"
      tmp="$(mktemp -d)"
      if command -v apt-get >/dev/null 2>&1 && (cd "$tmp" && apt-get download nasm >/dev/null 2>&1) \
          && rm -rf "$tools/nasm" && dpkg -x "$tmp"/nasm_*.deb "$tools/nasm" && nasm_ok "$tools/nasm/usr/bin/nasm"; then
        nasm_bin="$tools/nasm/usr/bin/nasm"
      fi
      rm -rf "$tmp" ;;
    none) ;;
    *) log "STOKE_SETUP_NASM=$route: expected apt, sudo, download or none"; exit 2 ;;
  esac
  [ -n "$nasm_bin" ] && log "nasm: $nasm_bin"
fi
if [ -n "$nasm_bin" ]; then
  case "$nasm_bin" in "$tools"/*) add_path "$(dirname "$nasm_bin")" ;; esac
elif [ "$warn" = 1 ]; then
  shout "WARNING: nasm could not be installed (not root, no password-less sudo, apt-get download failed): libjpeg-turbo builds WITHOUT SIMD and JPEG decoding runs about 1.5x slower. Fix: install nasm (sudo apt-get install nasm), then scripts/setup.sh --rebuild-jpeg"
fi

# --- the environment
{
  echo "# written by scripts/setup.sh; source it (or eval \"\$(scripts/setup.sh --env)\")"
  if [ "${#path_add[@]}" -gt 0 ]; then
    joined="$(IFS=:; echo "${path_add[*]}")"
    echo "case \":\$PATH:\" in *\":$joined:\"*) ;; *) export PATH=\"$joined:\$PATH\" ;; esac"
  fi
  echo "export CMAKE=\"$cmake_bin\""
} > "$tools/env.sh"
[ "$quiet" = 1 ] || log "cmake: $cmake_bin; nasm: ${nasm_bin:-none (no SIMD)}"

if [ "$rebuild" = 1 ]; then
  if [ -z "$nasm_bin" ]; then
    log "--rebuild-jpeg: still no nasm, nothing rebuilt"; exit 1
  fi
  # The next build compiles libjpeg-turbo again, now with its SIMD code (both profiles).
  (cd "$root" && cargo clean --quiet -p turbojpeg-sys && cargo clean --quiet --release -p turbojpeg-sys) >&2
  log "libjpeg-turbo will be rebuilt with SIMD by the next cargo build, cargo run, scripts/test.sh or pip install ."
fi
[ "$print_env" = 1 ] && cat "$tools/env.sh"
exit 0
