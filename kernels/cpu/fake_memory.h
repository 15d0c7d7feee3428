/* fake_memory.h -- the fake device's memory: host pages that host code cannot read.
 *
 * Every allocation is a shared memory object mapped twice: the device address handed out
 * (fake_memory_alloc's result, what tensors hold) is PROT_NONE for good, and a second,
 * readable and writable mapping of the same pages is what the fake backend's kernels and
 * copies use (fake_memory_kernel_ptr translates an address into it). So a host read or write
 * of device memory that skips the backend faults at its own line, whatever other threads are
 * doing; the SIGSEGV handler names the address as fake-device memory and prints the frames
 * before the default action (core, exit by signal) runs. Nothing is re-protected per call, so
 * the fake device costs a pointer translation per kernel argument. Thread-safe. */
#ifndef KERNELS_CPU_FAKE_MEMORY_H
#define KERNELS_CPU_FAKE_MEMORY_H

#include <stdbool.h>
#include <stddef.h>

// nbytes > 0; page aligned (so 64-byte aligned), never readable by the host; aborts on failure.
void *fake_memory_alloc(size_t nbytes);
// p from fake_memory_alloc, or NULL (a no-op).
void fake_memory_free(void *p);
// The kernels' view of p: its address in the readable mapping when p lies in a live region,
// else p itself (host memory, NULL).
void *fake_memory_kernel_ptr(const void *p);
// Whether p lies in a live fake-device region.
bool fake_memory_contains(const void *p);
// Bytes held in live regions (page-rounded).
size_t fake_memory_bytes(void);

#endif
