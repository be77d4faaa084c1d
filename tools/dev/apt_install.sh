# Sourced by the CI scripts: `apt_install PACKAGE...` installs what dpkg does not already have
# (sudo when not root; `--no-remove`, so nothing the machine has is taken away). Mirrors have
# bad minutes: a second and a third try before giving up.
apt_install() {
  local sudo=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
  dpkg -s "$@" >/dev/null 2>&1 && return 0
  local try
  for try in 1 2 3; do
    if $sudo apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-remove "$@" >/dev/null; then
      return 0
    fi
    sleep 20
  done
  echo "could not install $*" >&2
  return 1
}
