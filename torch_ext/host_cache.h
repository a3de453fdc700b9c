// voxaug torch_ext: reuse of large host buffers for the ops' CPU outputs.
//
// glibc serves every allocation of 32 MiB and more (its largest mmap threshold) with a fresh
// mmap, so each such output tensor page-faults on its first write and the kernel zeroes every
// page before the op writes it again: on the 2-core VM a 33 MiB torch.clone took 10 ms against
// 1.7 ms at 31 MiB, and a 1 x 1 x 224 x 224 x 160 float32 volume (32.1 MB) or a 4 x 1 x 128^3
// batch is just past that line. A training loop allocates the same batch sizes again and again,
// so the ops allocate their large CPU outputs through a cache: a freed output's buffer is kept
// (exact byte size; most recently freed first) and handed to the next output of that size.
//
// - Only CPU outputs of at least kHostCacheMinBytes (and the scratch buffers of empty_cached);
//   everything else is at::empty.
// - At most VOXAUG_HOST_CACHE_MB MiB (read once; default 1024) are kept; the oldest buffers go
//   first; 0 keeps none (each buffer is freed when its tensor dies; new ones still come on huge
//   pages). release_host_cache() frees every kept buffer (torch.ops.voxaug.release_host_cache,
//   voxaug.ops.release_host_cache).
// - The tensors are ordinary CPU tensors (resizable; their storage's allocator is the cache).
//   New buffers are 2 MiB aligned and offered to transparent huge pages (madvise), so even a
//   first allocation faults once per 2 MiB where THP is 'madvise'. A reused buffer holds an
//   earlier output's bytes, so only ops that write every element of their output use it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>

namespace voxaug::torch_ext {

constexpr int64_t kHostCacheMinBytes = int64_t(32) << 20;

// at::empty(sizes, options), from the host cache for a CPU tensor of kHostCacheMinBytes or more.
// Every element must be written by the caller (the bytes are an earlier output's).
at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options);

// A CPU tensor from the host cache whatever its size:
// for an op's own large scratch buffers that every call allocates again (the sliding window's
// window batch and accumulators), where glibc's reuse below 32 MiB did not hold.
at::Tensor empty_cached(at::IntArrayRef sizes, const at::TensorOptions& options);

// Frees every kept buffer; returns the bytes freed.
int64_t release_host_cache();

// Bytes currently kept for reuse (not counting buffers in use).
int64_t host_cache_bytes();

}  // namespace voxaug::torch_ext
