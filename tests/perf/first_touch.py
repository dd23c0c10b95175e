#!/usr/bin/python3
"""first_touch.py - what the kernel charges a process for memory it touches
the first time, against memory it touches again.

    first_touch.py [MIB]

Maps MIB (4096) MiB of anonymous memory and fills it three times: the
first time (every page a fault; on a virtual machine the host may also
have to back a page the guest has not used since it took it back), again
(no faults), and after giving it back with MADV_DONTNEED (a fault a page
again, on memory the machine just had). A server whose index grows pays
the first; tests/perf/http_profile.sh shows its share as "first touches".
"""
import ctypes
import mmap
import sys
import time


def fill(addr, n):
    t = time.perf_counter()
    ctypes.memset(addr, 1, n)
    return n / (time.perf_counter() - t) / 1e9


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    if mib <= 0:
        sys.exit("usage: first_touch.py [MIB]")
    n = mib << 20
    m = mmap.mmap(-1, n)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    print(f"first touch:         {fill(addr, n):6.2f} GB/s")
    print(f"again:               {fill(addr, n):6.2f} GB/s")
    m.madvise(mmap.MADV_DONTNEED)
    print(f"after MADV_DONTNEED: {fill(addr, n):6.2f} GB/s")


if __name__ == "__main__":
    main()
