// voxaug torch_ext: the host output cache (host_cache.h).
#include "host_cache.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__unix__)
#include <pthread.h>
#endif

#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace voxaug::torch_ext {
namespace {

int64_t cap_from_env() {
  const char* v = std::getenv("VOXAUG_HOST_CACHE_MB");
  if (v == nullptr || *v == '\0') return int64_t(1024) << 20;
  char* end = nullptr;
  const long long mb = std::strtoll(v, &end, 10);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && mb >= 0,
                    "VOXAUG_HOST_CACHE_MB must be a whole number of MiB >= 0, got '", v, "'");
  return static_cast<int64_t>(mb) << 20;
}

// A fresh buffer of 2 MiB or more: 2 MiB aligned, offered to transparent huge pages (where THP is
// 'madvise', the first touch then faults once per 2 MiB instead of once per 4 KiB; elsewhere a
// plain aligned allocation). nullptr when the host is out of memory.
void* fresh_buffer(size_t n) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (n < kHuge) return std::aligned_alloc(64, (n + 63) / 64 * 64);  // a storage resized small
  const size_t rounded = (n + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p != nullptr) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

// The allocator behind the cached tensors' storages. The data pointer is its own context (a
// "simple" DataPtr, with raw_deleter), so the live sizes are kept in a table.
class HostCache final : public c10::Allocator {
 public:
  HostCache() : cap_(cap_from_env()) {
#if defined(__unix__)
    // A fork while another thread holds the lock (a DataLoader worker forked in the middle of an
    // output's allocation) would leave it locked in the child for good: hold it across fork().
    pthread_atfork(&HostCache::before_fork, &HostCache::after_fork, &HostCache::after_fork);
#endif
  }

  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &HostCache::deleter, c10::Device(c10::DeviceType::CPU)};
    void* p = take(n);
    if (p == nullptr) p = fresh_buffer(n);
    if (p == nullptr) {  // out of memory: give the kept buffers back, then retry
      release_all();
      p = fresh_buffer(n);
    }
    TORCH_CHECK(p != nullptr, "voxaug: out of host memory allocating an output of ", n, " bytes");
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[p] = n;
    }
    return {p, p, &HostCache::deleter, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &HostCache::deleter; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  int64_t release_all() {
    std::deque<std::pair<size_t, void*>> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop.swap(free_);
      cached_ = 0;
    }
    int64_t bytes = 0;
    for (const auto& [n, p] : drop) {
      bytes += static_cast<int64_t>(n);
      std::free(p);
    }
    return bytes;
  }

  int64_t cached() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

 private:
  static void deleter(void* p);
  static void before_fork();
  static void after_fork();

  // A kept buffer of exactly n bytes (the most recently freed), or nullptr.
  void* take(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
      if (it->first == n) {
        void* p = it->second;
        free_.erase(std::next(it).base());
        cached_ -= static_cast<int64_t>(n);
        return p;
      }
    }
    return nullptr;
  }

  // A storage of ours died: keep its buffer (evicting the oldest beyond the cap) or free it.
  void give_back(void* p) {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = live_.find(p);
      TORCH_INTERNAL_ASSERT(it != live_.end(),
                            "voxaug host cache: freeing a buffer it does not own");
      const size_t n = it->second;
      live_.erase(it);
      if (static_cast<int64_t>(n) > cap_) {
        drop.push_back(p);
      } else {
        while (cached_ + static_cast<int64_t>(n) > cap_) {
          drop.push_back(free_.front().second);
          cached_ -= static_cast<int64_t>(free_.front().first);
          free_.pop_front();
        }
        free_.emplace_back(n, p);
        cached_ += static_cast<int64_t>(n);
      }
    }
    for (void* q : drop) std::free(q);
  }

  const int64_t cap_;
  mutable std::mutex mu_;
  std::deque<std::pair<size_t, void*>> free_;  // oldest first
  std::unordered_map<void*, size_t> live_;
  int64_t cached_ = 0;
};

// Never destroyed: tensors may outlive static destruction at exit.
HostCache& cache() {
  static HostCache* c = new HostCache();
  return *c;
}

void HostCache::deleter(void* p) {
  if (p != nullptr) cache().give_back(p);
}

void HostCache::before_fork() { cache().mu_.lock(); }
void HostCache::after_fork() { cache().mu_.unlock(); }  // parent, and child (the forking thread)

}  // namespace

namespace {
at::Tensor from_cache(at::IntArrayRef sizes, const at::TensorOptions& options, int64_t min_bytes) {
  if (options.device().is_cpu() && options.layout() == c10::kStrided && !options.pinned_memory()) {
    int64_t numel = 1;
    for (const int64_t s : sizes) numel *= s;
    const int64_t bytes = numel * static_cast<int64_t>(options.dtype().itemsize());
    if (bytes >= min_bytes && bytes > 0) {
      return at::detail::empty_generic(sizes, &cache(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                       options.dtype().toScalarType(), std::nullopt);
    }
  }
  return at::empty(sizes, options);
}
}  // namespace

at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return from_cache(sizes, options, kHostCacheMinBytes);
}

at::Tensor empty_cached(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return from_cache(sizes, options, 0);
}

int64_t release_host_cache() {
  return cache().release_all();
}

int64_t host_cache_bytes() {
  return cache().cached();
}

}  // namespace voxaug::torch_ext
