/* tensor.h -- Tensor and Arena: the data half of the autograd core (the tape is tape.h).
 *
 * A Tensor is a contiguous, row-major fp32 array of up to TENSOR_MAX_DIMS dims on one device.
 * Tensors never own memory: an Arena does. There is no tensor_free; arena_reset/arena_free
 * release everything allocated from the arena at once.
 *
 * Memory layout (issue 13): an Arena has two halves. Its HOST half holds what the host walks:
 * Tensor headers, tape nodes and their edge arrays, op contexts (arena_alloc_host). Its DATA
 * half holds tensor data and gradients, and anything a kernel reads (gather indices, attention
 * masks), in the backend's memory (arena_alloc_data): device memory on CUDA, protected pages
 * on the fake device (kernels/cpu/backend_fake.c). Host code never dereferences data-half
 * memory; it copies through tensor_read/tensor_write (or be->to_host/to_device) or calls a
 * kernel.
 *
 * Gradients: `grad` is NULL until a gradient flows into the tensor during backward (the tape
 * allocates it, zeroed, from its step arena). Leaves that require grad (parameters, or test
 * inputs) model PyTorch's `.grad`: their buffer may be allocated up front, and `grad_defined`
 * says whether it holds a gradient (false = PyTorch's `grad is None`). */
#ifndef TRAINER_TENSOR_H
#define TRAINER_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#define TENSOR_MAX_DIMS 6

typedef struct Node Node;

typedef struct Tensor {
    float *data;                     // numel floats on `dev`
    float *grad;                     // numel floats on `dev`, or NULL (see header)
    int64_t shape[TENSOR_MAX_DIMS];  // shape[0..ndim-1]
    int ndim;                        // 0 = scalar (numel 1)
    int64_t n;                       // numel
    Device dev;
    bool requires_grad;              // part of the autograd graph
    bool grad_defined;               // leaves: grad holds a value (PyTorch: grad is not None)
    bool owns_data;                  // data was allocated for this tensor (tensor_new), not a
                                     // view of another's: the tape may release it (tape.h)
    bool dropped;                    // data dropped in the forward, to be recomputed (tape_drop)
    int n_aliases;                   // recorded views of this tensor (tape_drop)
    int param_index;                 // index in the model's parameter list, -1 otherwise
    Node *grad_fn;                   // the node that produced it; NULL for leaves and constants
    int out_index;                   // which output of grad_fn this is
    // engine scratch, valid during one tape_backward (see tape.c)
    int64_t deps;
    uint64_t mark;
} Tensor;

// ---- Arena: bump allocation in chunks; reset keeps the chunks for reuse ----
typedef struct ArenaChunk ArenaChunk;
// One half of an arena: chunks from one allocator.
typedef struct ArenaHalf {
    ArenaChunk *chunks;    // newest first
    size_t used;           // bytes handed out since the last reset
    size_t peak;           // max of `used` over the arena's life
    size_t reserved;       // bytes held in chunks
} ArenaHalf;
typedef struct ArenaPool ArenaPool;
typedef struct Arena {
    const Backend *be;     // where the data half lives
    size_t chunk_bytes;    // default size of a new data chunk (host chunks: a 16th of it)
    ArenaHalf data;        // be->alloc'd: tensor data, gradients, kernel-read indices/masks
    ArenaHalf host;        // host memory: Tensor headers, tape nodes, op contexts
    ArenaPool *pool;       // data blocks given back since the last reset (arena_give_data)
} Arena;

