// voxaug: label family -- connected components (validation, CPU backend, routing to CUDA).
// CPU: union-find in slabs of planes (threads work on slabs of one volume or on different
// volumes), the slab boundaries joined per volume, then every voxel pointed at its root (slabs
// in parallel) and the roots turned into labels. A parent's index is never larger than its
// child's, so every root is its component's smallest index.
#include "voxaug/label.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "../common/device.h"
#include "label_kernels.h"
#include "voxaug/detail/convert.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void connected_components_cuda(const LabelParams& p, int64_t volumes, int32_t* labels, int device,
                               cudaStream_t stream);
void distance_transform_cuda(const LabelParams& p, int64_t volumes, const double w2[3],
                             const EdtLayout& e, void* workspace, void* out, bool out_f64,
                             int device, cudaStream_t stream);
#endif
namespace {

inline int32_t find_root(int32_t* L, int32_t x) {
  while (L[x] != x) {
    L[x] = L[L[x]];  // path halving: a parent only moves up to an older (smaller) ancestor
    x = L[x];
  }
  return x;
}

// Every voxel of planes [d0, d1) its own root, or -1 for background.
template <class T>
void init_planes(const LabelParams& p, int64_t vol, int32_t* L, int64_t d0, int64_t d1) {
  const int64_t H = p.size[1], W = p.size[2];
  const int64_t n = vol / p.channels, c = vol % p.channels;
  const T* base = static_cast<const T*>(p.mask) + n * p.mask_stride[0] + c * p.mask_stride[1];
  for (int64_t d = d0; d < d1; ++d)
    for (int64_t h = 0; h < H; ++h) {
      const T* row = base + d * p.mask_stride[2] + h * p.mask_stride[3];
      int32_t* out = L + (d * H + h) * W;
      const int32_t v0 = static_cast<int32_t>((d * H + h) * W);
      for (int64_t w = 0; w < W; ++w)
        out[w] = label_nonzero(row[w * p.mask_stride[4]]) ? v0 + static_cast<int32_t>(w) : -1;
    }
}

void init_planes_dyn(const LabelParams& p, int64_t vol, int32_t* L, int64_t d0, int64_t d1) {
  switch (p.dtype) {
    case DType::Float64: return init_planes<double>(p, vol, L, d0, d1);
    case DType::Float32: return init_planes<float>(p, vol, L, d0, d1);
    case DType::Float16: return init_planes<half_t>(p, vol, L, d0, d1);
    case DType::BFloat16: return init_planes<bfloat16_t>(p, vol, L, d0, d1);
    case DType::UInt8: return init_planes<uint8_t>(p, vol, L, d0, d1);
    case DType::Int16: return init_planes<int16_t>(p, vol, L, d0, d1);
    case DType::Int32: return init_planes<int32_t>(p, vol, L, d0, d1);
    case DType::Int64: return init_planes<int64_t>(p, vol, L, d0, d1);
  }
}

// Foreground voxels of planes [d0, d1) of one volume join their foreground backward neighbours
// in planes >= dmin (the roots' links stay within [dmin's plane, d1) until the slabs are joined).
void join_planes(const LabelParams& p, int32_t* L, int64_t d0, int64_t d1, int64_t dmin) {
  const int64_t H = p.size[1], W = p.size[2];
  for (int64_t d = d0; d < d1; ++d)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        const int32_t v = static_cast<int32_t>((d * H + h) * W + w);
        if (L[v] < 0) continue;
        // v's root changes only through the links made here: kept in r, not searched again.
        int32_t r = find_root(L, v);
        // 26-connectivity: a foreground left neighbour is adjacent to every backward neighbour
        // of v except the four in column w + 1, and it has joined them already.
        const bool left = p.connectivity == 3 && w > 0 && L[v - 1] >= 0;
        for (int k = 0; k < p.num_offsets; ++k) {
          if (left && p.offsets[k][2] != 1 && !(p.offsets[k][0] == 0 && p.offsets[k][1] == 0))
            continue;
          const int64_t nd = d + p.offsets[k][0], nh = h + p.offsets[k][1],
                        nw = w + p.offsets[k][2];
          if (nd < dmin || nh < 0 || nh >= H || nw < 0 || nw >= W) continue;
          const int32_t u = static_cast<int32_t>((nd * H + nh) * W + nw);
          if (L[u] < 0 || L[u] == r) continue;
          const int32_t ru = find_root(L, u);
          if (ru < r) {
            L[r] = ru;
            r = ru;
          } else if (r < ru) {
            L[ru] = r;
          }
        }
      }
}

