#!/bin/bash
# SPDX-License-Identifier: MIT
# In `make check`: Debian 12's own kernel (6.1, bookworm and its security
# updates) booted in qemu, where it runs `leaseline kernel` (every helper
# probed, the program loaded, timed) and tests/net/test_enforce.sh (the
# agent on a veth with real traffic), so that no change breaks the kernel
# most of our users run unnoticed. The whole matrix: make check-kernels.
exec bash "$(dirname "$0")/run.sh" "${1:?build dir}" smoke 6.1
