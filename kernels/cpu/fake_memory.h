/* fake_memory.h -- the fake device's memory: host pages that host code cannot read.
 *
 * Every allocation is its own mmap'd region, kept PROT_NONE except while the fake backend
 * opens them all for a kernel call or a copy (fake_memory_open / fake_memory_close, nested
 * calls counted). So a host read or write of device memory that skips the backend faults at
 * its own line; the SIGSEGV handler names the address as fake-device memory before the
 * default action (core, exit by signal) runs. Thread-safe; the open state is process-wide. */
#ifndef KERNELS_CPU_FAKE_MEMORY_H
#define KERNELS_CPU_FAKE_MEMORY_H

#include <stdbool.h>
#include <stddef.h>

// nbytes > 0; page aligned (so 64-byte aligned), PROT_NONE unless open; aborts on failure.
void *fake_memory_alloc(size_t nbytes);
// p from fake_memory_alloc, or NULL (a no-op).
void fake_memory_free(void *p);
// Makes every region readable and writable until the matching close.
void fake_memory_open(void);
void fake_memory_close(void);
// Whether p lies in a live fake-device region (open or not).
bool fake_memory_contains(const void *p);
// Bytes held in live regions (page-rounded).
size_t fake_memory_bytes(void);

#endif
