// voxaug::transforms::Compose (torch_ext/include/voxaug/compose.h): lazy composition of the C++
// spatial transforms and deformations. Each spatial step is planned on meta tensors (the
// transform's own host code gives its per-sample maps, output size and how it resamples);
// consecutive index maps multiply into one map per input and one resample launch gathers them; a
// deformation's plan (DeformPlan) takes the pending maps into its resample_deformed launch.
#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "transform_common.h"
#include "voxaug/compose.h"
#include "voxaug/resample.h"
#include "voxaug/torch_ops.h"

namespace voxaug::transforms {
namespace {

constexpr size_t kMaxTargets = static_cast<size_t>(kMaxResampleTargets);
constexpr int64_t kBSplineFieldKind = 1;  // DeformPlan::kind of a control-point field

template <class T>
constexpr bool kRandom = std::is_base_of_v<RandomTransform, T>;
template <class T>
constexpr bool kDeform =
    std::is_same_v<T, Rand3DElastic> || std::is_same_v<T, GridDistortion> ||
    std::is_same_v<T, RandGridDistortion> || std::is_same_v<T, RandomElasticDeformation>;

// A spatial step's call (deformations go through deform_plan / deform_gather).
Result call(const Step& step, Inputs xs, const Draw& draw, const Modes& modes,
            const Affine4& affine) {
  return std::visit(
      [&](const auto& t) -> Result {
        using T = std::decay_t<decltype(t)>;
        if constexpr (kDeform<T>) {
          TORCH_INTERNAL_ASSERT(false, "a deformation step has no spatial call");
          return {};
        } else if constexpr (kRandom<T>) {
          return t.apply(xs, draw, modes, affine);
        } else {
          return t(xs, modes, affine);
        }
      },
      step);
}

bool is_deformation(const Step& step) {
  return std::visit([](const auto& t) { return kDeform<std::decay_t<decltype(t)>>; }, step);
}

// A deformation step's gather for n inputs of spatial size `size` on `device`.
DeformPlan deform_plan(const Step& step, int64_t n, const std::array<int64_t, 3>& size,
                       const Draw& draw, const at::Device& device) {
  return std::visit(
      [&](const auto& t) -> DeformPlan {
        using T = std::decay_t<decltype(t)>;
        if constexpr (std::is_same_v<T, GridDistortion>) {
          return t.plan(n, size, device);
        } else if constexpr (kDeform<T>) {
          return t.plan(n, size, draw.uniforms, device);
        } else {
          TORCH_INTERNAL_ASSERT(false, "not a deformation step");
          return {};
        }
      },
      step);
}

// A deformation's kernel mode for an input: its own (image / label) unless `name` is given.
int64_t deform_mode(const Step& step, const std::string& name, int64_t own) {
  if (name.empty()) return own;
  return std::visit(
      [&](const auto& t) -> int64_t {
        using T = std::decay_t<decltype(t)>;
        if constexpr (kDeform<T>) {
          return T::mode_code(name, "modes");
        } else {
          return own;
        }
      },
      step);
}

// (N, 3, 4) -> (N, 4, 4) with the row (0, 0, 0, 1).
at::Tensor square_maps(const at::Tensor& m) {
  at::Tensor out = at::zeros({m.size(0), 4, 4}, m.options());
  out.narrow(1, 0, 3).copy_(m);
  out.select(1, 3).select(1, 3).fill_(1.0);
  return out;
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
  bool crop = false;  // a SpatialCrop / CenterSpatialCrop among the steps
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

// Flips and crops right after a B-spline deformation fold into its launch (Python's
// spatial._fold_after): out(y) = D(F y) = in(M F (y + S u(F y))), F the steps' map (signs S,
// integer offset c) planned on the deformation's output grid: the deformation's map times F, the
// control index scale * S y + (scale * c + offset) per sample, the flipped components of the
// control points negated. Returns the number of steps folded (from `next`), updating the plan,
// the total map F (N, 4, 4) and the steps' results (maps / meta / affine to follow).
size_t fold_after(const std::vector<Step>& steps, size_t next, const std::vector<Draw>& draws,
                  DeformPlan& plan, at::Tensor& total, std::vector<Result>& results,
                  const Affine4& affine) {
  if (plan.kind != kBSplineFieldKind) return 0;
  const int64_t n = plan.mats.size(0);
  std::array<int64_t, 3> size = plan.out_size;
  Affine4 aff = affine;
  size_t count = 0;
  for (size_t k = next; k < steps.size(); ++k) {
    const Step& st = steps[k];
    const bool foldable =
        std::holds_alternative<Flip>(st) || std::holds_alternative<RandFlip>(st) ||
        std::holds_alternative<RandAxisFlip>(st) || std::holds_alternative<SpatialCrop>(st) ||
        std::holds_alternative<CenterSpatialCrop>(st);
    if (!foldable) break;
    const at::Tensor stand_in =
        at::empty({n, 1, size[0], size[1], size[2]}, at::TensorOptions().device(at::kMeta));
    Result r = call(st, {stand_in}, draws[k], Modes{}, aff);
    const at::Tensor lin = r.maps.narrow(1, 0, 3).narrow(2, 0, 3);
    if (!r.single_map || !at::equal(lin, at::diag_embed(at::diagonal(lin, 0, 1, 2)))) break;
    total = total.defined() ? at::matmul(total, r.maps) : r.maps;
    size = r.out_size;
    aff = r.affine;
    results.push_back(std::move(r));
    ++count;
  }
  if (count == 0) return 0;
  const at::Tensor signs = at::diagonal(total.narrow(1, 0, 3).narrow(2, 0, 3), 0, 1, 2);  // (N, 3)
  const at::Tensor shift = total.narrow(1, 0, 3).select(2, 3);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor scale, offset;
  if (plan.field_map) {
    scale = plan.field_map->narrow(1, 0, 3);
    offset = plan.field_map->narrow(1, 3, 3);
  } else {
    scale =
        at::tensor(std::vector<double>(plan.scale.begin(), plan.scale.end()), f64).expand({n, 3});
    offset =
        at::tensor(std::vector<double>(plan.offset.begin(), plan.offset.end()), f64).expand({n, 3});
  }
  plan.field_map = at::cat({scale * signs, scale * shift + offset}, 1).contiguous();
  if ((signs < 0).any().item<bool>()) {
    const at::Tensor neg = signs.to(plan.field.scalar_type()).reshape({n, 3, 1, 1, 1});
    plan.field = plan.field * common::host_to(neg, plan.field.device());
  }
  plan.out_size = size;
  return count;
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
          } else if constexpr (kDeform<T> && !std::is_same_v<T, GridDistortion>) {
            Draw d;
            d.uniforms = t.draw_params(batch, first_sample, step_seed(seed, j));
            return d;
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
    if (is_deformation(steps_[j])) {
      const at::Tensor& m0 = chains[0].meta;  // the deformation's (virtual) input
      const DeformPlan p = deform_plan(steps_[j], m0.size(0), {m0.size(2), m0.size(3), m0.size(4)},
                                       draws[j], chains[0].x.device());
      if (p.identity) continue;  // the call returns its inputs as they are
      std::vector<int64_t> kmodes, kpads;
      bool fuse = lazy_;
      for (size_t i = 0; i < chains.size(); ++i) {
        kmodes.push_back(
            deform_mode(steps_[j], chains[i].mode, i == 0 ? p.image_mode : p.label_mode));
        // A mode named for the input (modes[i]) brings its own scipy reading of 'zeros'.
        kpads.push_back(chains[i].mode.empty() ? (i == 0 ? p.image_padding : p.label_padding)
                                               : common::scipy_padding(chains[i].mode, p.padding));
        const Group& g = chains[i].group;
        fuse = fuse && (!g.key ||
                        ((*g.key)[0] == kmodes[i] && (*g.key)[1] == kpads[i] && (*g.key)[2] == 0));
        // TorchIO's control grid, locked borders and padding belong to a crop's window, which the
        // fused gather would read past: after a crop it runs on the cropped tensor (as Python's).
        fuse = fuse && !(g.crop && std::holds_alternative<RandomElasticDeformation>(steps_[j]));
      }
      if (!fuse) flush(chains, &res.groups);
      DeformPlan q = p;
      at::Tensor folded_map;  // F of the flips / crops folded after the deformation
      std::vector<Result> folded;
      const size_t count =
          lazy_ ? fold_after(steps_, j + 1, draws, q, folded_map, folded, cur_affine) : 0;
      const at::Tensor pm = square_maps(p.mats);
      compose_into(maps, pm);
      std::vector<at::Tensor> mats;
      for (const Chain& c : chains) {
        at::Tensor m = c.group.empty() ? pm : at::matmul(c.group.product, pm);
        if (count) m = at::matmul(m, folded_map);
        mats.push_back(m.narrow(1, 0, 3).contiguous());
      }
      for (const Result& r : folded) {
        compose_into(maps, r.maps);
        compose_into(metas, r.meta);
        cur_affine = r.affine;
      }
      res.groups.emplace_back(chains[0].group.empty() ? step : chains[0].group.first,
                              step + 1 + static_cast<int64_t>(count));
      std::vector<bool> done(chains.size(), false);
      for (size_t i = 0; i < chains.size(); ++i) {  // one launch per set of equal maps
        if (done[i]) continue;
        std::vector<size_t> members;
        for (size_t k = i; k < chains.size() && members.size() < kMaxTargets; ++k)
          if (!done[k] && (k == i || at::equal(mats[k], mats[i]))) {
            members.push_back(k);
            done[k] = true;
          }
        std::vector<at::Tensor> xs;
        std::vector<int64_t> ms, ps;
        for (size_t k : members) {
          xs.push_back(chains[k].x);
          ms.push_back(kmodes[k]);
          ps.push_back(kpads[k]);
        }
        const std::vector<at::Tensor> outs = deform_gather(q, xs, ms, mats[i], ps);
        for (size_t m = 0; m < members.size(); ++m) {
          chains[members[m]].x = outs[m];
          chains[members[m]].meta = meta_like(outs[m]);
        }
      }
      for (Chain& c : chains) c.group = Group{};
      ran_alone = true;
      j += count;
      continue;
    }
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
      c.group.crop = c.group.crop || std::holds_alternative<SpatialCrop>(steps_[j]) ||
                     std::holds_alternative<CenterSpatialCrop>(steps_[j]);
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
  const at::Tensor eye = at::eye(4, at::kDouble).expand({n, 4, 4});
  res.maps = maps.defined() ? maps : eye.clone();
  res.meta = metas.defined() ? metas : eye.clone();
  res.out_size = {chains[0].x.size(2), chains[0].x.size(3), chains[0].x.size(4)};
  res.single_map = !ran_alone && res.groups.size() <= 1;
  return res;
}

}  // namespace voxaug::transforms
