// The LibTorch patch queue (voxaug/patch_queue.h): TorchIO Queue's fill order and the TorchIO
// samplers, step for step as python/voxaug/crop.py implements them (PatchQueue, _Sampler).
#include "voxaug/patch_queue.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "voxaug/torch_ops.h"

namespace voxaug {
namespace {

constexpr int64_t kSamplerBlock = 16;  // centres drawn per device call (crop.py's _SAMPLER_BLOCK)
constexpr int64_t kForeground = 0, kArgmax = 1, kOneHot = 2;  // class_crop_centers label forms

std::string shape_str(at::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

std::array<int64_t, 3> checked_patch_size(std::array<int64_t, 3> p) {
  for (int64_t v : p)
    TORCH_CHECK_VALUE(v >= 1, "patch_size must be 3 positive ints, got [", p[0], ", ", p[1], ", ",
                      p[2], "]");
  return p;
}

// A uniform 64-bit seed from the generator: two 32-bit draws, as _Randomizable._next_seed.
int64_t next_seed(const at::Generator& gen) {
  const at::Tensor r = at::randint(0, int64_t{1} << 32, {2}, gen, at::kLong);
  const uint64_t hi = static_cast<uint64_t>(r[0].item<int64_t>());
  const uint64_t lo = static_cast<uint64_t>(r[1].item<int64_t>());
  return static_cast<int64_t>((hi << 32) | lo);
}

std::vector<int64_t> randperm(int64_t n, const at::Generator& gen) {
  const at::Tensor p = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
  return std::vector<int64_t>(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n);
}

std::vector<int64_t> valid_region(const std::array<int64_t, 3>& patch, at::IntArrayRef shape) {
  std::vector<int64_t> r(6);
  for (int a = 0; a < 3; ++a) {
    r[a] = patch[a] / 2;
    r[a + 3] = shape[a] - (patch[a] - 1) / 2;
  }
  return r;
}

}  // namespace

PatchSampler PatchSampler::uniform(std::array<int64_t, 3> patch_size) {
  PatchSampler s;
  s.kind = Kind::Uniform;
  s.patch_size = checked_patch_size(patch_size);
  return s;
}

PatchSampler PatchSampler::weighted(std::array<int64_t, 3> patch_size, std::string probability_map,
                                    bool check) {
  TORCH_CHECK_VALUE(!probability_map.empty(), "probability_map must name a tensor of the subject");
  PatchSampler s;
  s.kind = Kind::Weighted;
  s.patch_size = checked_patch_size(patch_size);
  s.tensor_name = std::move(probability_map);
  s.check = check;
  return s;
}

PatchSampler PatchSampler::label(std::array<int64_t, 3> patch_size, std::string label_name,
                                 std::map<int64_t, double> label_probabilities, bool check) {
  TORCH_CHECK_VALUE(!label_name.empty(), "label_name must name a tensor of the subject");
  double total = 0.0;
  for (const auto& [k, v] : label_probabilities) {
    TORCH_CHECK_VALUE(k >= 0, "label_probabilities keys must be labels >= 0, got ", k);
    TORCH_CHECK_VALUE(v >= 0.0 && std::isfinite(v),
                      "label_probabilities values must be finite and >= 0, got ", v, " for label ",
                      k);
    total += v;
  }
  TORCH_CHECK_VALUE(label_probabilities.empty() || total > 0.0,
                    "label_probabilities must not all be 0");
  PatchSampler s;
  s.kind = Kind::Label;
  s.patch_size = checked_patch_size(patch_size);
  s.tensor_name = std::move(label_name);
  s.label_probabilities = std::move(label_probabilities);
  s.check = check;
  return s;
}

PatchQueue::PatchQueue(std::vector<Subject> subjects, int64_t max_length,
                       int64_t samples_per_volume, PatchSampler sampler, PatchQueueOptions options)
    : subjects_(std::move(subjects)),
      max_length_(max_length),
      samples_per_volume_(samples_per_volume),
      sampler_(std::move(sampler)),
      options_(std::move(options)) {
  TORCH_CHECK_VALUE(max_length >= 1, "max_length must be a positive int, got ", max_length);
  TORCH_CHECK_VALUE(samples_per_volume >= 1, "samples_per_volume must be a positive int, got ",
                    samples_per_volume);
  TORCH_CHECK_VALUE(options_.batch_size >= 1, "batch_size must be a positive int, got ",
                    options_.batch_size);
  TORCH_CHECK_VALUE(!subjects_.empty(), "subjects must not be empty");
  checked_patch_size(sampler_.patch_size);
  const auto& p = sampler_.patch_size;
  for (std::size_t i = 0; i < subjects_.size(); ++i) {
    Subject& s = subjects_[i];
    TORCH_CHECK_VALUE(!s.tensors.empty(), "subject ", i, " holds no tensor");
    TORCH_CHECK_VALUE(s.num_samples >= 0, "subject ", i,
                      ": num_samples must be >= 0 (0: samples_per_volume), got ", s.num_samples);
    std::optional<std::vector<int64_t>> spatial;
    for (auto& [name, t] : s.tensors) {
      TORCH_CHECK_VALUE(t.defined(), "subject ", i, ": tensor '", name, "' is undefined");
      TORCH_CHECK_VALUE(t.dim() == 4 || (t.dim() == 5 && t.size(0) == 1), "subject ", i,
                        ": tensor '", name, "' must be (C, D, H, W) or (1, C, D, H, W), got ",
                        shape_str(t.sizes()));
      at::Tensor v = t.dim() == 5 ? t : t.unsqueeze(0);
      if (options_.device) v = v.to(*options_.device);
      t = v;
      const std::vector<int64_t> sp(v.sizes().begin() + 2, v.sizes().end());
      if (!spatial) spatial = sp;
      TORCH_CHECK_VALUE(*spatial == sp, "subject ", i,
                        ": all tensors must share the spatial shape, got ", shape_str(*spatial),
                        " and ", shape_str(sp), " ('", name, "')");
      TORCH_CHECK_VALUE(v.device() == s.tensors.begin()->second.device(), "subject ", i,
                        ": all tensors must be on one device, '", name, "' is on ", v.device());
    }
    for (int a = 0; a < 3; ++a)
      TORCH_CHECK_VALUE(p[a] <= (*spatial)[a], "subject ", i, ": patch size [", p[0], ", ", p[1],
                        ", ", p[2], "] cannot be larger than image size ", shape_str(*spatial));
    if (sampler_.kind != PatchSampler::Kind::Uniform) {
      auto it = s.tensors.find(sampler_.tensor_name);
      TORCH_CHECK_VALUE(it != s.tensors.end(), "subject ", i, ": the sampler's tensor '",
                        sampler_.tensor_name, "' is not in the subject");
      if (sampler_.kind == PatchSampler::Kind::Label && it->second.size(1) > 1)
        for (const auto& kv : sampler_.label_probabilities)
          TORCH_CHECK_VALUE(kv.first < it->second.size(1), "subject ", i,
                            ": label_probabilities key ", kv.first, " is not a channel of the ",
                            it->second.size(1), "-channel label '", sampler_.tensor_name, "'");
    }
  }
  generator_ = options_.seed ? at::make_generator<at::CPUGeneratorImpl>(*options_.seed)
                             : at::detail::getDefaultCPUGenerator();
  new_pass();
}

int64_t PatchQueue::num_samples(const Subject& s) const {
  return s.num_samples > 0 ? s.num_samples : samples_per_volume_;
}

int64_t PatchQueue::size() const {
  int64_t total = 0;
  for (const Subject& s : subjects_) total += num_samples(s);
  return total;
}

int64_t PatchQueue::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? size() / b : (size() + b - 1) / b;
}

void PatchQueue::new_pass() {
  const int64_t n = static_cast<int64_t>(subjects_.size());
  if (options_.shuffle_subjects) {
    order_ = randperm(n, generator_);
  } else {
    order_.resize(n);
    for (int64_t i = 0; i < n; ++i) order_[i] = i;
  }
  pos_ = 0;
  num_sampled_ = 0;
}

std::size_t PatchQueue::next_subject() {
  if (pos_ >= order_.size()) new_pass();
  return static_cast<std::size_t>(order_[pos_++]);
}

// The sampler's draw for one subject visit: blocks of up to 16 centres (crop.py's
// _Sampler.locations with num_patches = n); the patches are cut when taken.
void PatchQueue::sample(std::size_t index, int64_t n) {
  if (n <= 0) return;
  const Subject& subject = subjects_[index];
  const at::Tensor& first = subject.tensors.begin()->second;
  const auto& p = sampler_.patch_size;
  const std::vector<int64_t> region = valid_region(p, first.sizes().slice(2));
  const int64_t seed = next_seed(generator_);  // at::randint locks the generator itself
  for (int64_t done = 0; done < n;) {
    const int64_t count = std::min(kSamplerBlock, n - done);
    at::Tensor centers;
    if (sampler_.kind == PatchSampler::Kind::Uniform) {
      centers = ops::uniform_crop_centers(first, count, region, seed, 0, done);
    } else if (sampler_.kind == PatchSampler::Kind::Weighted) {
      const at::Tensor& map = subject.tensors.at(sampler_.tensor_name);
      auto [c, stats] = ops::weighted_crop_centers(map, false, count, region, seed, 0, done);
      if (sampler_.check && done == 0) {
        const at::Tensor st = stats.cpu();
        TORCH_CHECK_VALUE(!(st.select(1, 2) < 0).any().item<bool>(),
                          "Negative values found in probability map \"", sampler_.tensor_name,
                          "\" (subject ", index, ")");
        TORCH_CHECK(!(st.select(1, 0) == 0).any().item<bool>(),
                    "Empty probability map found (subject ", index, ", map \"",
                    sampler_.tensor_name,
                    "\"): voxels with positive probability might be near the image border; try "
                    "padding by half the patch size [",
                    p[0] / 2, ", ", p[1] / 2, ", ", p[2] / 2, "]");
      }
      centers = c;
    } else {
      at::Tensor lab = subject.tensors.at(sampler_.tensor_name);
      const auto& probs = sampler_.label_probabilities;
      int64_t form;
      std::vector<double> ratios;
      if (probs.empty()) {
        form = kForeground;
        ratios = {1.0, 0.0};
        lab = lab.narrow(1, 0, 1);
      } else if (lab.size(1) > 1) {
        form = kOneHot;
        ratios.assign(lab.size(1), 0.0);
        for (const auto& [k, v] : probs) ratios[k] = v;
      } else {
        form = kArgmax;
        ratios.assign(probs.rbegin()->first + 1, 0.0);
        for (const auto& [k, v] : probs) ratios[k] = v;
      }
      auto [c, counts] = ops::class_crop_centers(lab, std::nullopt, 0.0, form, ratios, count,
                                                 std::nullopt, region, seed, 0, done);
      if (sampler_.check && done == 0) {
        const at::Tensor r = at::tensor(ratios, at::kDouble);
        const at::Tensor present = (counts.cpu() > 0).logical_and(r > 0);
        TORCH_CHECK(present.any(1).all().item<bool>(), "Empty probability map found (subject ",
                    index, ", label \"", sampler_.tensor_name,
                    "\"): no labelled voxel with a positive probability in the valid region; "
                    "voxels might be near the image border");
      }
      centers = c;
    }
    // TorchIO's location (ini, ini + patch), ini = centre - patch // 2.
    std::vector<at::Tensor> ini, fin;
    for (int a = 0; a < 3; ++a) {
      ini.push_back(centers.select(2, a) - p[a] / 2);
      fin.push_back(ini.back() + p[a]);
    }
    ini.insert(ini.end(), fin.begin(), fin.end());
    const at::Tensor loc = at::stack(ini, 2);  // (1, count, 6)
    for (int64_t i = 0; i < count; ++i) entries_.push_back({index, loc.select(1, i)});
    done += count;
  }
}

// TorchIO Queue._fill.
void PatchQueue::fill() {
  if (incomplete_) {
    sample(*incomplete_, num_incomplete_);
    incomplete_.reset();
  }
  while (true) {
    const std::size_t index = next_subject();
    const int64_t n = num_samples(subjects_[index]);
    const int64_t free = std::max<int64_t>(0, max_length_ - num_patches());
    if (free < n) {
      incomplete_ = index;
      num_incomplete_ = n - free;
    }
    sample(index, std::min(n, free));
    ++num_sampled_;
    if (num_patches() >= max_length_ || num_sampled_ >= subjects_.size()) break;
  }
  if (options_.shuffle_patches) {
    const std::vector<int64_t> perm = randperm(num_patches(), generator_);
    std::vector<Entry> shuffled;
    shuffled.reserve(entries_.size());
    for (int64_t i : perm) shuffled.push_back(std::move(entries_[i]));
    entries_ = std::move(shuffled);
  }
  std::reverse(entries_.begin(), entries_.end());  // pop_back() gives the fill order
}

PatchQueue::Entry PatchQueue::pop_entry() {
  if (entries_.empty()) fill();
  Entry e = std::move(entries_.back());
  entries_.pop_back();
  return e;
}

// The entries' patches as one batch: per tensor name one gather_patches over the distinct
// subjects of the batch (crop.py's PatchQueue._cut).
Batch PatchQueue::cut(const std::vector<Entry>& entries) const {
  Batch batch;
  std::vector<std::size_t> used;              // distinct subjects, first-seen order
  std::vector<int64_t> slot(entries.size());  // each patch's volume in `used`
  std::vector<at::Tensor> locations;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const std::size_t s = entries[k].subject;
    const auto it = std::find(used.begin(), used.end(), s);
    slot[k] = it - used.begin();
    if (it == used.end()) used.push_back(s);
    locations.push_back(entries[k].location);
    batch.subjects.push_back(static_cast<int64_t>(s));
  }
  batch.location = entries.size() == 1 ? entries[0].location : at::cat(locations);
  const at::Tensor starts = batch.location.narrow(1, 0, 3);
  const auto& p = sampler_.patch_size;
  std::vector<at::Tensor> volumes(used.size());
  for (const auto& kv : subjects_[entries[0].subject].tensors) {
    for (std::size_t j = 0; j < used.size(); ++j)
      volumes[j] = subjects_[used[j]].tensors.at(kv.first);
    batch.tensors[kv.first] = ops::gather_patches(volumes, slot, starts, {p[0], p[1], p[2]});
  }
  return batch;
}

