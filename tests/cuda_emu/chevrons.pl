# chevrons.pl -- rewrites CUDA's launch syntax for the host emulation (tests/cuda_emu/emu.h):
# `kernel<<<grid, block, shmem, stream>>>(args)` becomes
# `emu_launch(EmuCfg{grid, block, shmem, stream}, kernel, args)`, across line breaks.
# Run as: perl -0pe 's/.../.../' through `perl -0p tests/cuda_emu/chevrons.pl < in.cu`.
s/([A-Za-z_][A-Za-z_0-9]*(?:\[[A-Za-z_0-9]+\])?)<<<(.*?)>>>\(/emu_launch(EmuCfg{$2}, $1, /gs;