void connected_components_cpu(const LabelParams& p, int64_t volumes, int32_t* labels) {
  const int64_t D = p.size[0], V = p.volume;
  const int threads = std::max(1, omp_get_max_threads());
  // Slabs per volume: enough tasks for the threads, at least 16 planes per slab.
  int64_t slabs = volumes >= threads ? 1 : (threads + volumes - 1) / volumes;
  slabs = std::max<int64_t>(1, std::min(slabs, D / 16));
  const int64_t per = (D + slabs - 1) / slabs;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < volumes * slabs; ++t) {
    const int64_t vol = t / slabs, s = t % slabs;
    const int64_t d0 = s * per, d1 = std::min(D, d0 + per);
    if (d0 < d1) {
      init_planes_dyn(p, vol, labels + vol * V, d0, d1);
      join_planes(p, labels + vol * V, d0, d1, d0);
    }
  }
  if (slabs > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t vol = 0; vol < volumes; ++vol) {
      int32_t* L = labels + vol * V;
      for (int64_t s = 1; s < slabs; ++s) {
        const int64_t d0 = s * per;
        if (d0 < D) join_planes(p, L, d0, d0 + 1, d0 - 1);
      }
    }
  }
  // Every voxel to its root, slabs in parallel: a walk may pass through a voxel another thread
  // is lowering to its root; both values lead to the same root (relaxed atomics: no data race).
  const int64_t plane = p.size[1] * p.size[2];
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < volumes * slabs; ++t) {
    int32_t* L = labels + (t / slabs) * V;
    const int64_t d0 = (t % slabs) * per, d1 = std::min(D, d0 + per);
    for (int64_t v = d0 * plane; v < d1 * plane; ++v) {
      int32_t r = __atomic_load_n(&L[v], __ATOMIC_RELAXED);
      if (r < 0 || r == v) continue;
      for (int32_t up = __atomic_load_n(&L[r], __ATOMIC_RELAXED); up != r;
           up = __atomic_load_n(&L[r], __ATOMIC_RELAXED))
        r = up;
      __atomic_store_n(&L[v], r, __ATOMIC_RELAXED);
    }
  }
  // Roots to labels: background 0, else 1 + the root's index.
  const int64_t total = volumes * V;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < total; ++i) labels[i] = labels[i] < 0 ? 0 : labels[i] + 1;
}

// ---- component sizes and the largest components (CPU) ----

// Voxel chunks of one volume for the parallel passes (several per thread, in C-order).
struct Chunks {
  int64_t count, V;
  explicit Chunks(int64_t volume)
      : count(std::max<int64_t>(1, std::min<int64_t>(volume / 4096, 8 * omp_get_max_threads()))),
        V(volume) {}
  int64_t begin(int64_t i) const { return V * i / count; }
  int64_t end(int64_t i) const { return V * (i + 1) / count; }
};

// Whether label l (> 0) of voxel v is canonical: its root l - 1 is v or an earlier voxel and
// carries l itself.
inline bool canonical(const int32_t* L, int64_t v, int32_t l) {
  return l - 1 <= v && L[l - 1] == l;
}

