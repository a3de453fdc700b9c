// voxaug::transforms::Compose: lazy composition of the C++ spatial transforms (see
// torch_ext/include/voxaug/spatial_transforms.h). Each step is planned on meta tensors (the
// transform's own host code gives its per-sample maps, output size and how it resamples);
// consecutive index maps multiply into one map per input and one resample launch gathers them.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "transform_common.h"
#include "voxaug/resample.h"
#include "voxaug/spatial_transforms.h"
#include "voxaug/torch_ops.h"

namespace voxaug::transforms {
namespace {

constexpr size_t kMaxTargets = static_cast<size_t>(kMaxResampleTargets);

template <class T>
constexpr bool kRandom = std::is_base_of_v<RandomTransform, T>;

Result call(const Step& step, Inputs xs, const Draw& draw, const Modes& modes,
            const Affine4& affine) {
  return std::visit(
      [&](const auto& t) -> Result {
        using T = std::decay_t<decltype(t)>;
        if constexpr (kRandom<T>) {
          return t.apply(xs, draw, modes, affine);
        } else {
          return t(xs, modes, affine);
        }
      },
      step);
}

// A meta tensor standing for x (its shape and dtype; no data).
at::Tensor meta_like(const at::Tensor& x) {
  return at::empty(x.sizes(), x.options().device(at::kMeta));
}

// One input's pending group: the steps' maps multiplied so far.
struct Group {
  int64_t first = 0, end = 0;                 // steps [first, end)
  at::Tensor product;                         // (N, 4, 4) float64 CPU
  std::optional<std::array<int64_t, 3>> key;  // (kernel mode, padding, align) of the first
                                              // interpolating step; none: exact steps only
  std::array<int64_t, 3> out_size{};
  bool empty() const { return end == first; }
};

struct Chain {
  at::Tensor x;      // 5-D: the input as of the group's start
  at::Tensor meta;   // meta tensor of the chain's current (virtual) output
  std::string mode;  // modes[i] ("" = each step's own)
  Group group;
};

std::array<int64_t, 3> key_of(const Result& r) {
  return {r.kernel_mode, r.padding, r.align_corners ? 1 : 0};
}

// One launch per set of inputs whose groups have equal maps, size and options (up to 4).
void flush(std::vector<Chain>& chains, std::vector<std::pair<int64_t, int64_t>>* groups) {
  std::vector<bool> done(chains.size(), false);
  for (size_t i = 0; i < chains.size(); ++i) {
    if (done[i] || chains[i].group.empty()) continue;
    const Group& g = chains[i].group;
    const std::array<int64_t, 3> k = g.key.value_or(std::array<int64_t, 3>{0, 0, 0});
    std::vector<size_t> members;
    for (size_t j = i; j < chains.size() && members.size() < kMaxTargets; ++j) {
      const Group& h = chains[j].group;
      if (done[j] || h.empty() || h.out_size != g.out_size) continue;
      const std::array<int64_t, 3> kj = h.key.value_or(std::array<int64_t, 3>{0, 0, 0});
      if (kj[1] != k[1] || kj[2] != k[2] || !at::equal(h.product, g.product)) continue;
      members.push_back(j);
      done[j] = true;
    }
    std::vector<at::Tensor> xs;
    std::vector<int64_t> modes, paddings;
    std::vector<std::optional<at::ScalarType>> as_bytes;
    for (size_t j : members) {
      const Chain& c = chains[j];
      const int64_t mode = c.group.key ? (*c.group.key)[0] : 0;
      at::Tensor x = c.x;
      std::optional<at::ScalarType> bytes;
      const auto dt = x.scalar_type();
      if (mode == 0 && (dt == at::kBool || dt == at::kChar)) {  // byte moves, as the steps do
        bytes = dt;
        x = x.view(at::kByte);
      } else if (mode != 0 && !x.is_floating_point()) {
        x = x.to(at::kFloat);  // as each interpolating step: integer input computes in float32
      }
      xs.push_back(x);
      modes.push_back(mode);
      paddings.push_back(k[1]);
      as_bytes.push_back(bytes);
    }
    at::Tensor mats = g.product.narrow(1, 0, 3).contiguous();
    if (!xs[0].is_cpu()) mats = common::host_to(mats, xs[0].device());
    std::vector<at::Tensor> outs =
        voxaug::ops::resample(xs, mats, {g.out_size[0], g.out_size[1], g.out_size[2]}, modes,
                              paddings, std::vector<double>(xs.size(), 0.0), k[2] != 0);
    for (size_t m = 0; m < members.size(); ++m) {
      Chain& c = chains[members[m]];
      if (as_bytes[m]) outs[m] = outs[m].view(*as_bytes[m]);
      if (members[m] == 0 && groups) groups->emplace_back(c.group.first, c.group.end);
      c.x = outs[m];
    }
  }
  for (Chain& c : chains) {
    c.group = Group{};
  }
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

Compose::Compose(std::vector<Step> steps, bool lazy) : steps_(std::move(steps)), lazy_(lazy) {}

int64_t Compose::step_seed(int64_t seed, size_t step) {
  const uint64_t z = splitmix64(static_cast<uint64_t>(seed) ^ splitmix64(step + 1));
  int64_t out;
  std::memcpy(&out, &z, sizeof out);
  return out;
}

std::vector<Draw> Compose::draw(int64_t batch, int64_t seed, int64_t first_sample) const {
  std::vector<Draw> out;
  for (size_t j = 0; j < steps_.size(); ++j) {
    out.push_back(std::visit(
        [&](const auto& t) -> Draw {
          using T = std::decay_t<decltype(t)>;
          if constexpr (kRandom<T>) {
            return t.draw(batch, step_seed(seed, j), first_sample);
          } else {
            return Draw{};
          }
        },
        steps_[j]));
  }
  return out;
}

ComposeResult Compose::operator()(Inputs inputs, int64_t seed, int64_t first_sample,
                                  const Modes& modes, const Affine4& affine) const {
  TORCH_CHECK_VALUE(!inputs.empty(), "inputs must hold at least one tensor");
  const at::Tensor& x0 = inputs[0];
  const int64_t n = x0.defined() && x0.dim() == 5 ? x0.size(0) : 1;
  return apply(inputs, draw(n, seed, first_sample), modes, affine);
}

ComposeResult Compose::apply(Inputs inputs, const std::vector<Draw>& draws, const Modes& modes,
                             const Affine4& affine) const {
  TORCH_CHECK_VALUE(draws.size() == steps_.size(), "draws must hold one Draw per step (",
                    steps_.size(), "), got ", draws.size());
  TORCH_CHECK_VALUE(!inputs.empty(), "inputs must hold at least one tensor");
  TORCH_CHECK_VALUE(modes.size() <= inputs.size(), "modes must have at most one entry per input (",
                    inputs.size(), "), got ", modes.size());
  ComposeResult res;
  Affine4 cur_affine = affine;
  std::vector<Chain> chains;
  std::vector<bool> squeeze;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& x = inputs[i];
    TORCH_CHECK_VALUE(x.defined() && (x.dim() == 4 || x.dim() == 5), "inputs[", i,
                      "] must be 5-D (N, C, D, H, W) or 4-D (C, D, H, W), got ",
                      x.defined() ? std::to_string(x.dim()) + "-D" : std::string("undefined"));
    Chain c;
    c.x = x.dim() == 4 ? x.unsqueeze(0) : x;
    if (i > 0) {  // as every transform's call: one batch, one spatial size, one device
      const at::Tensor& y = chains[0].x;
      TORCH_CHECK_VALUE(c.x.size(0) == y.size(0) && c.x.sizes().slice(2) == y.sizes().slice(2),
                        "inputs[", i, "] must have the batch size and spatial size of inputs[0] (",
                        y.size(0), ", ", y.sizes().slice(2), "), got ", c.x.sizes());
      TORCH_CHECK_VALUE(c.x.device() == y.device(), "inputs[", i,
                        "] must be on inputs[0]'s device ", y.device(), ", got ", c.x.device());
    }
    c.meta = meta_like(c.x);
    c.mode = i < modes.size() ? modes[i] : std::string();
    chains.push_back(std::move(c));
    squeeze.push_back(x.dim() == 4);
  }
  at::Tensor maps, metas;  // products for inputs[0]
  bool ran_alone = false;
  const auto compose_into = [](at::Tensor& acc, const at::Tensor& m) {
    acc = acc.defined() ? at::matmul(acc, m) : m.clone();
  };
  for (size_t j = 0; j < steps_.size(); ++j) {
    const int64_t step = static_cast<int64_t>(j);
    // Plan the step for every input (its own mode) on meta tensors.
    std::vector<Result> plans;
    bool all_maps = lazy_;
    for (Chain& c : chains) {
      plans.push_back(call(steps_[j], {c.meta}, draws[j], c.mode.empty() ? Modes{} : Modes{c.mode},
                           cur_affine));
      all_maps = all_maps && plans.back().single_map;
    }
    compose_into(maps, plans[0].maps);
    compose_into(metas, plans[0].meta);
    if (!all_maps) {  // flush every group, then the step runs as itself on all inputs together
      flush(chains, &res.groups);
      std::vector<at::Tensor> xs;
      for (const Chain& c : chains) xs.push_back(c.x);
      Modes ms;
      for (const Chain& c : chains) ms.push_back(c.mode);
      Result r = call(steps_[j], xs, draws[j], ms, cur_affine);
      for (size_t i = 0; i < chains.size(); ++i) {
        chains[i].x = r.outputs[i];
        chains[i].meta = meta_like(r.outputs[i]);
      }
      res.groups.emplace_back(step, step + 1);
      ran_alone = true;
      cur_affine = r.affine;
      continue;
    }
    bool other = false;  // another interpolation than an input's group: every group ends here
    for (size_t i = 0; i < chains.size(); ++i) {
      const Group& g = chains[i].group;
      other = other || (!plans[i].exact && g.key && *g.key != key_of(plans[i]));
    }
    if (other) flush(chains, &res.groups);
    for (size_t i = 0; i < chains.size(); ++i) {
      Chain& c = chains[i];
      const Result& p = plans[i];
      if (c.group.empty()) c.group.first = step;
      c.group.end = step + 1;
      compose_into(c.group.product, p.maps);
      if (!p.exact && !c.group.key) c.group.key = key_of(p);
      c.group.out_size = p.out_size;
      c.meta = p.outputs[0];
    }
    cur_affine = plans[0].affine;
  }
  flush(chains, &res.groups);
  for (size_t i = 0; i < chains.size(); ++i)
    res.outputs.push_back(squeeze[i] ? chains[i].x.squeeze(0) : chains[i].x);
  res.affine = cur_affine && cur_affine->defined()
                   ? *cur_affine
                   : at::eye(4, at::TensorOptions().dtype(at::kDouble));
  const int64_t n = chains[0].x.size(0);
  res.maps = maps.defined() ? maps : at::eye(4, at::kDouble).expand({n, 4, 4}).clone();
  res.meta = metas.defined() ? metas : res.maps.clone();
  res.out_size = {chains[0].x.size(2), chains[0].x.size(3), chains[0].x.size(4)};
  res.single_map = !ran_alone && res.groups.size() <= 1;
  return res;
}

}  // namespace voxaug::transforms
