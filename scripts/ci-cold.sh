#!/usr/bin/env bash
# A cold CI run on this machine: a fresh Debian bookworm (debootstrap, minbase) in a chroot, a fresh
# clone of this checkout's HEAD, then `bash .ci/run` timed inside it, nothing cached (no packages,
# no ccache, no build folders). This is how README's cold CI time is measured (#23).
#   scripts/ci-cold.sh [ROOT]     ROOT: the chroot folder (default /var/tmp/kiln-cold-root; replaced)
# Needs root and debootstrap (apt-get install debootstrap); network access to the Debian mirror this
# machine's apt uses (debootstrap gets it from /etc/apt/sources.list(.d), and apt's proxy) and to
# npm's registry (GPT-2's tokenizer tables, as CI). The log is ROOT.log; exits with .ci/run's status.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${1:-/var/tmp/kiln-cold-root}
[ "$(id -u)" -eq 0 ] || { echo "ci-cold.sh: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "ci-cold.sh: debootstrap not found (apt-get install debootstrap)" >&2; exit 2; }
log=$root.log

# The mirror of Debian's main archive that this machine's apt is configured with: the first http(s)
# URI serving a suite without a -security/-updates/-backports suffix, from deb822 .sources files or
# one-line "deb [options] URI suite ..." entries. Empty: debootstrap's own default.
apt_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && awk 'BEGIN { RS = ""; FS = "\n" }
      { uri = ""; suites = ""; deb = 0; on = 1
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^Types:/ && (" " substr($i, 7) " ") ~ /[ \t]deb[ \t]/) deb = 1
          if ($i ~ /^Enabled:[ \t]*no/) on = 0
          if ($i ~ /^URIs:/) { split(substr($i, 6), u, " "); uri = u[1] }
          if ($i ~ /^Suites:/) suites = substr($i, 8)
        }
        n = split(suites, s, " ")
        for (j = 1; j <= n; j++)
          if (deb && on && uri ~ /^https?:/ && s[j] !~ /-(security|updates|backports)$/) { print uri; exit } }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
      if ($i ~ /^https?:/ && $(i + 1) !~ /-(security|updates|backports)$/) { print $i; exit } }' "$f"
  done
  return 0
}
mirror=$(apt_mirror | head -n 1)
# apt's proxy (Acquire::http::Proxy), for debootstrap's downloads too, unless http_proxy is set.
eval "$(apt-config shell apt_proxy Acquire::http::Proxy)"
if [ -n "${apt_proxy:-}" ] && [ -z "${http_proxy:-}" ]; then export http_proxy=$apt_proxy; fi

unmount_all() {
  for m in dev/pts dev sys proc; do mountpoint -q "$root/$m" && umount -l "$root/$m"; done
  mountpoint -q "$root" && umount -l "$root"
  return 0
}
if [ -d "$root" ]; then
  unmount_all
  rm -rf --one-file-system "$root"
fi
start=$(date +%s)
echo "ci-cold.sh: debootstrap bookworm from ${mirror:-the default mirror of debootstrap}"
debootstrap --variant=minbase bookworm "$root" $mirror >/dev/null
trap unmount_all EXIT
# The root a mount point of its own: `ip netns exec`/`ip -n` remount / as a slave, which fails on a
# plain directory (the multi-host tests would skip).
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# What a CI machine has before .ci/run: git, and the clone.
chroot "$root" bash -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends git ca-certificates >/dev/null'
# This machine's own extra certificate authorities (a network that inspects HTTPS), as on the host.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
git clone -q "$repo" "$root/root/kiln"
ready=$(date +%s)
echo "ci-cold.sh: fresh bookworm and clone of $(git -C "$repo" rev-parse --short HEAD) in $(( ready - start )) s; running .ci/run (log: $log)"
rc=0
chroot "$root" env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  bash -c 'cd /root/kiln && bash .ci/run' >"$log" 2>&1 || rc=$?
grep -E '^(ci\.sh|scripts/test\.sh|sanitize\.sh|fuzz\.sh|setup-deps)' "$log" || true
echo "ci-cold.sh: .ci/run exit $rc after $(( $(date +%s) - ready )) s (cold, on $(nproc) cores)"
exit $rc