// The components of one volume of canonical labels: their roots (the voxels whose label is 1 +
// their own index), ascending, and their sizes.
struct ComponentTable {
  std::vector<int64_t> roots, sizes;
  // Index of root voxel `root` (present: its label was checked canonical).
  int64_t id(int64_t root) const {
    return std::lower_bound(roots.begin(), roots.end(), root) - roots.begin();
  }
  // Two passes: the roots, then the sizes (a run of equal labels adds once). False on a
  // non-canonical or negative label.
  bool build(const int32_t* L, const Chunks& ch) {
    std::vector<std::vector<int64_t>> part(static_cast<size_t>(ch.count));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < ch.count; ++i) {
      const int64_t b = ch.begin(i), e = ch.end(i);
      for (int64_t v = b; v < e; ++v)
        if (L[v] == v + 1) part[static_cast<size_t>(i)].push_back(v);
    }
    roots.clear();
    for (const auto& r : part) roots.insert(roots.end(), r.begin(), r.end());
    sizes.assign(roots.size(), 0);
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (int64_t i = 0; i < ch.count; ++i) {
      int32_t prev = 0;
      int64_t cur = -1, run = 0;
      const int64_t b = ch.begin(i), e = ch.end(i);
      for (int64_t v = b; v < e; ++v) {
        const int32_t l = L[v];
        if (l == prev) {
          run += l != 0;
          continue;
        }
        if (run > 0) __atomic_fetch_add(&sizes[static_cast<size_t>(cur)], run, __ATOMIC_RELAXED);
        prev = l, run = 0;
        if (l == 0) continue;
        if (l < 0 || !canonical(L, v, l)) {
          bad = 1;
          prev = 0;
          continue;
        }
        cur = id(l - 1);
        run = 1;
      }
      if (run > 0) __atomic_fetch_add(&sizes[static_cast<size_t>(cur)], run, __ATOMIC_RELAXED);
    }
    return !bad;
  }
  // out[v] = value[id of v's component] (runs of equal labels look up once), 0 for background.
  template <class T, class U>
  void scatter(const int32_t* L, const Chunks& ch, const std::vector<U>& value, T* out) const {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < ch.count; ++i) {
      int32_t prev = 0;
      T cur = 0;
      const int64_t b = ch.begin(i), e = ch.end(i);
      for (int64_t v = b; v < e; ++v) {
        const int32_t l = L[v];
        if (l != prev) {
          prev = l;
          cur = l == 0 ? T(0) : static_cast<T>(value[static_cast<size_t>(id(l - 1))]);
        }
        out[v] = cur;
      }
    }
  }
};

// Returns false on a non-canonical label.
bool largest_components_volume(const int32_t* L, int64_t V, int64_t k, uint8_t* keep) {
  const Chunks ch(V);
  ComponentTable t;
  if (!t.build(L, ch)) return false;
  // The k largest: size descending, then root (label) ascending.
  const int64_t R = static_cast<int64_t>(t.roots.size()), kept = std::min(k, R);
  std::vector<int64_t> order(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) order[static_cast<size_t>(i)] = i;
  std::partial_sort(order.begin(), order.begin() + kept, order.end(), [&](int64_t a, int64_t b) {
    const int64_t sa = t.sizes[static_cast<size_t>(a)], sb = t.sizes[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a < b;
  });
  if (kept <= 4) {                       // compare with the kept labels (vectorises)
    int32_t want[4] = {-1, -1, -1, -1};  // -1: no label matches
    for (int64_t j = 0; j < kept; ++j)
      want[j] =
          static_cast<int32_t>(t.roots[static_cast<size_t>(order[static_cast<size_t>(j)])] + 1);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < ch.count; ++i) {
      // Bounds and wanted labels in locals: `keep` is a char pointer, which may alias them.
      const int64_t b = ch.begin(i), e = ch.end(i);
      const int32_t w0 = want[0], w1 = want[1], w2 = want[2], w3 = want[3];
      for (int64_t v = b; v < e; ++v) {
        const int32_t l = L[v];
        keep[v] = static_cast<uint8_t>((l == w0) | (l == w1) | (l == w2) | (l == w3));
      }
    }
    return true;
  }
  std::vector<uint8_t> chosen(static_cast<size_t>(R), 0);
  for (int64_t j = 0; j < kept; ++j) chosen[static_cast<size_t>(order[static_cast<size_t>(j)])] = 1;
  t.scatter(L, ch, chosen, keep);
  return true;
}

bool component_sizes_volume(const int32_t* L, int64_t V, int32_t* sizes) {
  const Chunks ch(V);
  ComponentTable t;
  if (!t.build(L, ch)) return false;
  t.scatter(L, ch, t.sizes, sizes);
  return true;
}

}  // namespace
}  // namespace detail