// chunk_bytes: size of each data chunk (a larger request gets a chunk of its own).
void arena_init(Arena *a, Device dev, size_t chunk_bytes);
// Releases every chunk of both halves. arena_free on a zeroed Arena is a no-op.
void arena_free(Arena *a);
// Forgets every allocation but keeps the chunks; everything allocated before is invalid.
// Each half's chunks are merged into one of its peak size plus an eighth (steps whose shapes
// grow a little with the number of boxes fit), so a steady-state step reuses a
// single block per half.
void arena_reset(Arena *a);
// Both: 64-byte aligned, uninitialised, never NULL (abort when memory is exhausted).
// Backend memory (the device's): host code must not dereference it; a given-back block when
// one fits (arena_give_data).
void *arena_alloc_data(Arena *a, size_t nbytes);
// A data block this arena handed out (nbytes as requested) is not used any more before the
// next reset: later arena_alloc_data calls get it back before the arena grows (under 64 KiB:
// requests of its own size; larger blocks are merged with free neighbours, and a request
// takes the smallest that holds it, from its start, leaving the rest free). The data half's
// `used` and `peak` count what the chunks handed out, blocks given back included: the memory
// the step touched. NULL is ignored.
void arena_give_data(Arena *a, void *block, size_t nbytes);
// Host memory, for what the host reads and writes (headers, nodes, contexts, host scratch).
void *arena_alloc_host(Arena *a, size_t nbytes);

// ---- construction (data uninitialised unless stated) ----
Tensor *tensor_new(Arena *a, int ndim, const int64_t *shape);
Tensor *tensor_zeros(Arena *a, int ndim, const int64_t *shape);
Tensor *tensor_scalar(Arena *a, float value);
// Same shape and device as `like`.
Tensor *tensor_like(Arena *a, const Tensor *like);
// A tensor header over existing memory of the same numel (a view: shares data, no grad,
// owns_data false).
Tensor *tensor_view(Arena *a, float *data, int ndim, const int64_t *shape);
// Convenience shapes. tensor_nd(a, 3, (int64_t[]){B, N, C}) is the general form.
Tensor *tensor_1d(Arena *a, int64_t d0);
Tensor *tensor_2d(Arena *a, int64_t d0, int64_t d1);
Tensor *tensor_3d(Arena *a, int64_t d0, int64_t d1, int64_t d2);
Tensor *tensor_4d(Arena *a, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
// A leaf that requires grad with its grad buffer allocated (grad_defined false), as for
// parameters and gradcheck inputs.
Tensor *tensor_leaf(Arena *a, int ndim, const int64_t *shape);

// ---- host access to data (the only ways host code reads or writes tensor data) ----
// dst[0..t->n) = t's data, through the backend's to_host.
void tensor_read(const Tensor *t, float *dst);
// t's data = src[0..t->n), through the backend's to_device.
void tensor_write(Tensor *t, const float *src);
// The value of a one-element tensor.
float tensor_item(const Tensor *t);
// t->data[i] = value for every i, by the backend's fill kernel.
void tensor_fill(Tensor *t, float value);
// dst's data = src's (same numel), by the backend's copy kernel.
void tensor_copy(Tensor *dst, const Tensor *src);
// Host loops over whole buffers (the optimizer, the EMA, clipping): host_map gives n floats of
// device memory `dev_ptr` on the host, the memory itself on the CPU (whose memory is the
// host's), else a staging copy, read in with to_host when `read`. host_unmap ends the access:
// writes the staging copy back with to_device when `write_back`, and frees it.
float *host_map(Device dev, float *dev_ptr, int64_t n, bool read);
void host_unmap(Device dev, float *dev_ptr, float *host, int64_t n, bool write_back);
// A host copy of t's data in a fresh xmalloc'd array (the caller frees it).
float *tensor_host_copy(const Tensor *t);

// ---- queries ----
int64_t shape_numel(int ndim, const int64_t *shape);
bool tensor_same_shape(const Tensor *a, const Tensor *b);
// Dimension d, negative d counts from the end (as PyTorch).
int64_t tensor_dim(const Tensor *t, int d);
// Writes "2x3x4" (or "" for a scalar) into buf; returns buf.
char *tensor_shape_str(const Tensor *t, char *buf, size_t len);

#endif