Patch PatchQueue::pop() {
  Batch b = cut({pop_entry()});
  Patch patch;
  patch.tensors = std::move(b.tensors);
  patch.location = b.location;
  patch.subject = b.subjects[0];
  return patch;
}

Batch PatchQueue::take(int64_t count) {
  TORCH_CHECK_VALUE(count >= 1, "count must be a positive int, got ", count);
  std::vector<Entry> entries;
  entries.reserve(count);
  for (int64_t i = 0; i < count; ++i) entries.push_back(pop_entry());
  Batch batch = cut(entries);
  if (options_.transform) options_.transform(batch);
  return batch;
}

PatchQueue::EpochIterator::EpochIterator(PatchQueue* queue, int64_t patches)
    : queue_(queue), left_(patches) {
  ++*this;
}

PatchQueue::EpochIterator& PatchQueue::EpochIterator::operator++() {
  if (queue_ == nullptr) return *this;
  const int64_t bs = queue_->options_.batch_size;
  const int64_t b = std::min(bs, left_);
  if (b <= 0 || (queue_->options_.drop_last && b < bs)) {
    queue_ = nullptr;
    left_ = 0;
    batch_ = Batch{};
    return *this;
  }
  batch_ = queue_->take(b);
  left_ -= b;
  return *this;
}

}  // namespace voxaug