namespace {
// The mask's LabelParams: what a foreground voxel is (label_foreground) and where it lies.
detail::LabelParams mask_params(const VolumeView& mask) {
  for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(mask.shape[a] >= 0, "mask sizes must be >= 0");
  detail::LabelParams p{};
  p.mask = mask.data;
  p.dtype = mask.dtype;
  for (int a = 0; a < 5; ++a) p.mask_stride[a] = mask.strides[a];
  p.channels = mask.shape[1];
  for (int a = 0; a < 3; ++a) p.size[a] = mask.shape[a + 2];
  p.volume = mask.shape[2] * mask.shape[3] * mask.shape[4];
  return p;
}
}  // namespace

void connected_components(const VolumeView& mask, const VolumeView& labels, int connectivity,
                          cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;
#endif
  for (int a = 0; a < 5; ++a) {
    VOXAUG_EXPECTS(mask.shape[a] >= 0, "mask sizes must be >= 0");
    VOXAUG_EXPECTS(
        labels.shape[a] == mask.shape[a],
        "labels must have mask's shape " + mask.describe() + ", got " + labels.describe());
  }
  VOXAUG_EXPECTS(connectivity >= 1 && connectivity <= 3,
                 "connectivity must be 1 (6 neighbours), 2 (18) or 3 (26), got " +
                     std::to_string(connectivity));
  VOXAUG_EXPECTS(labels.dtype == DType::Int32,
                 std::string("labels must be int32, got ") + dtype_name(labels.dtype));
  VOXAUG_EXPECTS(labels.device == mask.device && labels.device_index == mask.device_index,
                 "labels must be on mask's device");
  const int64_t volumes = mask.shape[0] * mask.shape[1];
  const int64_t V = mask.shape[2] * mask.shape[3] * mask.shape[4];
  if (volumes == 0 || V == 0) return;
  VOXAUG_EXPECTS(V < INT32_MAX,
                 "connected_components: a volume must hold fewer than 2^31 - 1 voxels, got " +
                     std::to_string(V));
  const int64_t dense[5] = {mask.shape[1] * V, V, mask.shape[3] * mask.shape[4], mask.shape[4], 1};
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(
        labels.strides[a] == dense[a] || labels.shape[a] == 1,
        "labels must be a dense C-order (N, C, D, H, W) buffer, got " + labels.describe());
  VOXAUG_EXPECTS(mask.data != nullptr && labels.data != nullptr,
                 "mask and labels must not be null");
  detail::LabelParams p = mask_params(mask);
  p.connectivity = connectivity;
  detail::label_offsets(p);
  auto* out = static_cast<int32_t*>(labels.data);
  if (mask.device == Device::CPU) {
    detail::connected_components_cpu(p, volumes, out);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(mask.data, mask.device_index, "mask");
  detail::check_device_pointer(labels.data, labels.device_index, "labels");
  detail::connected_components_cuda(p, volumes, out, mask.device_index, stream);
#else
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

namespace {

// Validates labels and a same-shape dense CPU output of `out_t`; returns the volume count and size.
void check_component_args(const char* fn, const VolumeView& labels, const VolumeView& out,
                          const char* out_name, DType out_t, int64_t& volumes, int64_t& V) {
  const std::string f = std::string(fn) + ": ";
  VOXAUG_EXPECTS(labels.dtype == DType::Int32,
                 f + "labels must be int32, got " + dtype_name(labels.dtype));
  VOXAUG_EXPECTS(out.dtype == out_t,
                 f + out_name + " must be " + dtype_name(out_t) + ", got " + dtype_name(out.dtype));
  for (int a = 0; a < 5; ++a) {
    VOXAUG_EXPECTS(labels.shape[a] >= 0, f + "labels sizes must be >= 0");
    VOXAUG_EXPECTS(
        out.shape[a] == labels.shape[a],
        f + out_name + " must have labels' shape " + labels.describe() + ", got " + out.describe());
  }
  VOXAUG_EXPECTS(labels.device == Device::CPU && out.device == Device::CPU,
                 f + "labels and " + out_name +
                     " must be CPU buffers (CUDA tensors: the torch op "
                     "voxaug::" +
                     fn + ")");
  volumes = labels.shape[0] * labels.shape[1];
  V = labels.shape[2] * labels.shape[3] * labels.shape[4];
  if (volumes == 0 || V == 0) return;
  const int64_t dense[5] = {labels.shape[1] * V, V, labels.shape[3] * labels.shape[4],
                            labels.shape[4], 1};
  for (int a = 0; a < 5; ++a) {
    VOXAUG_EXPECTS(labels.strides[a] == dense[a] || labels.shape[a] == 1,
                   f + "labels must be dense C-order, got " + labels.describe());
    VOXAUG_EXPECTS(out.strides[a] == dense[a] || out.shape[a] == 1,
                   f + out_name + " must be dense C-order, got " + out.describe());
  }
  VOXAUG_EXPECTS(labels.data != nullptr && out.data != nullptr,
                 f + "labels and " + out_name + " must not be null");
}

std::string not_canonical(const char* fn, int64_t vol) {
  return std::string(fn) + ": labels must be connected_components output (volume " +
         std::to_string(vol) +
         " has a label l whose voxel l - 1 does not carry l, or a negative label)";
}

}  // namespace

void largest_components(const VolumeView& labels, int64_t num_components, const VolumeView& keep) {
  VOXAUG_EXPECTS(num_components >= 1, "largest_components: num_components must be >= 1, got " +
                                          std::to_string(num_components));
  int64_t volumes = 0, V = 0;
  check_component_args("largest_components", labels, keep, "keep", DType::UInt8, volumes, V);
  if (volumes == 0 || V == 0) return;
  const auto* L = static_cast<const int32_t*>(labels.data);
  auto* K = static_cast<uint8_t*>(keep.data);
  for (int64_t vol = 0; vol < volumes; ++vol)
    VOXAUG_EXPECTS(detail::largest_components_volume(L + vol * V, V, num_components, K + vol * V),
                   not_canonical("largest_components", vol));
}

void component_sizes(const VolumeView& labels, const VolumeView& sizes) {
  int64_t volumes = 0, V = 0;
  check_component_args("component_sizes", labels, sizes, "sizes", DType::Int32, volumes, V);
  if (volumes == 0 || V == 0) return;
  const auto* L = static_cast<const int32_t*>(labels.data);
  auto* S = static_cast<int32_t*>(sizes.data);
  for (int64_t vol = 0; vol < volumes; ++vol)
    VOXAUG_EXPECTS(detail::component_sizes_volume(L + vol * V, V, S + vol * V),
                   not_canonical("component_sizes", vol));
}

namespace detail {
namespace {

// The CPU passes: squared distances in sq (out itself when out is float64), lines in parallel;
// lines of the h and d passes run w-fastest, so neighbouring threads' lines share cache lines.
void distance_transform_cpu(const LabelParams& p, int64_t volumes, const double w2[3], void* out,
                            bool out_f64, void* workspace, int64_t workspace_bytes) {
  const int64_t D = p.size[0], H = p.size[1], W = p.size[2], V = p.volume;
  std::vector<double> own;
  double* sq = static_cast<double*>(out);
  if (!out_f64) {
    if (workspace != nullptr && workspace_bytes >= volumes * V * 8) {
      sq = static_cast<double*>(workspace);
    } else {
      own.resize(static_cast<size_t>(volumes * V));
      sq = own.data();
    }
  }
  const int64_t nmax = std::max({D, H, W});
#pragma omp parallel
  {
    std::vector<int32_t> v(static_cast<size_t>(nmax));
    std::vector<double> z(static_cast<size_t>(nmax + 1)), fv(static_cast<size_t>(nmax));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < volumes * D * H; ++r) {  // rows along w, from the mask
      const int64_t vol = r / (D * H), d = (r / H) % D, h = r % H;
      edt_row_from_mask(p, vol, d, h, w2[2], sq + vol * V + (d * H + h) * W);
    }
    for (int axis : {1, 0}) {  // the lines of h, then d (the CUDA passes' numbering)
      const int64_t per_vol = V / p.size[axis];
#pragma omp for schedule(static)
      for (int64_t l = 0; l < volumes * per_vol; ++l) {
        int64_t base, stride;
        edt_line_at(p.size, axis, l % per_vol, base, stride);
        double* line = sq + (l / per_vol) * V + base;
        edt_line(line, stride, p.size[axis], w2[axis], line, stride, v.data(), z.data(), fv.data(),
                 1);
      }
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < volumes * V; ++i) {
      const int64_t x = i % W, h = (i / W) % H, d = (i / (H * W)) % D;
      const double dist = edt_distance(sq[i], w2, d, h, x);
      if (out_f64)
        sq[i] = dist;
      else
        static_cast<float*>(out)[i] = static_cast<float>(dist);
    }
  }
}

}  // namespace
}  // namespace detail

int64_t distance_transform_workspace_bytes(const VolumeView& mask, DType out_dtype) {
  const detail::LabelParams p = mask_params(mask);
  const int64_t volumes = mask.shape[0] * mask.shape[1];
  if (volumes == 0 || p.volume == 0) return 0;
  if (mask.device != Device::CUDA) return out_dtype == DType::Float64 ? 0 : volumes * p.volume * 8;
  return detail::edt_layout(volumes, p.size).bytes();
}

void distance_transform_edt(const VolumeView& mask, const double spacing[3], const VolumeView& out,
                            void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;
#endif
  const detail::LabelParams p = mask_params(mask);
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(out.shape[a] == mask.shape[a],
                   "distance_transform_edt: out must have mask's shape " + mask.describe() +
                       ", got " + out.describe());
  VOXAUG_EXPECTS(out.dtype == DType::Float32 || out.dtype == DType::Float64,
                 std::string("distance_transform_edt: out must be float32 or float64, got ") +
                     dtype_name(out.dtype));
  VOXAUG_EXPECTS(out.device == mask.device && out.device_index == mask.device_index,
                 "distance_transform_edt: out must be on mask's device");
  VOXAUG_EXPECTS(spacing != nullptr, "distance_transform_edt: spacing must not be null");
  double w2[3];
  for (int a = 0; a < 3; ++a) {
    VOXAUG_EXPECTS(std::isfinite(spacing[a]) && spacing[a] > 0.0,
                   "distance_transform_edt: spacing must be three positive finite values, got " +
                       std::to_string(spacing[a]) + " on axis " + std::to_string(a));
    w2[a] = spacing[a] * spacing[a];
  }
  const int64_t volumes = mask.shape[0] * mask.shape[1];
  if (volumes == 0 || p.volume == 0) return;
  const int64_t V = p.volume;
  const int64_t dense[5] = {mask.shape[1] * V, V, mask.shape[3] * mask.shape[4], mask.shape[4], 1};
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(
        out.strides[a] == dense[a] || out.shape[a] == 1,
        "distance_transform_edt: out must be dense C-order (N, C, D, H, W), got " + out.describe());
  for (int a = 0; a < 3; ++a)
    VOXAUG_EXPECTS(p.size[a] < INT32_MAX, "distance_transform_edt: axes must be shorter than 2^31");
  VOXAUG_EXPECTS(mask.data != nullptr && out.data != nullptr,
                 "distance_transform_edt: mask and out must not be null");
  const bool f64 = out.dtype == DType::Float64;
  if (mask.device == Device::CPU) {
    detail::distance_transform_cpu(p, volumes, w2, out.data, f64, workspace, workspace_bytes);
    return;
  }
#if VOXAUG_WITH_CUDA
  const detail::EdtLayout e = detail::edt_layout(volumes, p.size);
  VOXAUG_EXPECTS(workspace != nullptr && workspace_bytes >= e.bytes(),
                 "distance_transform_edt: workspace needs " + std::to_string(e.bytes()) +
                     " bytes (distance_transform_workspace_bytes), got " +
                     std::to_string(workspace_bytes));
  detail::check_device_pointer(mask.data, mask.device_index, "mask");
  detail::check_device_pointer(out.data, out.device_index, "out");
  detail::check_device_pointer(workspace, mask.device_index, "workspace");
  detail::distance_transform_cuda(p, volumes, w2, e, workspace, out.data, f64, mask.device_index,
                                  stream);
#else
  (void)workspace;
  (void)workspace_bytes;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

}  // namespace voxaug
