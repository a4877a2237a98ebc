#!/bin/bash
# guest.sh - runs a command on a real kernel verbs device: Soft-RoCE (rdma_rxe) in a QEMU guest
# that boots Debian 12's own kernel (docs/transport.md, "RDMA: testing on Soft-RoCE").
#
# Why a guest: the hosts this project is built on have no RDMA NIC and a kernel without
# modules, so no verbs device can exist on them; Debian's kernel in a guest loads rdma_rxe,
# and a program built on the host runs there unchanged, through the same libibverbs and
# librdmacm it would use on a RoCE or InfiniBand NIC.
#
# What it does: fetches the kernel package linux-image-amd64 depends on (apt-get download; it
# is unpacked, never installed), builds a busybox initramfs with the modules rxe, the verbs
# and rdma_cm user interfaces and virtio-9p need, and boots it under QEMU with software
# emulation (KVM here runs only PVM-aware kernels). The guest mounts this machine's / read-only
# and the checkout read-write at the same path over 9p, makes a dummy network device
# 192.168.77.1/24 with rxe0 on it, mounts /proc, /sys, /dev, /dev/shm and /tmp, and runs the
# command in a chroot of / from the current directory; the command's exit status becomes
# this script's. Kernel and initramfs are cached (TESSERA_RDMA_CACHE, default
# build/rdma-guest in the checkout): the first run takes about a minute more.
#
# Exit status: the command's; 77 (with the reason on stderr) where this machine lacks what the
# guest needs; 2 for bad usage; 1 when the guest did not say how the command ended.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: tests/rdma/guest.sh [options] [--] COMMAND [ARG...]

Boots Debian 12's kernel under QEMU (TCG) with Soft-RoCE: rxe0 on a dummy netdev at
192.168.77.1, this machine's / read-only and the checkout read-write at the same paths, and
runs COMMAND there from the current directory; exits with its status (77: this machine
cannot run the guest, saying why).

options:
  --smp N        virtual CPUs (default 2: with 1, busy-polling peers and rxe share it)
  --mem MB       guest memory (default 2048)
  --timeout S    give up after S seconds (default 900)
  --log FILE     the guest's console (default: the cache directory's console.log)
  --help         show this help and exit

environment: TESSERA_RDMA_CACHE (kernel and initramfs; default build/rdma-guest); TESSERA_*
and PYTHONPATH reach the command, which also finds TESSERA_RDMA_ADDR=192.168.77.1 (rxe0's)
EOF
}

SMP=2 MEM=2048 TIMEOUT=900 LOG=
while [ $# -gt 0 ]; do
    case "$1" in
        --smp) SMP="$2"; shift 2 ;;
        --mem) MEM="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --log) LOG="$2"; shift 2 ;;
        --help|-h) usage; exit 0 ;;
        --) shift; break ;;
        -*) echo "guest.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "guest.sh: no command given (try --help)" >&2; exit 2; }

SRC=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${TESSERA_RDMA_CACHE:-$SRC/build/rdma-guest}
LOG=${LOG:-$CACHE/console.log}

skip() { echo "guest.sh: skipped: $*" >&2; exit 77; }
for tool in qemu-system-x86_64 dpkg-deb apt-get cpio gzip depmod modprobe; do
    command -v "$tool" >/dev/null || skip "no $tool here (make test-rdma installs it)"
done
BUSYBOX=/bin/busybox
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' ||
    skip "no static busybox (Debian's busybox-static)"
[ -x /usr/bin/rdma ] || [ -x /sbin/rdma ] || skip "no rdma command (iproute2)"

mkdir -p "$CACHE"

# ---- The kernel: the package Debian's linux-image-amd64 depends on, unpacked. ----
PKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
      awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$PKG" ] || skip "apt knows no linux-image-amd64 (run apt-get update)"
KROOT=$CACHE/$PKG
if [ ! -d "$KROOT/boot" ]; then
    echo "guest.sh: fetching $PKG (once; cached in $CACHE)" >&2
    rm -rf "$KROOT" "$CACHE"/deb && mkdir -p "$CACHE/deb"
    # (as root, apt warns that it downloads unsandboxed: not a problem here)
    (cd "$CACHE/deb" && apt-get download -q "$PKG" 2>&1 >/dev/null |
        { grep -v "unsandboxed as root" >&2 || true; }) ||
        skip "apt-get download $PKG failed (no network to Debian's archive?)"
    dpkg-deb -x "$CACHE"/deb/"$PKG"_*.deb "$KROOT.tmp"
    rm -rf "$CACHE/deb"
    mv "$KROOT.tmp" "$KROOT"
fi
KVER=$(ls "$KROOT/lib/modules" | head -1)
VMLINUZ=$KROOT/boot/vmlinuz-$KVER
[ -f "$KROOT/lib/modules/$KVER/modules.dep" ] || depmod -b "$KROOT" "$KVER"

