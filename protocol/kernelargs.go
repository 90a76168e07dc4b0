package protocol

// RamdiskKernelArgs are kernel arguments every boot of the agent ramdisk
// carries (iPXE script, GRUB config, virtual-media ISO, direct boots).
//
// cryptomgr.notests: Debian's kernels run the crypto self-tests at boot
// and again for every algorithm a module registers. A provisioning ramdisk
// loads dozens of such modules (crc32c, sha, raid6 and xor templates for
// md), and under emulation the tests took 3.6 of the 14 s from kernel
// start to the agent's network (measured with QEMU -icount). FIPS-mode
// kernels ignore the argument and test anyway.
const RamdiskKernelArgs = "cryptomgr.notests"
