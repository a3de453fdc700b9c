// voxaug: the phantom's functors (launch_cpu.h / launch_cuda.cuh contract), shared by the CPU and
// CUDA backends; the math is include/voxaug/detail/phantom.h.
#pragma once

#include <cstdint>

#include "voxaug/detail/indexer.h"
#include "voxaug/detail/philox.h"
#include "voxaug/detail/phantom.h"

namespace voxaug::detail {

// One item per row part: item 0 the header, item 1 + o object o. Rows are dense, P floats.
struct PhantomParamsFunctor {
  struct State {};
  float* table;
  int64_t row_size;  // P
  int num_classes;
  uint64_t seed;
  uint32_t first_sample;

  VOXAUG_HD int64_t items() const { return 1 + num_classes; }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t n, int64_t i) const {
    phantom_row_item(seed, first_sample + static_cast<uint32_t>(n), num_classes, i,
                     table + n * row_size);
  }
};

// One item per voxel (C-order index e of the sample).
struct PhantomRenderFunctor {
  struct State {
    const float* row;
  };
  const float* table;
  int64_t row_size;
  int num_classes;
  float* image;
  uint8_t* label;
  Indexer image_ix, label_ix;
  int64_t size[3];  // D, H, W
  float scale[3];   // 2 / size
  uint64_t seed;
  uint32_t first_sample;

  VOXAUG_HD int64_t items() const { return size[0] * size[1] * size[2]; }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& s) const {
    s.row = table + n * row_size;
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& s, int64_t n, int64_t e) const {
    const int64_t w = e % size[2];
    const int64_t t = e / size[2];
    float z[4], v;
    normal4(seed, static_cast<uint64_t>(e >> 2), first_sample + static_cast<uint32_t>(n), z);
    const uint8_t l = phantom_voxel(s.row, num_classes, phantom_coord(t / size[1], scale[0]),
                                    phantom_coord(t % size[1], scale[1]),
                                    phantom_coord(w, scale[2]), &v);
    image[image_ix.offset(n, e)] = fadd(v, fmul(s.row[phantom_layout::kNoiseStd], z[e & 3]));
    label[label_ix.offset(n, e)] = l;
  }
};

}  // namespace voxaug::detail