# ---- The initramfs: busybox, the modules in load order, /init. ----
# crc32_generic before rdma_rxe: without it `rdma link add` fails (rxe's crc32 init, -2).
MODULES="crc32_generic rdma_rxe ib_uverbs rdma_ucm dummy virtio_pci 9p 9pnet_virtio"
INITRD=$CACHE/initrd-$KVER-$(sha256sum "$0" | cut -c1-12).gz
if [ ! -f "$INITRD" ]; then
    echo "guest.sh: building the initramfs for $KVER" >&2
    IR=$(mktemp -d)
    trap 'rm -rf "$IR"' EXIT
    mkdir -p "$IR"/{bin,dev,proc,sys,host,lib/modules}
    cp "$BUSYBOX" "$IR/bin/busybox"
    ln -s busybox "$IR/bin/sh"
    : > "$IR/modules.order"
    for m in $MODULES; do
        modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" | while read -r kind path _; do
            [ "$kind" = insmod ] || continue
            name=$(basename "$path")
            name=${name%.xz}
            grep -qx "$name" "$IR/modules.order" && continue
            case "$path" in
                *.xz) xz -dc "$path" > "$IR/lib/modules/$name" ;;
                *) cp "$path" "$IR/lib/modules/$name" ;;
            esac
            echo "$name" >> "$IR/modules.order"
        done
    done
    sed -n '/^#!\/bin\/busybox sh$/,/^# end of init$/p' "$0" > "$IR/init"
    chmod +x "$IR/init"
    (cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp"
    mv "$INITRD.tmp" "$INITRD"
    rm -rf "$IR"
    trap - EXIT
fi

# ---- The run: the command in a file the guest reads, its output and status in files it
# writes, in the checkout (the one place the guest writes to). The file is written with
# bash's %q, which quotes a newline as $'\n' (make's continued lines have them), so the
# guest runs it with bash: sh would run "\n" as a command. ----
mkdir -p "$SRC/build/rdma-guest"
RUN=$(mktemp -d "$SRC/build/rdma-guest/run.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
{
    printf 'cd %q || exit 125\n' "$PWD"
    printf 'export PATH=%q HOME=/tmp LANG=C.UTF-8\n' "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # rxe0's address: where the rdma tests listen (test_transport.c, TESSERA_RDMA_ADDR).
    printf 'export TESSERA_RDMA_ADDR=192.168.77.1\n'
    for v in $(compgen -e | grep -E '^(TESSERA_|PYTHONPATH$)'); do
        printf 'export %s=%q\n' "$v" "${!v}"
    done
    printf '%q ' "$@"
    echo
} > "$RUN/cmd"

echo "guest.sh: booting $KVER (TCG, $SMP vCPUs); console in $LOG" >&2
: > "$RUN/out"
# -cpu max: every feature TCG emulates; under the default model a tessera-worker died of
# SIGILL (an instruction that model lacks).
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -smp "$SMP" -m "$MEM" \
    -nographic -no-reboot -serial "file:$LOG" -monitor none \
    -kernel "$VMLINUZ" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet tessera.src=$SRC tessera.run=$RUN" \
    -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
    -fsdev "local,id=checkout,path=$SRC,security_model=none,multidevs=remap" \
    -device virtio-9p-pci,fsdev=checkout,mount_tag=checkout </dev/null &
qpid=$!
trap 'kill $qpid 2>/dev/null || true; rm -rf "$RUN"' EXIT
tail -n +1 -f --pid=$qpid "$RUN/out"   # the command's output as it comes
set +e
wait $qpid
q=$?
set -e
if [ ! -f "$RUN/rc" ]; then
    echo "guest.sh: the guest did not say how the command ended (qemu exited $q); its" \
         "console's end ($LOG):" >&2
    tail -20 "$LOG" >&2
    exit 1
fi
exit "$(cat "$RUN/rc")"

# The guest's /init, copied into the initramfs from here (the lines between the markers).
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do
    insmod /lib/modules/$m || echo "init: insmod $m failed"
done
for a in $(cat /proc/cmdline); do
    case "$a" in
        tessera.src=*) SRC=${a#tessera.src=} ;;
        tessera.run=*) RUN=${a#tessera.run=} ;;
    esac
done
opts=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o ro,$opts hostroot /host || echo "init: mounting / failed"
mount -t 9p -o $opts checkout /host$SRC || echo "init: mounting $SRC failed"
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/shm /host/dev/pts
mount -t tmpfs -o mode=1777 shm /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs -o mode=1777 tmp /host/tmp
mount -t tmpfs run /host/run
chroot /host ip link set lo up
chroot /host ip link add d0 type dummy
chroot /host ip addr add 192.168.77.1/24 dev d0
chroot /host ip link set d0 up
chroot /host rdma link add rxe0 type rxe netdev d0 || echo "init: rdma link add failed"
chroot /host /bin/bash $RUN/cmd >> /host$RUN/out 2>&1
echo $? > /host$RUN/rc.tmp
mv /host$RUN/rc.tmp /host$RUN/rc
sync
poweroff -f
# end of init
